"""Text tables come from one library (rich), rendered as plain text that logs and tests can read."""

from __future__ import annotations

import pytest

from agentgym_envs.core.tables import render_table


def test_columns_line_up_with_their_justification_and_footer() -> None:
    text = render_table(["sub-task", "success %"], [["Depth1", "100.00"], ["Depth22", "5.00"]],
                        justify=["left", "right"], footer=["overall", "52.50"])
    assert text.splitlines() == [
        "sub-task  success %",
        "-------------------",
        "Depth1       100.00",
        "Depth22        5.00",
        "-------------------",
        "overall       52.50",
    ]


def test_cells_are_plain_text_never_wrapped_nor_styled() -> None:
    hint = "no: pip install 'agentgym-rl[babyai]'"  # square brackets are not rich markup here
    long_id = "AgentGym/" + "X" * 300  # wider than any terminal: kept on one line
    text = render_table(["id", "installed"], [[long_id, hint]])
    assert text.splitlines()[2] == f"{long_id}  {hint}"
    assert "\x1b" not in text and text.isascii()
    assert all(line == line.rstrip() for line in text.splitlines())


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        render_table(["a", "b", "c"], [["1", "2"]])


def test_cli_tables(capsys) -> None:
    from agentgym_envs.cli import main

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["id", "scenario", "sub-task", "train", "test", "turns", "installed"]
    assert set(lines[1]) == {"-"}
    depth2 = next(line for line in lines if line.startswith("AgentGym/TextCraft-Depth2-v0 "))
    assert depth2.split()[-1] == "yes"
    assert main(["solve", "AgentGym/TextCraft-Depth1-v0", "--agent", "oracle", "--limit", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["sub-task", "solved", "episodes", "success", "%"]
    assert lines[-1].split() == ["overall", "3", "3", "100.0"]
