"""Damaged and hand-edited run files: one bad line or field costs one record, never the run, and the
CLI answers a bad file or flag with one ``agentgym: error:`` line (never a traceback)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import agentgym_envs  # noqa: F401
from agentgym_envs.cli import main
from agentgym_envs.collect import Journal
from agentgym_envs.evaluation.plots import read_metrics
from agentgym_envs.evaluation.records import TrajectoryLog, load_run

DEPTH1 = "AgentGym/TextCraft-Depth1-v0"


def eval_oracle(out: Path, limit: int = 3) -> int:
    return main(["eval", "--agent", "oracle", "--env", DEPTH1, "--limit", str(limit), "--max-turns", "4",
                 "--out", str(out), "--no-progress"])


def damage_line(path: Path, number: int) -> None:
    """One byte of line ``number`` (1-based) replaced by 0xff: not UTF-8 any more."""
    lines = path.read_bytes().split(b"\n")
    line = bytearray(lines[number - 1])
    line[len(line) // 2] = 0xFF
    lines[number - 1] = bytes(line)
    path.write_bytes(b"\n".join(lines))


def error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("agentgym")]
    assert len(err) == 1 and err[0].startswith("agentgym: error: ") and "Traceback" not in err[0], err
    return err[0]


def test_a_damaged_byte_costs_one_episode_and_eval_resumes_and_view_reads_the_rest(tmp_path, caplog) -> None:
    out = tmp_path / "run"
    assert eval_oracle(out) == 0
    damage_line(out / "trajectories.jsonl", 2)
    with caplog.at_level(logging.WARNING):
        assert len(load_run(out)) == 2
    assert any("not valid UTF-8" in message for message in caplog.messages)
    assert main(["view", str(out)]) == 0
    assert eval_oracle(out) == 0  # resumes: plays the damaged episode again
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["complete"]


def test_damaged_and_step_less_metric_lines_are_skipped(tmp_path) -> None:
    path = tmp_path / "agent_metrics.jsonl"
    rows = [{"step": 1, "agent/success": 0.5}, {"step": None, "agent/success": 1.0}, {"step": 2, "agent/success": 0.7},
            {"step": "3"}, {"step": 3, "agent/success": 0.9}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + '{"step": 4, "agent/su', encoding="utf-8")
    damage_line(path, 3)
    assert [row["step"] for row in read_metrics(path)] == [1, 3]


def test_plot_answers_bad_metrics_and_summaries_in_one_line(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    training = tmp_path / "training"
    training.mkdir()
    rows = [{"step": step, "agent/success": 0.1 * step, "agent/turn_budget": 3, "agent/turns": 2} for step in (1, 2)]
    rows.insert(1, {"step": None, "agent/success": 1.0})
    (training / "agent_metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert main(["plot", str(training)]) == 0
    capsys.readouterr()
    for summary in ({"results": None}, {"results": [{"max_turns": None}, {"max_turns": 3}]}, [1, 2],
                    {"results": [{"max_turns": [1]}, {"max_turns": 3}]}):
        run = tmp_path / f"eval-{len(list(tmp_path.iterdir()))}"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
        assert main(["plot", str(run)]) == 2
        assert "summary" in error_line(capsys)


def test_a_resumed_record_with_null_max_turns_is_played_again(tmp_path, capsys, caplog) -> None:
    out = tmp_path / "run"
    assert eval_oracle(out) == 0
    path = out / "trajectories.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["max_turns"] = None
    del records[1]["info"]
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    capsys.readouterr()
    with caplog.at_level(logging.WARNING):
        assert eval_oracle(out) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["episodes"] == 3
    assert main(["view", str(out)]) == 0


def test_eval_out_pointing_at_a_file_is_one_line(tmp_path, capsys) -> None:
    out = tmp_path / "taken"
    out.write_text("not a folder")
    assert eval_oracle(out) == 2
    assert "is a file" in error_line(capsys)


def test_collects_journal_starts_a_new_line_after_a_cut_one_and_skips_damaged_lines(tmp_path) -> None:
    path = tmp_path / "episodes.jsonl"
    settings = {"split": "train", "seed": 0}
    journal = Journal(path, settings)
    for index in range(3):
        journal.add(DEPTH1, index, True, {"item_id": index})
    path.write_bytes(path.read_bytes()[:-7])  # a kill in the middle of the last entry
    Journal(path, settings).add(DEPTH1, 3, True, {"item_id": 3})
    assert path.read_text().splitlines()[-1] == json.dumps({"env_id": DEPTH1, "index": 3, "kept": True,
                                                            "row": {"item_id": 3}})
    damage_line(path, 2)  # entry 0 damaged
    resumed = Journal(path, settings)
    assert sorted(index for _, index in resumed.entries) == [1, 3]


def test_the_trajectory_log_and_the_journal_agree_on_a_cut_line(tmp_path) -> None:
    log = TrajectoryLog(tmp_path / "trajectories.jsonl")
    log.path.write_text('{"env_id": "x", "item', encoding="utf-8")
    log.append([{"env_id": "y"}])
    assert log.records() == [{"env_id": "y"}]
