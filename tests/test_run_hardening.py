"""Run folders that are odd in ways the issue tracker met (issue 47): non-finite numbers in records, a viewer file
that is a symlink, a full disk or an output path that is a folder. Each still ends in a readable page or in one
``agentgym: error:`` line, and a rerun resumes."""

from __future__ import annotations

import errno
import json
import math
import re
from pathlib import Path

import pytest

import agentgym_envs  # noqa: F401
from agentgym_envs.cli import main
from agentgym_envs.evaluation.records import TrajectoryLog, load_run
from agentgym_envs.evaluation.viewer import write_viewer

DEPTH1 = "AgentGym/TextCraft-Depth1-v0"


def eval_oracle(out: Path, limit: int = 3) -> int:
    return main(["eval", "--agent", "oracle", "--env", DEPTH1, "--limit", str(limit), "--max-turns", "4",
                 "--out", str(out), "--no-progress"])


def refuse_constant(name: str) -> None:
    raise ValueError(f"not strict JSON: {name}")


def embedded_episodes(page: str) -> list[dict]:
    """The page's episode data, parsed as strictly as a browser's ``JSON.parse`` (no NaN / Infinity)."""
    data = re.search(r'<script id="episodes" type="application/json">(.*?)</script>', page, re.S).group(1)
    return json.loads(data, parse_constant=refuse_constant)


def test_non_finite_numbers_in_records_still_show_every_episode(tmp_path) -> None:
    run = tmp_path / "run"
    assert eval_oracle(run) == 0
    records = load_run(run)
    records[0]["return"] = math.nan  # written bare by Python's json, as an older log holds them
    records[1]["rewards"] = [math.inf, -math.inf]
    records[2]["info"]["score"] = math.nan
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert "NaN" in (run / "trajectories.jsonl").read_text()

    episodes = embedded_episodes(write_viewer(run).read_text(encoding="utf-8"))
    assert len(episodes) == len(records) == 3
    assert float(episodes[0]["return"]) != float(episodes[0]["return"])  # still NaN to whoever reads it
    assert [float(r) for r in episodes[1]["rewards"]] == [math.inf, -math.inf]


def test_the_trajectory_log_writes_strict_json_that_reads_back_as_the_numbers(tmp_path) -> None:
    log = TrajectoryLog(tmp_path / "trajectories.jsonl")
    log.append([{"env_id": DEPTH1, "return": math.nan, "rewards": [math.inf, 1.0], "info": {"score": -math.inf}}])
    line = (tmp_path / "trajectories.jsonl").read_text(encoding="utf-8")
    record = json.loads(line, parse_constant=refuse_constant)
    assert math.isnan(float(record["return"])) and float(record["info"]["score"]) == -math.inf
    assert [float(r) for r in record["rewards"]] == [math.inf, 1.0]


def test_view_replaces_a_symlinked_page_instead_of_writing_through_it(tmp_path) -> None:
    """A run folder from someone else may hold ``trajectories.html`` as a link to a file of ours."""
    run = tmp_path / "received"
    assert eval_oracle(run) == 0
    outside = tmp_path / "mine" / "notes.html"
    outside.parent.mkdir()
    outside.write_text("my notes", encoding="utf-8")
    (run / "trajectories.html").symlink_to(outside)
    assert main(["view", str(run)]) == 0
    assert outside.read_text(encoding="utf-8") == "my notes"
    page = run / "trajectories.html"
    assert not page.is_symlink() and len(embedded_episodes(page.read_text(encoding="utf-8"))) == 3
    assert sorted(path.name for path in run.iterdir() if path.name.startswith(".")) == []  # no temporary left


def one_error_line(capsys) -> str:
    """The command's stderr: one ``agentgym: error:`` line, no traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.startswith("agentgym")]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("agentgym: error: "), err
    return lines[0]


def full_disk_after(calls: int, real):
    """An ``append_lines`` whose ``calls``-th call writes half its text, then raises ENOSPC (as a full disk does)."""
    made = []

    def append(path, lines):
        made.append(path)
        if len(made) < calls:
            return real(path, lines)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(lines[: len(lines) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    return append


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_view_into_dev_full_is_one_line(tmp_path, capsys) -> None:
    assert eval_oracle(tmp_path / "run") == 0
    capsys.readouterr()
    assert main(["view", str(tmp_path / "run"), "--out", "/dev/full"]) != 0
    assert "No space left on device" in one_error_line(capsys)


def test_view_into_an_existing_folder_is_one_line(tmp_path, capsys) -> None:
    assert eval_oracle(tmp_path / "run") == 0
    (tmp_path / "pages").mkdir()
    capsys.readouterr()
    assert main(["view", str(tmp_path / "run"), "--out", str(tmp_path / "pages") + "/"]) != 0
    assert "is a folder" in one_error_line(capsys)
    assert list((tmp_path / "pages").iterdir()) == []


def test_eval_on_a_full_disk_is_one_line_and_resumes_once_there_is_room(tmp_path, capsys, monkeypatch) -> None:
    import agentgym_envs.evaluation.records as records_module

    real = records_module.append_lines
    monkeypatch.setattr(records_module, "append_lines", full_disk_after(1, real))
    out = tmp_path / "run"
    assert eval_oracle(out) == 1
    assert "No space left on device" in one_error_line(capsys)
    assert (out / "trajectories.jsonl").stat().st_size > 0  # a cut line, as a full disk leaves it

    monkeypatch.setattr(records_module, "append_lines", real)
    assert eval_oracle(out) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["complete"] and len(load_run(out)) == 3


@pytest.mark.parametrize("fails_at", [1, 3], ids=["header", "second-episode"])
def test_collect_on_a_full_disk_is_one_line_and_resumes_once_there_is_room(tmp_path, capsys, monkeypatch,
                                                                           fails_at) -> None:
    import agentgym_envs.collect as collect_module
    from agentgym_envs.collect import collect, dataset_row, load_trajectories

    real = collect_module.append_lines
    monkeypatch.setattr(collect_module, "append_lines", full_disk_after(fails_at, real))
    out = tmp_path / "oracle"
    command = ["collect", "--env", DEPTH1, "--n", "3", "--out", str(out)]
    assert main(command) == 1
    assert "No space left on device" in one_error_line(capsys)

    monkeypatch.setattr(collect_module, "append_lines", real)
    assert main(command) == 0
    assert f"{max(0, fails_at - 2)} from the journal" in capsys.readouterr().out or fails_at == 1
    expected, _ = collect(DEPTH1, 3, progress=False)
    dataset = load_trajectories(out)
    assert [dataset[i] for i in range(len(dataset))] == [dataset_row(row) for row in expected]


def test_a_full_disk_leaves_no_empty_run_json_and_an_unreadable_one_is_named(tmp_path, monkeypatch, capsys) -> None:
    """#61 item 8: run.json was written in place, so a full disk left it empty and every rerun failed on it."""
    out = tmp_path / "run"
    real = Path.write_text

    def full_disk(self: Path, text: str, *args, **kwargs) -> int:
        if "run.json" in self.name:
            real(self, "", *args, **kwargs)  # the file is created, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    try:
        assert eval_oracle(out, limit=1) != 0
    except OSError as error:
        assert error.errno == errno.ENOSPC
    monkeypatch.undo()
    capsys.readouterr()
    assert not (out / "run.json").exists() and not list(out.glob(".run.json*"))
    assert eval_oracle(out, limit=1) == 0  # the rerun works
    (out / "run.json").write_text("")  # an empty run.json (written by an older version) is named, in one line
    assert eval_oracle(out, limit=1) != 0
    error = capsys.readouterr().err
    assert f"{out / 'run.json'} is unreadable" in error and "Traceback" not in error


def test_summary_json_replaces_a_symlink_instead_of_writing_through_it(tmp_path) -> None:
    """#61 item 11 (the eval half): a symlink at --out/summary.json is replaced, its target left alone."""
    out = tmp_path / "run"
    out.mkdir()
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    (out / "summary.json").symlink_to(target)
    assert eval_oracle(out, limit=1) == 0
    assert target.read_text() == "keep me" and not (out / "summary.json").is_symlink()
    assert json.loads((out / "summary.json").read_text())["episodes"] == 1


def _fake_held_out_success(model, env_ids, out_dir, stage, *args, items=None, **kwargs):
    """``stages.held_out_success`` without a model: one file in its folder, every item solved once."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "run.json").write_text('{"agent": {"kind": "model", "weights": "0123456789abcdef"}}')
    per_item = {f"{env_ids[0]}:{item}": [1] for item in items}
    return {"model": model, "episodes": len(per_item), "success": 1.0, "ci95": [1.0, 1.0],
            "items_solved": len(per_item), "valid_action_rate": 1.0, "per_item": per_item}


def test_learning_curve_json_replaces_a_symlink_instead_of_writing_through_it(tmp_path, monkeypatch) -> None:
    """#61 item 11 (the learning-curve half): a symlink at RUN/learning_curve.json is replaced, its target kept."""
    import agentgym_trl.stages
    from agentgym_trl.learning_curve import main as curve_main

    monkeypatch.setattr(agentgym_trl.stages, "held_out_success", _fake_held_out_success)
    run, target = tmp_path / "run", tmp_path / "precious.json"
    run.mkdir()
    target.write_text("keep me")
    (run / "learning_curve.json").symlink_to(target)
    curve = curve_main([str(run), "--env_ids", "AgentGym/TextCraft-Depth1-v0", "--limit", "2", "--start", "m"])
    assert target.read_text() == "keep me" and not (run / "learning_curve.json").is_symlink()
    assert json.loads((run / "learning_curve.json").read_text()) == curve and curve["steps"][0]["success"] == 1.0


@pytest.mark.parametrize("linked", ["learning_curve", "learning_curve/step-0", "learning_curve/step-0/test"])
def test_learning_curve_refuses_to_write_evaluations_through_a_linked_folder(tmp_path, monkeypatch, capsys,
                                                                            linked: str) -> None:
    """A symlink at RUN/learning_curve (or a folder below it) would have every evaluation written where it points:
    refused in one line before any evaluation, its target untouched."""
    import agentgym_trl.stages
    from agentgym_trl.learning_curve import main as curve_main

    monkeypatch.setattr(agentgym_trl.stages, "held_out_success", _fake_held_out_success)
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    (run / linked).parent.mkdir(parents=True)
    elsewhere.mkdir()
    (run / linked).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(SystemExit, match=f"error: {re.escape(str(run / linked))} is a symlink to .*elsewhere"):
        curve_main([str(run), "--env_ids", "AgentGym/TextCraft-Depth1-v0", "--limit", "2", "--start", "m"])
    assert list(elsewhere.iterdir()) == [] and not (run / "learning_curve.json").exists()
    (run / linked).unlink()  # the link removed, the same command writes into the run
    curve_main([str(run), "--env_ids", "AgentGym/TextCraft-Depth1-v0", "--limit", "2", "--start", "m"])
    assert (run / "learning_curve" / "step-0" / "test" / "AgentGym_TextCraft-Depth1-v0" / "run.json").exists()
    assert list(elsewhere.iterdir()) == []


def test_a_linked_run_folder_is_the_run(tmp_path, monkeypatch) -> None:
    """The run folder itself may be a link (a run kept on another disk): only folders below it are refused."""
    import agentgym_trl.stages
    from agentgym_trl.learning_curve import main as curve_main

    monkeypatch.setattr(agentgym_trl.stages, "held_out_success", _fake_held_out_success)
    real, run = tmp_path / "disk" / "run", tmp_path / "run"
    real.mkdir(parents=True)
    run.symlink_to(real, target_is_directory=True)
    curve_main([str(run), "--env_ids", "AgentGym/TextCraft-Depth1-v0", "--limit", "1", "--start", "m"])
    assert (real / "learning_curve.json").exists() and (real / "learning_curve" / "step-0").is_dir()
