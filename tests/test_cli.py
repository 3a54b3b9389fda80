"""The ``agentgym`` command line."""

from __future__ import annotations

import json

import pytest

from agentgym_envs.cli import main


def test_list_shows_every_id(capsys) -> None:
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    textcraft = {row["id"]: row for row in rows if row["id"].startswith("AgentGym/TextCraft")}
    assert textcraft["AgentGym/TextCraft-v0"]["test"] == 100 and textcraft["AgentGym/TextCraft-Depth4-v0"]["turns"] == 30
    assert textcraft["AgentGym/TextCraft-v0"]["sub-task"] is None and textcraft["AgentGym/TextCraft-Depth1-v0"]["train"] > 0
    assert all(row["installed"] is True and row["install"] is None for row in textcraft.values())
    assert main(["list"]) == 0 and "AgentGym/TextCraft-Depth2-v0" in capsys.readouterr().out


def test_play_with_the_oracle(capsys) -> None:
    assert main(["play", "AgentGym/TextCraft-Depth2-v0", "--agent", "oracle", "--item-id", "130"]) == 0
    out = capsys.readouterr().out
    assert "Crafting commands:" in out and "# success" in out


def test_play_as_a_human(monkeypatch, capsys) -> None:
    answers = ["inventory", "dance"]

    def fake_input(prompt: str = "") -> str:
        if not answers:
            raise EOFError  # the terminal closed: play stops cleanly
        return answers.pop(0)

    monkeypatch.setattr("builtins.input", fake_input)
    assert main(["play", "AgentGym/TextCraft-Depth1-v0", "--item-id", "0"]) == 130
    out = capsys.readouterr().out
    assert "Inventory: You are not carrying anything." in out and "Could not execute dance" in out


def test_solve_reports_success_rate(capsys) -> None:
    assert main(["solve", "AgentGym/TextCraft-Depth1-v0", "--agent", "oracle"]) == 0
    assert "31/31 = 100.0% success" in capsys.readouterr().out


def test_unknown_id_is_a_clear_error(capsys) -> None:
    assert main(["play", "AgentGym/NoSuchEnv-v0"]) == 2
    assert "doesn't exist" in capsys.readouterr().err


def test_version(capsys) -> None:
    from importlib import metadata

    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentgym {metadata.version('agentgym-rl')}"
