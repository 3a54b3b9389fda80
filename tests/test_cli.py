"""The ``agentgym`` command line."""

from __future__ import annotations

import json

import pytest

from agentgym_envs.cli import main


def test_list_shows_every_id(capsys) -> None:
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    textcraft = {row["id"]: row for row in rows if row["id"].startswith("AgentGym/TextCraft")}
    family, depth1 = textcraft["AgentGym/TextCraft-v0"], textcraft["AgentGym/TextCraft-Depth1-v0"]
    assert family["test"] == 100 and textcraft["AgentGym/TextCraft-Depth4-v0"]["turns"] == 30
    assert family["sub-task"] is None and depth1["sub-task"] == "Depth1" and depth1["train"] > 0
    assert all(row["installed"] is True and row["install"] is None for row in textcraft.values())
    remote = rows[-1]  # issue 62: "every id" includes the proxy, whose splits and cap are the served id's
    assert remote["id"] == "AgentGym/Remote-v0" and remote["turns"] is None and remote["installed"] is True
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "AgentGym/TextCraft-Depth2-v0" in out and "Also AgentGym/Remote-v0: any id above" in out


def test_play_with_the_oracle(capsys) -> None:
    assert main(["play", "AgentGym/TextCraft-Depth2-v0", "--agent", "oracle", "--item-id", "130"]) == 0
    out = capsys.readouterr().out
    assert "Crafting commands:" in out and "# success" in out


def test_play_as_a_human(monkeypatch, capsys) -> None:
    answers = ["Action: inventory", "Action: dance"]  # a reply as AgentGym's client reads it

    def fake_input(prompt: str = "") -> str:
        if not answers:
            raise EOFError  # the terminal closed: play stops cleanly
        return answers.pop(0)

    monkeypatch.setattr("builtins.input", fake_input)
    assert main(["play", "AgentGym/TextCraft-Depth1-v0", "--item-id", "0"]) == 130
    out = capsys.readouterr().out
    assert "Inventory: You are not carrying anything." in out and "Could not execute dance" in out
    assert "Ctrl-D or Ctrl-C stops" in out.splitlines()[0]  # said before the game starts


def test_solve_reports_success_rate(capsys) -> None:
    assert main(["solve", "AgentGym/TextCraft-Depth1-v0", "--agent", "oracle"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split() == ["overall", "31", "31", "100.0"]


def test_unknown_id_is_a_clear_error(capsys) -> None:
    assert main(["play", "AgentGym/NoSuchEnv-v0"]) == 2
    assert "doesn't exist" in capsys.readouterr().err


def test_version(capsys) -> None:
    from importlib import metadata

    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentgym {metadata.version('agentgym-rl')}"


def test_env_kwargs_reach_every_env_the_command_makes(tmp_path, capsys) -> None:
    from agentgym_envs.core.kwargs import parse_env_kwarg

    assert parse_env_kwarg("lenient_crafting=true") == ("lenient_crafting", True)
    assert parse_env_kwarg('base_urls={"shopping": "http://h:7770"}') == ("base_urls", {"shopping": "http://h:7770"})
    assert parse_env_kwarg("config_path=configs/x") == ("config_path", "configs/x")
    out = tmp_path / "lenient"
    argv = ["eval", "--agent", "oracle", "--env", "AgentGym/TextCraft-Depth1-v0", "--limit", "1", "--out", str(out),
            "--no-progress"]
    assert main([*argv, "--env-kwargs", "lenient_crafting=true"]) == 0
    assert json.loads((out / "run.json").read_text())["agent"]["env_kwargs"] == {"lenient_crafting": True}
    assert main(argv) == 2  # other kwargs, other episodes: the run folder is not resumed with them
    assert "holds a run of another agent" in capsys.readouterr().err
    assert main(["solve", "AgentGym/TextCraft-Depth1-v0", "--limit", "2", "--env-kwargs", "lenient_crafting=1"]) == 0
    assert main(["collect", "--env", "AgentGym/TextCraft-Depth1-v0", "--n", "1", "--out", str(tmp_path / "data"),
                 "--env-kwargs", "lenient_crafting=true"]) == 0
    header = json.loads((tmp_path / "data" / "episodes.jsonl").read_text().splitlines()[0])
    assert header["settings"]["env_kwargs"] == {"lenient_crafting": True}


def test_an_env_kwarg_the_env_does_not_take_is_one_line(capsys) -> None:
    assert main(["play", "AgentGym/TextCraft-Depth1-v0", "--agent", "oracle", "--env-kwargs", "lenient=true"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == ("agentgym: error: AgentGym/TextCraft-Depth1-v0 takes no keyword argument 'lenient'; it takes: "
                    "lenient_crafting, recipe_list, render_mode")
    with pytest.raises(SystemExit):
        main(["play", "AgentGym/TextCraft-Depth1-v0", "--env-kwargs", "no-equals-sign"])
    assert "expected key=value" in capsys.readouterr().err
