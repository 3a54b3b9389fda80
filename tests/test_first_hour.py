"""What a newcomer runs into in the first hour: each mistake ends in one line that says what to do.

Missing extras, model paths that do not exist, a WebArena deployment that is down, a report with
nothing to report, a YAML config that sets its own turn budget, ``agentgym collect`` without the
trainer stack and ``agentgym eval --model`` without the network.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import gymnasium as gym
import pytest

from agentgym_envs.cli import main

ROOT = Path(__file__).resolve().parents[1]


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_missing_wordle_extra_names_the_pip_command(monkeypatch, capsys) -> None:
    """english-words installed without its metadata (or not at all) used to raise a bare PackageNotFoundError."""
    from agentgym_envs.wordle import words

    real_version = metadata.version

    def version(name: str) -> str:
        if name == "english-words":
            raise metadata.PackageNotFoundError(name)
        return real_version(name)

    cached = (words._lists, words._answers_with_frequency, words._answer_words)
    for function in cached:
        function.cache_clear()
    monkeypatch.setattr(metadata, "version", version)
    try:
        assert main(["play", "AgentGym/Wordle-v0", "--agent", "oracle"]) == 2
    finally:
        for function in cached:  # the other tests get the real word lists back
            function.cache_clear()
    (line,) = error_lines(capsys.readouterr().err)
    assert line.startswith("agentgym: error:") and "'english-words'" in line
    assert line.endswith("pip install 'agentgym-rl[wordle]'")


def load_example(name: str):
    """An example script as a module (its ``main`` and ``parse_args`` run in-process)."""
    pytest.importorskip("trl")
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def train_command():
    """The trainer's command (``agentgym_trl.train``, which examples/grpo.py runs)."""
    pytest.importorskip("trl")
    from agentgym_trl import train

    return train


@pytest.mark.parametrize("budget", ["max_turns: 5", "turn_rounds: [2, 4]\nturn_round_steps: 3"])
def test_a_yaml_config_with_its_own_budget_replaces_the_default_schedule(tmp_path: Path, budget: str) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(f"env_ids: [AgentGym/TextCraft-Depth1-v0]\n{budget}\n")
    args, _, _ = train_command().parse_args(["--preset", "cpu-demo", "--config", str(config),
                                                  "--output_dir", str(tmp_path / "run")])
    assert args.max_turns_schedule is None
    assert args.turn_schedule().max_turns == (5 if "max_turns" in budget else 4)


def test_a_missing_config_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"^error: --config: cannot read .*nope\.yaml: No such file"):
        train_command().parse_args(["--config", str(tmp_path / "nope.yaml")])


@pytest.mark.parametrize("model", ["./no-such-model", "no-such-org/no-such-model"])
def test_grpo_with_a_model_that_is_not_here_is_one_line(tmp_path: Path, capsys, monkeypatch, model: str) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    grpo = train_command()
    with pytest.raises(SystemExit) as stopped:
        grpo.main(["--model_name_or_path", model, "--output_dir", str(tmp_path / "run")])
    assert stopped.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert line.startswith("error: --model_name_or_path: ")
    if model.startswith("."):
        assert line.endswith("model path ./no-such-model does not exist")
    else:
        assert "neither a local folder nor in the Hugging Face cache" in line and "HF_HUB_OFFLINE=0" in line


NO_NETWORK = """
import socket, sys
real_connect = socket.socket.connect

def connect(sock, address):
    host = address[0] if isinstance(address, tuple) else address
    if host not in ("127.0.0.1", "::1", "localhost") and not str(host).startswith("/"):
        print(f"NETWORK: {address}", file=sys.stderr)
        raise OSError("the network is closed in this test")
    return real_connect(sock, address)

socket.socket.connect = connect
real_getaddrinfo = socket.getaddrinfo

def getaddrinfo(host, *args, **kwargs):
    if host not in ("127.0.0.1", "::1", "localhost", None):
        print(f"NETWORK: resolve {host}", file=sys.stderr)
        raise socket.gaierror("the network is closed in this test")
    return real_getaddrinfo(host, *args, **kwargs)

socket.getaddrinfo = getaddrinfo
from agentgym_envs.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_without_network(argv: list[str], home: Path) -> subprocess.CompletedProcess:
    """``agentgym ...`` in a fresh process where any connection beyond loopback is refused and reported."""
    pytest.importorskip("transformers")
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("HF_", "TRANSFORMERS_", "HUGGINGFACE_"))}  # not told to stay offline
    environment.update(HF_HOME=str(home / "hf"), PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-c", NO_NETWORK, *argv], capture_output=True, text=True, cwd=home,
                          env=environment, timeout=300, check=False)


def test_eval_of_a_model_that_is_not_here_never_asks_the_hub(tmp_path: Path) -> None:
    done = run_without_network(["eval", "--model", "no-such-org/no-such-model", "--env", "AgentGym/TextCraft-Depth1-v0",
                                "--limit", "1", "--no-progress"], tmp_path)
    assert "NETWORK" not in done.stderr, done.stderr
    assert done.returncode == 2
    (line,) = error_lines(done.stderr)
    assert line.startswith("agentgym: error: model no-such-org/no-such-model is neither a local folder nor in the "
                           "Hugging Face cache")


def test_eval_of_a_cached_hub_model_plays_without_the_network(tmp_path: Path) -> None:
    """A hub id in the local cache loads from its snapshot folder: transformers never asks whether it changed."""
    from tiny_model import save_tiny

    repo = tmp_path / "hf" / "hub" / "models--tiny-org--tiny-agent"
    save_tiny(repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    done = run_without_network(["eval", "--model", "tiny-org/tiny-agent", "--env", "AgentGym/TextCraft-Depth1-v0",
                                "--limit", "1", "--max-turns", "1", "--max-turn-tokens", "8", "--out",
                                str(tmp_path / "eval"), "--no-progress"], tmp_path)
    assert "NETWORK" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "eval" / "trajectories.jsonl").read_text().count("\n") == 1


def test_a_real_webarena_site_that_is_down_is_one_line(tmp_path: Path, capsys) -> None:
    from agentgym_envs.web import chromium_missing_reason

    if chromium_missing_reason() is not None:
        pytest.skip(str(chromium_missing_reason()))
    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = {"task_id": 7, "sites": ["shopping"], "start_url": "__SHOPPING__", "intent": "Search for yoga mats",
              "eval": {"eval_types": ["url_match"], "reference_url": "__SHOPPING__/search?q=yoga"}}
    (tmp_path / "7.json").write_text(json.dumps(config))
    env = gym.make("AgentGym/WebArena-Shopping-v0", config_path=str(tmp_path), base_urls={"shopping": dead})
    try:
        with pytest.raises(ConnectionError) as raised:
            env.reset(options={"item_id": 7})
        message = str(raised.value)
        assert message == (f"the WebArena site 'shopping' does not answer at {dead} (net::ERR_CONNECTION_REFUSED): "
                           "start the deployment, or point base_urls={'shopping': ...} or $WEBARENA_SHOPPING at it")
    finally:
        env.close()
    kwargs = [f"config_path={tmp_path}", "base_urls=" + json.dumps({"shopping": dead})]
    assert main(["play", "AgentGym/WebArena-Shopping-v0", "--item-id", "7", "--env-kwargs", *kwargs]) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert line == f"agentgym: error: {message}"


def test_a_turn_budget_report_without_a_run_is_one_line(tmp_path: Path) -> None:
    turn_budget = load_example("turn_budget")
    with pytest.raises(SystemExit, match=r"^error: nothing to report in .*empty: the start has not been evaluated"):
        turn_budget.main(["--report_only", "true", "--out_dir", str(tmp_path / "empty")])


WITHOUT_TRAINER_STACK = """
import importlib.abc, importlib.util, sys
HIDDEN = ("torch", "transformers", "trl", "accelerate", "peft")

class Uninstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Uninstalled())
real_find_spec = importlib.util.find_spec  # what libraries probe to see whether torch is installed
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] in HIDDEN else real_find_spec(name, package))
from agentgym_envs.cli import main
code = main(["collect", "--env", "AgentGym/TextCraft-Depth1-v0", "--n", "2", "--out", sys.argv[1]])
loaded = [name for name in HIDDEN if name in sys.modules]
assert not loaded, loaded
sys.exit(code)
"""


def test_collect_works_with_the_collect_extra_alone(tmp_path: Path) -> None:
    """``datasets`` without torch, TRL or transformers (as ``pip install 'agentgym-rl[collect]'`` installs it)."""
    pytest.importorskip("datasets")
    done = subprocess.run([sys.executable, "-c", WITHOUT_TRAINER_STACK, str(tmp_path / "oracle")], capture_output=True,
                          text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wrote 2 conversations to" in done.stdout


def test_the_collect_extra_brings_datasets_without_the_trainer_stack() -> None:
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {requirement.split(">")[0].split("=")[0].split("[")[0] for requirement in extras["collect"]}
    assert names == {"datasets"}
    assert "agentgym-rl[collect]" in extras["train"]
    assert "collect" in extras["all"][0]


def test_eval_of_an_endpoint_without_the_openai_client_names_the_extra(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # as if the [endpoint] extra were not installed
    assert main(["eval", "--endpoint", "http://127.0.0.1:1/v1", "--model", "m", "--env",
                 "AgentGym/TextCraft-Depth1-v0", "--no-progress"]) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert line == ("agentgym: error: evaluating an endpoint needs the openai client: "
                    "pip install 'agentgym-rl[endpoint]'")
