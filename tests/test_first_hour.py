"""What a newcomer runs into in the first hour: each mistake ends in one line that says what to do.

Missing extras, model paths that do not exist, a WebArena deployment that is down, a report with
nothing to report, a YAML config that sets its own turn budget, ``agentgym collect`` without the
trainer stack and ``agentgym eval --model`` without the network.
"""

from __future__ import annotations

from importlib import metadata

import pytest

from agentgym_envs.cli import main


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
