"""examples/turn_budget.py (the learning experiment) end to end on a tiny model, and the pieces it relies on:
examples/grpo.py's budget flags and resuming, and the error bars of the report."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from offline_run import run_offline
from tiny_model import save_tiny

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agentgym_envs.evaluation.metrics import compare_success, success_interval  # noqa: E402
from agentgym_envs.evaluation.plots import last_per_step, plot_comparison  # noqa: E402
from agentgym_trl import TurnSchedule  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_success_interval_resamples_items_not_episodes() -> None:
    # 10 items: 3 always solved, 7 never; their 4 samples agree, so the interval is that of 10 draws, not 40
    per_item = {i: [i < 3] * 4 for i in range(10)}
    interval = success_interval(per_item)
    assert interval["mean"] == pytest.approx(0.3)
    assert interval["low"] <= 0.1 and interval["high"] >= 0.5  # ~ +-0.28 for n=10
    assert success_interval({0: [True, True]}) == {"mean": 1.0, "low": 1.0, "high": 1.0}
    with pytest.raises(ValueError, match="no items"):
        success_interval({})


def test_paired_comparison_finds_a_real_change_and_not_a_null_one() -> None:
    before = {i: [i % 3 == 0, False] for i in range(60)}
    better = {i: [i % 3 == 0, i % 2 == 0] for i in range(60)}  # 30 items gain half a success, none lose
    change = compare_success(before, better)
    assert change["items"] == 60 and change["difference"] == pytest.approx(0.25)
    assert 0 < change["low"] < change["difference"] < change["high"] and change["p_value"] < 0.001
    same = compare_success(before, {i: list(reversed(s)) for i, s in before.items()})
    assert same["difference"] == 0 and same["p_value"] == 1.0
    assert compare_success({1: [True]}, {2: [True], 1: [False]})["items"] == 1  # only shared items are paired
    with pytest.raises(ValueError, match="share no item"):
        compare_success({1: [True]}, {2: [True]})


def test_comparison_plot_keeps_the_last_log_of_a_resumed_step(tmp_path: Path) -> None:
    runs = {}
    for name, budgets in (("small", [2, 2, 2]), ("staged", [2, 4, 4])):
        rows = [{"step": s + 1, "agent/max_turns": b, "agent/turns_mean": b - 0.5, "agent/success": 0.1 * s}
                for s, b in enumerate(budgets)]
        rows.insert(2, {"step": 2, "agent/max_turns": budgets[1], "agent/turns_mean": 9, "agent/success": 0})
        (tmp_path / name).mkdir()
        (tmp_path / name / "agent_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs[name] = tmp_path / name
    assert [r["agent/turns_mean"] for r in last_per_step(
        [json.loads(line) for line in (tmp_path / "small" / "agent_metrics.jsonl").read_text().splitlines()])] == [
        1.5, 9, 1.5]
    evals = [{"label": "start", "mean": 0.3, "low": 0.2, "high": 0.4}, {"label": "small", "mean": 0.5, "low": 0.4,
                                                                        "high": 0.6}]
    result = plot_comparison(runs, tmp_path / "plots", evals=evals, file_name="arms.png", window=2)
    (path,) = result.files
    assert path.name == "arms.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = result.lines["arms.png"]
    assert lines["Turn budget"]["staged"]["y"] == [2, 4, 4] and lines["Turns used"]["small"]["y"] == [1.5, 9, 1.5]
    assert lines["Rollout success (mean of 2 steps)"]["small"]["y"] == pytest.approx([0.0, 0.0, 0.1])
    assert {"Valid-action rate", "Response length", "Zero-advantage groups", "Held-out test success (95% CI)",
            "Rollout reward (mean of 2 steps)"} <= set(lines)
    assert lines["Response length"] == {}  # not logged in these rows: the panel says so instead of a line


def test_grpo_example_budget_flags_replace_the_default_schedule_and_resume_from_the_newest_checkpoint(
    tmp_path: Path,
) -> None:
    from agentgym_trl import train as grpo

    args, _, _ = grpo.parse_args(["--preset", "cpu-demo", "--max_turns", "5", "--output_dir", str(tmp_path / "run")])
    assert args.turn_schedule() == TurnSchedule.fixed(5)
    args, _, _ = grpo.parse_args(["--preset", "cpu-demo", "--turn_rounds", "2", "4", "--turn_round_steps", "3",
                                  "--output_dir", str(tmp_path)])
    assert args.turn_schedule().at(3) == 4
    args, _, _ = grpo.parse_args(["--output_dir", str(tmp_path / "run"), "--resume_from_checkpoint", "last"])
    assert grpo.resume_point(args) is None  # nothing to resume yet: a fresh start
    import torch
    from safetensors.torch import save_file

    for step in (2, 10):  # complete checkpoints: a trainer state and whole weights (checkpoints.py's rule)
        folder = tmp_path / "run" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text("{}")
        save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    assert grpo.resume_point(args) == str(tmp_path / "run" / "checkpoint-10")


@pytest.mark.slow
def test_experiment_runs_every_arm_resumes_and_reports(tmp_path: Path) -> None:
    """The whole pipeline on a tiny model: eval the start, train and eval three arms, report; a rerun redoes nothing."""
    model = save_tiny(tmp_path / "tiny")
    argv = [
        "--env_id", TEXTCRAFT, "--start_model", str(model), "--out_dir", str(tmp_path / "exp"),
        "--steps", "2", "--small_turns", "1", "--large_turns", "2", "--staged_schedule", "0:1,1:2",
        "--items_per_step", "1", "--group_size", "2", "--save_steps", "1",
        "--eval_turns", "2", "--eval_samples", "2", "--eval_limit", "3", "--eval_batch_size", "6",
        "--max_turn_tokens", "12", "--max_context_tokens", "2048", "--bf16", "false",
        "--results_file", str(tmp_path / "turn_budget.json"), "--plot_file", str(tmp_path / "turn_budget.png"),
    ]
    command = [sys.executable, str(ROOT / "examples" / "turn_budget.py"), *argv]
    first = run_offline(command, tmp_path, timeout=1200)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    summary = json.loads((tmp_path / "turn_budget.json").read_text())
    assert set(summary["arms"]) == {"small", "large", "staged"}
    assert summary["start"]["items"] == 3 and summary["start"]["episodes"] == 6
    budgets = {arm: entry["curve"]["budget"] for arm, entry in summary["arms"].items()}
    assert budgets == {"small": [1, 1], "large": [2, 2], "staged": [1, 2]}
    for entry in summary["arms"].values():
        assert entry["test"]["episodes"] == 6 and 0 <= entry["test"]["low"] <= entry["test"]["high"] <= 1
        assert 0 <= entry["change_vs_start"]["p_value"] <= 1
    assert set(summary["arm_vs_arm"]) == {"staged_vs_small", "staged_vs_large", "large_vs_small"}
    outcomes = summary["per_item_outcomes"]  # what lets anyone recompute every interval and p-value
    assert set(outcomes) == {"start", "small", "large", "staged"}
    assert all(len(samples) == 2 and set(samples) <= {0, 1} for o in outcomes.values() for samples in o.values())
    recomputed = compare_success(outcomes["start"], outcomes["large"])
    reported = summary["arms"]["large"]["change_vs_start"]
    assert (recomputed["difference"], recomputed["p_value"]) == (reported["difference"], reported["p_value"])
    assert [run["config"]["steps"] for run in summary["run_configs"]] == [2], "the config of the call that ran"
    assert (tmp_path / "turn_budget.png").read_bytes()[:4] == b"\x89PNG"
    assert "| staged | 0:1,1:2 |" in first.stdout
    for arm in ("small", "large", "staged"):  # resumable checkpoints with optimizer state, then the final model
        assert (tmp_path / "exp" / arm / "checkpoint-2" / "optimizer.pt").is_file()
        assert (tmp_path / "exp" / arm / "model.safetensors").is_file()

    # a replication of the start's and one arm's test (here: copies of the first, so the pooled change is the same)
    for name in ("start", "large"):
        shutil.copytree(tmp_path / "exp" / "eval" / name, tmp_path / "exp" / "replication" / name)
    again = run_offline(command, tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "$ " not in again.stdout  # no training process started: every arm was finished
    report = json.loads((tmp_path / "turn_budget.json").read_text())
    assert report["arms"].keys() == summary["arms"].keys()
    replication = report["replication"]
    assert set(replication) == {"start", "large", "per_item_outcomes"}
    assert replication["large"]["test"] == summary["arms"]["large"]["test"]
    pooled = replication["large"]["pooled_change_vs_start"]
    assert pooled["items"] == 3 and pooled["difference"] == pytest.approx(
        summary["arms"]["large"]["change_vs_start"]["difference"])
    assert "replication, large vs start" in again.stdout
