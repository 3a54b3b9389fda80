"""agentgym_trl.experiments, the pieces every experiment driver and training benchmark shares: the training child's
command and the settings it ends up with, the trained mark, resumable evaluation (which never reports part of a
test), the start's reuse, and the report's numbers on a handmade set of records. The drivers themselves run end to
end in tests/test_learning.py and tests/test_turn_budget.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agentgym_envs.evaluation.plots import METRICS_FILE  # noqa: E402
from agentgym_envs.evaluation.runner import EvalReport, plan_jobs  # noqa: E402
from agentgym_trl import experiments  # noqa: E402
from agentgym_trl.experiments import (  # noqa: E402
    ArmsConfig,
    EvalSettings,
    TrainingRun,
    change_text,
    evaluate_resumable,
    grpo_command,
    interval_text,
    is_trained,
    logged_steps,
    make_start,
    p_text,
    percent_text,
    plot_arms,
    evaluation_result,
    train_once,
    training_curve,
    wait_until_trained,
    without_items,
    write_results,
)
from agentgym_trl.train import parse_args  # noqa: E402

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"


def run_of(tmp_path: Path, **changes) -> TrainingRun:
    settings = dict(start_model=tmp_path / "start", env_id=TEXTCRAFT, output_dir=tmp_path / "run", seed=3, steps=5,
                    items_per_step=2, group_size=4, learning_rate=2e-5, temperature=0.7, max_turn_tokens=40,
                    max_context_tokens=1500, save_steps=2)
    return TrainingRun(**{**settings, **changes})


def flag(command: list[str], name: str) -> str:
    """The value of the last ``name`` on a command line (the one argparse keeps)."""
    return command[len(command) - 1 - command[::-1].index(name) + 1]


# ---- the training child ------------------------------------------------------------------------
def test_the_command_is_the_package_trainer_with_the_demo_preset_under_the_shared_flags(tmp_path: Path) -> None:
    command = grpo_command(run_of(tmp_path), ["--max_turns", "2", "--temperature", "0.5"])
    assert command[:5] == [sys.executable, "-m", "agentgym_trl.train", "--preset", "cpu-demo"]
    assert command[-4:] == ["--max_turns", "2", "--temperature", "0.5"], "the driver's flags come last"
    expected = {"--model_name_or_path": str(tmp_path / "start"), "--env_ids": TEXTCRAFT, "--seed": "3",
                "--output_dir": str(tmp_path / "run"), "--max_steps": "5", "--per_device_train_batch_size": "8",
                "--gradient_accumulation_steps": "1", "--num_generations": "4", "--skip_zero_advantage": "true",
                "--learning_rate": "2e-05", "--lr_scheduler_type": "constant", "--beta": "0",
                "--max_turn_tokens": "40", "--max_context_tokens": "1500", "--save_strategy": "steps",
                "--save_steps": "2", "--save_total_limit": "1", "--save_only_model": "false",
                "--resume_from_checkpoint": "last", "--clone_episodes": "0", "--eval_items": "0"}
    assert {name: flag(command, name) for name in expected} == expected
    assert flag(command, "--temperature") == "0.5", "a driver's flag wins over the shared one"
    kept = grpo_command(run_of(tmp_path, keep_every_checkpoint=True, skip_zero_advantage=False))
    assert "--save_total_limit" not in kept and flag(kept, "--skip_zero_advantage") == "false"


def test_an_arms_command_parses_to_the_demo_settings_under_the_experiments(tmp_path: Path) -> None:
    """What the child will run: the experiment's settings, the arm's budget in place of the demo's schedule, and the
    demo's preset for everything the experiment leaves alone."""
    config = ArmsConfig(start_model=str(tmp_path / "start"), out_dir=str(tmp_path), steps=3, items_per_step=1,
                        group_size=2, save_steps=1, bf16=False, merged_first_turn=True, seed=4)
    command = config.grpo_command(tmp_path / "small", ["--max_turns", "2"])
    assert flag(command, "--merged_first_turn") == "true" and flag(command, "--bf16") == "false"
    args, stages, model = parse_args(command[3:])
    assert (args.max_steps, args.per_device_train_batch_size, args.num_generations, args.seed) == (3, 2, 2, 4)
    assert args.turn_schedule().max_turns == 2 and args.turn_schedule().at(3) == 2
    assert (args.beta, args.save_total_limit, args.save_only_model, args.resume_from_checkpoint) == (
        0.0, 1, False, "last")
    assert (args.merged_first_turn, bool(args.bf16), args.output_dir) == (True, False, str(tmp_path / "small"))
    assert (stages.clone_episodes, stages.eval_items) == (0, 0)
    assert model.model_name_or_path == str(tmp_path / "start")
    assert (args.item_draws, args.micro_batch_tokens, args.truncated_turn) == ("learnability", 512, "step"), \
        "the rest is the demo's"


# ---- the trained mark --------------------------------------------------------------------------
def test_a_run_is_trained_once_and_marked(tmp_path: Path) -> None:
    calls = []

    def run(command: list[str], log: Path) -> None:
        calls.append((command, log))
        (tmp_path / "arm").mkdir(exist_ok=True)

    train_once(["train"], tmp_path / "arm", tmp_path / "logs" / "arm.log", run=run)
    assert calls == [(["train"], tmp_path / "logs" / "arm.log")] and is_trained(tmp_path / "arm")
    mark = json.loads((tmp_path / "arm" / experiments.TRAINED_MARK).read_text())
    assert set(mark) == {"finished", "last_call_s"}
    train_once(["train"], tmp_path / "arm", tmp_path / "logs" / "arm.log", run=run)
    assert len(calls) == 1, "a marked run is not trained again"
    wait_until_trained(tmp_path / "arm", poll_s=0)  # returns at once


# ---- evaluation --------------------------------------------------------------------------------
SETTINGS = EvalSettings(TEXTCRAFT, max_turns=3, temperature=0.5, batch_size=4, max_turn_tokens=32,
                        max_context_tokens=1024, bf16=False)


def write_summary(out: Path, expected: int, complete: bool = True, split: str = "test", n_samples: int = 2) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({"complete": complete, "expected_episodes": expected,
                                                  "split": split, "n_samples": n_samples}))


def test_an_incomplete_evaluation_stops_the_experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = {}

    def cut_short(model: str, env_ids: list[str], out: Path, **kwargs) -> EvalReport:
        asked.update(kwargs, model=model, env_ids=env_ids)
        return EvalReport(Path(out), [], episodes=3, expected=4)

    monkeypatch.setattr(experiments, "evaluate_model", cut_short)
    with pytest.raises(SystemExit, match=r"evaluation .*eval stopped after 3 of 4 episodes; run again"):
        evaluate_resumable("model", tmp_path / "eval", SETTINGS, split="test", n_samples=2, limit=2, seed=1)
    assert asked["model"] == "model" and asked["env_ids"] == [TEXTCRAFT]
    assert {key: asked[key] for key in ("split", "n_samples", "limit", "items", "seed", "max_turns", "temperature",
                                        "batch_size", "max_turn_tokens", "max_context_tokens", "bf16", "engine",
                                        "merged_first_turn", "oracle_prefix")} == {
        "split": "test", "n_samples": 2, "limit": 2, "items": None, "seed": 1, "max_turns": [3], "temperature": 0.5,
        "batch_size": 4, "max_turn_tokens": 32, "max_context_tokens": 1024, "bf16": False, "engine": "hf",
        "merged_first_turn": False, "oracle_prefix": 0}


def test_a_complete_evaluation_of_the_same_plan_is_not_run_again(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []

    def complete(model: str, env_ids: list[str], out: Path, **kwargs) -> EvalReport:
        runs.append(kwargs["limit"])
        return EvalReport(Path(out), [], episodes=4, expected=4)

    monkeypatch.setattr(experiments, "evaluate_model", complete)
    planned = len(plan_jobs([TEXTCRAFT], "test", 2, [3], limit=2))
    assert planned == 4
    write_summary(tmp_path / "eval", expected=planned)
    assert evaluate_resumable("m", tmp_path / "eval", SETTINGS, split="test", n_samples=2, limit=2) == tmp_path / "eval"
    assert runs == [], "complete: skipped"
    evaluate_resumable("m", tmp_path / "eval", SETTINGS, split="test", n_samples=2, limit=3)
    assert runs == [3], "more items asked for: resumed, not skipped"
    write_summary(tmp_path / "cut", expected=planned, complete=False)
    evaluate_resumable("m", tmp_path / "cut", SETTINGS, split="test", n_samples=2, limit=2)
    assert runs == [3, 2]


def test_an_arms_evaluation_tests_every_model_the_same_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    monkeypatch.setattr(experiments, "evaluate_model", lambda model, env_ids, out, **kwargs: asked.append(
        (model, Path(out), kwargs)) or EvalReport(Path(out), [], episodes=1, expected=1))
    config = ArmsConfig(out_dir=str(tmp_path), eval_turns=5, eval_samples=3, eval_limit=0, eval_batch_size=6,
                        temperature=0.9, bf16=False, merged_first_turn=True, seed=2)
    config.evaluate("large", tmp_path / "large")
    ((model, out, kwargs),) = asked
    assert (model, out) == (str(tmp_path / "large"), tmp_path / "eval" / "large")
    assert {key: kwargs[key] for key in ("split", "n_samples", "limit", "max_turns", "temperature", "batch_size",
                                         "seed", "merged_first_turn", "engine")} == {
        "split": "test", "n_samples": 3, "limit": None, "max_turns": [5], "temperature": 0.9, "batch_size": 6,
        "seed": 2, "merged_first_turn": True, "engine": "hf"}


def test_a_start_that_exists_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentgym_trl.stages

    def never(*args, **kwargs):
        raise AssertionError("the start was cloned again")

    monkeypatch.setattr(agentgym_trl.stages, "behaviour_clone", never)
    start = tmp_path / "start"
    start.mkdir()
    (start / "config.json").write_text("{}")
    (start / "model.safetensors").write_bytes(b"")
    assert make_start(start, TEXTCRAFT, base_model=None, clone_episodes=4, clone_steps=1, bf16=False) == start


# ---- the report --------------------------------------------------------------------------------
def handmade_run(folder: Path) -> Path:
    """Three items, two samples each: always, half and never solved (Avg@K 0.5)."""
    outcomes = {0: [True, True], 1: [True, False], 2: [False, False]}
    records = [{"env_id": TEXTCRAFT, "item_id": item, "info": {"success": won, "score": float(won)},
                "return": float(won), "turns": 2 if won else 4}
               for item, samples in outcomes.items() for won in samples]
    folder.mkdir(parents=True)
    (folder / "trajectories.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder


def test_an_evaluation_result_has_its_interval_over_items_and_its_per_item_successes(tmp_path: Path) -> None:
    result = evaluation_result(handmade_run(tmp_path / "eval"))
    assert result["mean"] == pytest.approx(0.5) and 0 <= result["low"] < 0.5 < result["high"] <= 1
    assert (result["items"], result["episodes"], result["score"], result["turns"]) == (3, 6, 0.5, 3.0)
    assert result["per_item"] == {(TEXTCRAFT, 0): [True, True], (TEXTCRAFT, 1): [True, False],
                                  (TEXTCRAFT, 2): [False, False]}
    assert "per_item" not in without_items(result) and without_items(result)["items"] == 3


def test_the_report_texts() -> None:
    assert percent_text({"mean": 0.5, "low": 1 / 6, "high": 5 / 6}) == "50.0% [16.7, 83.3]"
    assert change_text({"difference": 0.061, "low": 0.02, "high": 0.103, "p_value": 0.0042}) == \
        "+6.1 points [+2.0, +10.3], p = 0.004"
    assert change_text({"difference": -0.05, "low": -0.1, "high": 0.0, "p_value": 1.0}) == \
        "-5.0 points [-10.0, +0.0], p = 1.000"
    interval = {"mean": 0.412, "bca_low": 0.35, "bca_high": 0.475}
    assert interval_text(interval) == "41.2% [35.0, 47.5]"
    assert interval_text({"mean": 0.061, "bca_low": 0.02, "bca_high": 0.103}, signed=True) == "+6.1 [+2.0, +10.3]"
    assert p_text({"p_value": 1 / 20_001, "resamples": 20_000}) == "< 5e-05", "no resample reached it: a bound"
    assert p_text({"p_value": 0.01234, "resamples": 10_000}) == "0.012"


def test_a_training_curve_keeps_a_resumed_steps_last_log(tmp_path: Path) -> None:
    rows = [{"step": 1, "agent/success": 0.1, "step_time": 2.0}, {"step": 2, "agent/success": 0.0},
            {"step": 2, "agent/success": 0.3, "step_time": 3.0}]
    tmp_path.joinpath(METRICS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    curve = training_curve(logged_steps(tmp_path), {"success": "agent/success", "step_s": "step_time"})
    assert curve == {"success": [0.1, 0.3], "step_s": [2.0, 3.0], "step": [1, 2]}
    assert training_curve(logged_steps(tmp_path))["budget"] == [None, None], "a metric not logged: None per step"


def test_the_result_json_is_written_where_asked(tmp_path: Path) -> None:
    path = write_results(tmp_path / "results" / "x.json", {"start": {"mean": 0.5}})
    assert json.loads(path.read_text()) == {"start": {"mean": 0.5}} and path.read_text().endswith("\n")
    plot_arms(tmp_path / "plots" / "x.png", {"mean": 0.5, "low": 0.2, "high": 0.8}, {}, "nothing tested yet")
    assert not (tmp_path / "plots").exists(), "no plot before an arm is tested"
