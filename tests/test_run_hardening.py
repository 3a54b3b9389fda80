"""Run folders that are odd in ways the issue tracker met (issue 47): non-finite numbers in records, a viewer file
that is a symlink, a full disk or an output path that is a folder. Each still ends in a readable page or in one
``agentgym: error:`` line, and a rerun resumes."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

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
