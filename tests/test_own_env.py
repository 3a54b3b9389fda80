"""An env of one's own, registered with plain ``gym.register`` (docs/own_env.md): the conformance checks, and
``agentgym serve / eval / collect`` through Gymnasium's ``module:EnvId`` form, importing the module (issue 62,
items 2 and 3)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentgym_envs import testing
from agentgym_envs.cli import main

ROOT = Path(__file__).resolve().parents[1]
MODULE = "own_env_guess62"
GUESS = "MyGames/Guess62-v0"
#: docs/own_env.md's game in a module of its own (a unique id: the registry is the process's)
SOURCE = (ROOT / "examples" / "mygames.py").read_text(encoding="utf-8").replace("MyGames/Guess-v0", GUESS)


@pytest.fixture
def own_module(tmp_path, monkeypatch) -> str:
    """The guessing game as ``own_env_guess62.py`` in the current folder, not imported yet."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    return f"{MODULE}:{GUESS}"


def test_the_conformance_checks_run_on_an_env_registered_with_gym_register(own_module) -> None:
    """It has no TaskSpec: items 0 and 1, action-space samples, Gymnasium's rules where ours promise more."""
    testing.check_text_env(own_module, memory_resets=20)
    assert testing.task_of(GUESS) is None and testing.first_items(GUESS) == [0, 1]


def test_the_checks_still_find_what_an_own_env_gets_wrong(tmp_path, monkeypatch) -> None:
    """The page's first version read guesses with ``isdigit()``: ``int("²")`` raises, which the hostile check finds."""
    broken = SOURCE.replace('c in "0123456789"', "c.isdigit()").replace(GUESS, "MyGames/Broken62-v0")
    (tmp_path / "broken_guess62.py").write_text(broken, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError, match="hostile actions raised"):
        testing.check_text_env("broken_guess62:MyGames/Broken62-v0")


def test_eval_imports_the_module_and_plays_the_named_items(own_module, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["eval", "--env", own_module, "--agent", "random", "--items", "0", "1", "2", "--out", str(out),
                 "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 3 and GUESS in capsys.readouterr().out
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(record["item_id"] for record in records) == [0, 1, 2]
    assert {record["max_turns"] for record in records} == {5}  # its max_episode_steps


def test_eval_of_an_env_without_splits_asks_for_items(own_module, tmp_path, capsys) -> None:
    assert main(["eval", "--env", own_module, "--agent", "random", "--out", str(tmp_path / "run")]) == 2
    assert "--items" in capsys.readouterr().err


def test_a_module_that_cannot_be_imported_is_one_error_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--env", "no_such_module62:MyGames/X-v0", "--agent", "random"]) == 2
    assert "cannot import 'no_such_module62'" in capsys.readouterr().err


def test_collect_says_it_needs_splits(own_module, tmp_path, capsys) -> None:
    assert main(["collect", "--env", own_module, "--n", "1", "--out", str(tmp_path / "data")]) == 2
    assert "register_family" in capsys.readouterr().err


def test_serve_imports_the_module_and_serves_the_env(own_module, tmp_path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "agentgym_envs.cli", "serve", "--env", own_module, "--port",
                               str(port)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.stderr.read().decode()[-2000:]
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.3)
        assert health["env_ids"] == [GUESS]
    finally:
        server.terminate()
        server.wait(timeout=30)
