"""The learning experiment (examples/learning.py) and its statistics: the registered tests recomputed from
per-item outcomes, the stratified item split, evaluation and cloning on named items, and the pipeline end to end
on a tiny model."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import sys
from math import comb
from pathlib import Path

import numpy as np
import pytest
from offline_run import run_offline
from test_turn_budget import ROOT, TEXTCRAFT
from tiny_model import save_tiny

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agentgym_envs.collect import episode_plan  # noqa: E402
from agentgym_envs.evaluation.plots import plot_learning  # noqa: E402
from agentgym_envs.evaluation.runner import EvalError, plan_jobs  # noqa: E402
from agentgym_trl import experiments  # noqa: E402
from agentgym_envs.evaluation.significance import (  # noqa: E402
    control_report,
    learning_report,
    mean_interval,
    pooled,
    sign_flip_test,
    within_item_permutation_test,
)


def load_learning():
    """examples/learning.py as a module (registered first: its dataclass resolves annotations through it)."""
    spec = importlib.util.spec_from_file_location("example_learning", ROOT / "examples" / "learning.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def exact_within_item_p(start: dict, trained: dict) -> float:
    """The exact two-sided p of the within-item permutation test, by enumerating every dealing of successes."""
    keys = sorted(start)
    per_item = []
    for key in keys:
        n1, n2, s = len(start[key]), len(trained[key]), sum(start[key]) + sum(trained[key])
        total = comb(n1 + n2, s)
        per_item.append([(x / n2 - (s - x) / n1, comb(n2, x) * comb(n1, s - x) / total)
                         for x in range(max(0, s - n1), min(s, n2) + 1)])
    observed = np.mean([np.mean(trained[k]) - np.mean(start[k]) for k in keys])
    return sum(np.prod([p for _, p in combo]) for combo in itertools.product(*per_item)
               if abs(np.mean([d for d, _ in combo])) >= abs(observed) - 1e-12)


def test_within_item_permutation_matches_exact_enumeration() -> None:
    start = {"a": [0, 0, 1, 0], "b": [1, 0, 0, 0], "c": [0, 0, 0, 0]}
    trained = {"a": [1, 1, 1, 0, 1, 1], "b": [1, 1, 0, 1, 1, 0], "c": [1, 0, 0, 0, 0, 0]}
    exact = exact_within_item_p(start, trained)
    result = within_item_permutation_test(start, trained, resamples=200_000)
    assert result["items"] == 3
    assert result["difference"] == pytest.approx(np.mean([5 / 6 - 1 / 4, 4 / 6 - 1 / 4, 1 / 6]))
    assert result["p_value"] == pytest.approx(exact, abs=0.005)


def test_no_change_gives_no_evidence_and_a_big_change_gives_a_tiny_p() -> None:
    start = {str(i): [i % 2, 0, 1, 0] for i in range(40)}
    assert within_item_permutation_test(start, start)["p_value"] == 1.0
    better = {str(i): [1, 1, 1, i % 2] for i in range(40)}
    result = within_item_permutation_test(start, better, resamples=20_000)
    assert result["difference"] > 0.4 and result["p_value"] == pytest.approx(1 / 20_001)
    items_never_solved = {str(i): [0] * 4 for i in range(40)}  # nothing varies: every dealing is the same
    assert within_item_permutation_test(items_never_solved, items_never_solved)["p_value"] == 1.0


def test_sign_flip_counts_items_and_intervals_cover_the_mean() -> None:
    start = {str(i): [0, 0] for i in range(30)}
    trained = {str(i): [int(i < 20), 0] for i in range(30)}
    flip = sign_flip_test(start, trained, resamples=20_000)
    assert (flip["items_up"], flip["items_down"], flip["items"]) == (20, 0, 30)
    assert flip["p_value"] < 0.001 and flip["difference"] == pytest.approx(20 / 30 / 2)
    interval = mean_interval([0.5] * 20 + [0.0] * 10)
    assert interval["bca_low"] < interval["mean"] < interval["bca_high"]
    half_width = 2.045 * np.std([0.5] * 20 + [0.0] * 10, ddof=1) / np.sqrt(30)  # t(0.975, 29) = 2.045
    assert interval["t_high"] - interval["mean"] == pytest.approx(half_width, rel=1e-3)
    assert mean_interval([0.2, 0.2]) == {"mean": 0.2, "bca_low": 0.2, "bca_high": 0.2, "t_low": 0.2, "t_high": 0.2}
    one_item = sign_flip_test({"a": [0, 0]}, {"a": [1, 0]})  # the one-hard-item case of a small trial
    assert (one_item["p_value"], one_item["items_up"]) == (1.0, 1)


def synthetic_result(effect: float, items: int = 40, k: int = 8, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.1, 0.7, size=items)
    keys = [f"{TEXTCRAFT}:{i}" for i in range(items)]

    def model(rates):
        return {key: [int(x) for x in rng.random(k) < rate] for key, rate in zip(keys, rates)}

    curve = {"step": [1, 2, 3], "drawn_success": [0.4, 0.5, 0.6], "groups_drawn": [5, 3, 2], "groups_kept": [2, 2, 2]}
    return {"items": keys, "hard_items": keys[:5], "k": k,
            "models": {"start": model(base), "seed0": model(np.minimum(base + effect, 1)),
                       "seed1": model(np.minimum(base + effect, 1))},
            "runs": {"seed0": {"curve": curve}, "seed1": {"curve": curve}}}


def test_learning_report_pools_the_seeds_as_registered(tmp_path: Path) -> None:
    result = synthetic_result(effect=0.25)
    report = learning_report(result)
    primary = report["primary"]
    assert primary["seeds"] == ["seed0", "seed1"] and primary["items"] == 40 and primary["significant"]
    together = pooled([result["models"]["seed0"], result["models"]["seed1"]])
    assert primary == {**within_item_permutation_test(result["models"]["start"], together), "seeds": primary["seeds"],
                       "on": "held_out", "rule": primary["rule"], "significant": True}, \
        "recomputable from the per-item outcomes alone"
    assert set(report["per_seed"]) == {"seed0", "seed1"} and report["hard_items"]["pooled"]
    assert report["success"]["start"]["hard_items_solved_at_least_once"] <= 5
    null = learning_report(synthetic_result(effect=0.0, seed=1))
    assert not null["primary"]["significant"]

    on_hard = learning_report({**result, "primary_items": "hard", "non_inferiority_margin": 0.05})
    hard = result["hard_items"]
    assert on_hard["primary"]["items"] == len(hard) and on_hard["primary"]["on"] == "hard"
    assert on_hard["primary"]["p_value"] == within_item_permutation_test(
        {k: result["models"]["start"][k] for k in hard}, {k: together[k] for k in hard})["p_value"]
    easy = on_hard["non_inferiority"]
    assert easy["items"] == 40 - len(hard) and easy["holds"]  # better on the easy items: not worse by 5 points
    worse = {**result, "models": {**result["models"], "start": result["models"]["seed0"],
                                  "seed0": result["models"]["start"], "seed1": result["models"]["start"]},
             "non_inferiority_margin": 0.05}
    assert not learning_report(worse)["non_inferiority"]["holds"]
    assert not learning_report(worse)["primary"]["significant"], "significant only when the trained models are better"

    result["analysis"] = report
    table = experiments.markdown_table(result).splitlines()
    assert len(table) == 2 + 3 + 1 and table[-1].startswith("| seeds pooled (primary) |")
    assert "**< 1e-05**" in table[-1], "no resample reached it: the Monte Carlo floor, written as a bound"
    hard_primary = {**result, "primary_items": "hard"}
    hard_primary["analysis"] = learning_report(hard_primary)
    hard_table = experiments.markdown_table(hard_primary).splitlines()
    pooled_on_hard = hard_primary["analysis"]["hard_items"]["pooled"]["difference_interval"]
    assert "change vs start on the hard items" in hard_table[0]
    assert f"| {experiments.half_up(pooled_on_hard['mean'] * 100, signed=True)} [" in hard_table[-1], \
        "the primary row's change is on the items its p is on"
    plot = plot_learning(result, tmp_path / "learning.png")
    assert (tmp_path / "learning.png").read_bytes()[:4] == b"\x89PNG" and plot.files == [tmp_path / "learning.png"]


def test_the_controls_tell_a_gain_from_a_sharpened_start() -> None:
    """The start decoded greedily as well as the trained models leaves no gain over it; another sampling seed of
    the same models repeats the primary test, and a model against its own other draw shows no change."""
    result = synthetic_result(effect=0.25)
    models = result["models"]
    result["controls"] = {
        "runs": {"start@greedy": {"model": "start", "temperature": 0.0, "sampling_seed": 0, "k": 1},
                 "start@T0.5": {"model": "start", "temperature": 0.5, "sampling_seed": 0, "k": 8},
                 "seed0@greedy": {"model": "seed0", "temperature": 0.0, "sampling_seed": 0, "k": 1},
                 **{f"{m}@seed1": {"model": m, "temperature": 1.0, "sampling_seed": 1, "k": 8} for m in models}},
        "models": {"start@greedy": models["seed0"],  # decoding alone does what training did
                   "start@T0.5": models["start"],
                   "seed0@greedy": models["seed0"],
                   **{f"{m}@seed1": outcomes for m, outcomes in models.items()}},
    }
    report = control_report(result)
    assert set(report["success"]) == set(result["controls"]["runs"])
    greedy = report["trained_vs_start_at"]["start@greedy"]["within_item_permutation"]
    assert greedy["p_value"] > 0.01 and abs(greedy["difference"]) < 0.15  # as good greedy: no evidence of learning
    assert report["trained_vs_start_at"]["start@T0.5"]["within_item_permutation"]["p_value"] < 0.01
    again = report["other_sampling_seed"]["1"]
    assert again["primary"] == within_item_permutation_test(models["start"], pooled([models["seed0"], models["seed1"]]))
    assert set(report["same_model"]) == {"start@seed1", "seed0@seed1", "seed1@seed1"}
    assert report["greedy_vs_greedy_start"]["seed0@greedy"]["difference_interval"]["mean"] == 0
    assert all(c["difference_interval"]["mean"] == 0 for c in report["same_model"].values())

    result["analysis"] = learning_report(result)
    result["controls"]["analysis"] = report
    table = experiments.controls_table(result).splitlines()
    assert len(table) == 2 + 6 + 1 and table[-1].startswith("| primary test at sampling seed 1 |")
    assert "| seed0@greedy |" in table[4] and "this minus start@greedy" in table[4]


def test_items_are_split_per_shape_in_proportion() -> None:
    learning = load_learning()
    config = learning.ExperimentConfig()
    items = learning.split_items(config)
    train = set(items["warmup_and_rl"]) | set(items["held_out_train"])
    assert not set(items["warmup_and_rl"]) & set(items["held_out_train"]) and len(items["warmup_and_rl"]) == 64
    assert len(train) == 94 and not train & set(items["test"])
    shapes = {int(k): v for k, v in items["oracle_actions"].items()}
    for shape in set(shapes.values()):
        of_shape = [i for i in train if shapes[i] == shape]
        in_warmup = sum(shapes[i] == shape for i in items["warmup_and_rl"])
        assert abs(in_warmup - len(of_shape) * 64 / 94) < 1, shape
    assert items == learning.split_items(config), "the split is reproducible"
    committed = json.loads((ROOT / "benchmarks" / "results" / "learning_items.json").read_text())
    assert committed == items, "the committed item lists are what the code makes"


def test_evaluation_and_cloning_on_named_items() -> None:
    jobs = plan_jobs([TEXTCRAFT], "train", 2, [3], items=[5, 1, 5])
    assert [(job.item_id, job.sample) for job in jobs] == [(5, 0), (5, 1), (1, 0), (1, 1)]
    with pytest.raises(EvalError, match="not in its 'train' split"):
        plan_jobs([TEXTCRAFT], "train", 1, [3], items=[0])
    assert episode_plan(TEXTCRAFT, "train", 3, items=[7, 2]) == [(7, 7), (2, 2), (7, 7 + 1_000_003)]
    with pytest.raises(ValueError, match=r"items \[0\] are not in its 'train' split"):
        episode_plan(TEXTCRAFT, "train", 1, items=[0])


def test_experiment_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    """Items, start (cloned from the tiny model), evaluations, two seeds with dynamic sampling, report; a rerun
    redoes nothing."""
    base = save_tiny(tmp_path / "tiny")
    argv = [
        "--env_id", TEXTCRAFT, "--base_model", str(base), "--out_dir", str(tmp_path / "exp"),
        "--items_file", str(tmp_path / "items.json"), "--warmup_items", "4", "--clone_steps", "1",
        "--steps", "1", "--groups_per_step", "1", "--group_size", "2", "--max_draw_batches", "2", "--max_turns", "2",
        "--eval_samples", "2", "--eval_limit", "2", "--eval_batch_size", "8", "--engine", "hf",
        "--max_turn_tokens", "12", "--max_context_tokens", "2048", "--save_steps", "1",
        "--results_file", str(tmp_path / "learning.json"), "--plot_file", str(tmp_path / "learning.png"),
    ]
    command = [sys.executable, str(ROOT / "examples" / "learning.py"), *argv]
    first = run_offline(command, tmp_path, timeout=1200)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    result = json.loads((tmp_path / "learning.json").read_text())
    items = json.loads((tmp_path / "items.json").read_text())
    assert len(result["items"]) == 4 and result["items"][:2] == [f"{TEXTCRAFT}:{i}" for i in items["test"][:2]]
    assert set(result["models"]) == {"start", "seed0", "seed1"}
    # provenance: each model's fingerprint as its evaluations recorded it, and it is the folder's weights
    from agentgym_trl.models import weights_fingerprint

    for name in ("start", "seed0", "seed1"):
        assert result["weights"][name] == weights_fingerprint(tmp_path / "exp" / name)
    assert result["eval"]["engine"] == "hf" and result["eval"]["max_turn_tokens"] == 12  # as the runs recorded
    for outcomes in result["models"].values():
        assert set(outcomes) == set(result["items"]) and all(len(o) == 2 and set(o) <= {0, 1}
                                                              for o in outcomes.values())
    for seed in (0, 1):
        run = result["runs"][f"seed{seed}"]
        assert run["seed"] == seed and run["steps"] == 1 and run["command"][run["command"].index("--seed") + 1] == \
            str(seed)
        assert run["episodes_played"] >= 2 and run["curve"]["groups_drawn"][0] >= 1
    rl_items = json.loads((tmp_path / "exp" / "rl_items.json").read_text())
    assert rl_items == {TEXTCRAFT: items["warmup_and_rl"]}
    assert 0 < result["analysis"]["primary"]["p_value"] <= 1
    assert (tmp_path / "learning.png").read_bytes()[:4] == b"\x89PNG"
    controls = result["controls"]
    assert set(controls["models"]) == {"start@T0.5", "start@greedy", "seed0@greedy", "seed1@greedy", "start@seed1",
                                       "seed0@seed1", "seed1@seed1"}
    assert set(controls["analysis"]["greedy_vs_greedy_start"]) == {"seed0@greedy", "seed1@greedy"}
    assert all(len(o) == 1 for o in controls["models"]["start@greedy"].values())  # greedy: one sample per item
    assert all(len(o) == 2 for o in controls["models"]["seed1@seed1"].values())
    assert set(controls["analysis"]["other_sampling_seed"]) == {"1"}

    again = run_offline(command, tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "$ " not in again.stdout and "evaluating" not in again.stdout, "a finished experiment reruns nothing"


def test_the_second_experiments_config_parses_as_registered(tmp_path: Path) -> None:
    """examples/learning_2.yaml holds docs/learning_protocol_2.md's settings; the command line still wins."""
    learning = load_learning()
    config = learning.parse_config(["--config", str(ROOT / "examples" / "learning_2.yaml"), "--steps", "3"])
    assert (config.rl_items, config.hard_eval_samples, config.eval_samples, config.primary_items) == \
        ("multi_ingredient", 32, 8, "hard")
    assert (config.gate_samples, config.gate_prefixes, config.seeds, config.curve_steps) == (32, [0, 1, 2], [0, 1], 10)
    assert config.non_inferiority_margin == 0.05 and config.steps == 3
    assert config.protocol == "docs/learning_protocol_2.md" and config.results_file.endswith("learning_2.json")
    bad = tmp_path / "bad.yaml"
    bad.write_text("stepz: 3\n")
    with pytest.raises(SystemExit, match=r"unknown fields \['stepz'\]"):
        learning.parse_config(["--config", str(bad)])
    with pytest.raises(SystemExit, match="unknown primary_items 'hardest'; choose held_out or hard"):
        learning.parse_config(["--primary_items", "hardest"])
    with pytest.raises(SystemExit, match="unknown rl_items 'some'"):
        learning.parse_config(["--rl_items", "some"])
    with pytest.raises(SystemExit, match="gate_only needs gate_samples"):  # it would run the whole experiment
        learning.parse_config(["--gate_only", "true"])


def test_a_report_refuses_a_model_whose_evaluations_ran_other_weights(tmp_path: Path) -> None:
    learning = load_learning()
    config = learning.ExperimentConfig(out_dir=str(tmp_path))
    items = {"test": [1, 2], "held_out_train": [3]}
    for part, weights in (("test", "aaaa"), ("held_out_train", "aaaa")):
        folder = tmp_path / "eval" / "seed0" / part
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"agent": {"weights": weights, "engine": "hf"}, "split": part}))
    assert learning.model_agent(config, items, "seed0") == {"weights": "aaaa", "engine": "hf"}
    (tmp_path / "eval" / "seed0" / "held_out_train" / "run.json").write_text(
        json.dumps({"agent": {"weights": "bbbb", "engine": "hf"}, "split": "train"}))
    with pytest.raises(SystemExit, match="ran different agents .*weights"):
        learning.model_agent(config, items, "seed0")


def test_holm_steps_down_from_the_smallest_p() -> None:
    from agentgym_envs.evaluation.significance import holm

    assert holm({"x": 0.01, "y": 0.04}, 0.05) == {"x": True, "y": True}  # 0.01 < 0.025, then 0.04 < 0.05
    assert holm({"x": 0.03, "y": 0.04}, 0.05) == {"x": False, "y": False}  # the smaller fails: nothing rejected
    assert holm({"x": 0.001, "y": 0.2, "z": 0.02}, 0.05) == {"x": True, "z": True, "y": False}


def test_arms_configs_are_checked_before_any_run(tmp_path: Path) -> None:
    learning = load_learning()
    config = learning.parse_config(["--config", str(ROOT / "examples" / "learning_3.yaml"), "--only_arms", "d", "a"])
    assert list(config.arms) == ["d", "a", "c", "b"] and config.only_arms == ["d", "a"]
    assert config.arms["a"] == learning.Arm(method="oracle_sft")
    assert config.arms["b"].advantage_estimator == "rft" and config.arms["b"].oracle_prefix_schedule == "0:2,6:1,12:0"
    assert config.arms["d"] == learning.Arm(oracle_prefix_schedule="0:2,6:1,12:0", oracle_prefix_success=0.7)
    assert config.arms["c"] == learning.Arm()
    assert (config.comparisons, config.secondary_comparisons, config.robustness_drop_items) == (
        ["d-a", "d-c"], ["d-b"], [24, 118])
    assert (config.steps, config.learning_rate, config.hard_eval_samples, config.primary_items) == (
        20, 1e-5, 32, "hard")
    runs = learning.training_runs(config)
    assert [run.name for run in runs] == ["d-seed0", "d-seed1", "a-seed0", "a-seed1", "c-seed0", "c-seed1",
                                          "b-seed0", "b-seed1"]
    b = next(run for run in runs if run.name == "b-seed1")
    command = learning.run_command(config, b)
    assert command[command.index("--advantage_estimator") + 1] == "rft" and "--oracle_prefix_schedule" in command
    assert command[command.index("--seed") + 1] == "1" and str(b.folder) == "runs/learning_3/b/seed1"
    c = learning.run_command(config, next(run for run in runs if run.name == "c-seed0"))
    assert "--advantage_estimator" not in c and "--oracle_prefix_schedule" not in c
    assert c[c.index("--max_turns") + 1] == "6" and "--max_turns_schedule" not in c
    staged = learning.ArmRun("staged-seed0", "staged", learning.Arm(max_turns_schedule="0:8,10:12,20:20"), 0,
                             Path("runs/x/staged/seed0"))
    staged_command = learning.run_command(config, staged)
    assert staged_command[staged_command.index("--max_turns_schedule") + 1] == "0:8,10:12,20:20"
    assert "--max_turns" not in staged_command, "the trainer takes one of the two"
    for argv, message in (
        (["--arms", '{"a": {"method": "dagger"}}'], "method is one of"),
        (["--arms", '["a", "b"]'], "arms is a mapping of arm names"),
        (["--arms", '{"a": 5}'], "an arm's fields are"),
        (["--arms", '{"a": '], "Expecting value"),
        (["--arms", '{"a": {"estimator": "rft"}}'], "an arm's fields are"),
        (["--arms", '{"a": {"method": "oracle_sft", "advantage_estimator": "rft"}}'], "takes no estimator"),
        (["--arms", '{"x-y": {}}'], "may not contain '-'"),
        (["--arms", '{"a": {}}', "--comparisons", "a-z"], "names an arm not in arms"),
        (["--arms", '{"a": {}}', "--only_arms", "z"], "only_arms"),
        (["--seeds", "0", "1", "--only_seeds", "2"], "only_seeds"),
        (["--arms", '{"a": {}}', "--oracle_prefix_schedule", "0:1"], "each arm sets its own"),
        (["--comparisons", "a-b"], "names an arm not in arms"),
        (["--item_split", "random"], "unknown item_split"),
    ):
        with pytest.raises(SystemExit, match=message):
            learning.parse_config(argv)


def test_the_scalinginter_gate_is_registered_and_decided_by_its_rule(tmp_path: Path) -> None:
    learning = load_learning()
    config = learning.parse_config(["--config", str(ROOT / "examples" / "scalinginter_gate.yaml")])
    assert (config.env_id, config.warmup_items, config.held_out_train_items, config.clone_steps) == (
        "AgentGym/TextCraft-Depth2-v0", 128, 59, 128)
    assert (config.max_turns, config.eval_samples, config.seeds, config.start_success_range,
            config.start_min_items_solved) == (20, 8, [], [0.1, 0.6], 25)
    small = learning.ExperimentConfig(env_id="AgentGym/TextCraft-Depth2-v0", item_split="shuffled", warmup_items=4,
                                      held_out_train_items=3, items_file=str(tmp_path / "items.json"))
    items = learning.load_items(small)
    order = np.random.default_rng(0).permutation(250)
    from agentgym_envs import get_task

    train = [int(i) for i in get_task(small.env_id).split("train")]
    assert items["warmup_and_rl"] == [train[i] for i in order[:4]]
    assert items["held_out_train"] == [train[i] for i in order[4:7]] and len(items["test"]) == 41
    assert all(3 <= items["oracle_actions"][str(i)] <= 12 for i in items["warmup_and_rl"] + items["held_out_train"])
    gate = learning.ExperimentConfig(start_success_range=[0.1, 0.6], start_min_items_solved=2)
    outcomes = {"i1": [1, 0, 0, 0], "i2": [0, 1, 0, 0], "i3": [0, 0, 0, 0]}  # 2 of 12: 16.7%, 2 items solved
    assert learning.start_gate(gate, outcomes) == {
        "rule": "passes iff 10% <= success <= 60% and at least 2 of the 3 held-out items solved at least once",
        "success": 2 / 12, "items": 3, "items_solved_at_least_once": 2, "passes": True}
    assert not learning.start_gate(gate, {**outcomes, "i2": [0, 0, 0, 0], "i1": [1, 1, 0, 0]})["passes"]


def seed_outcomes(rates: list[float], samples: int = 10) -> list[dict[str, list[int]]]:
    """One model per seed, each with one item whose success rate is the given one."""
    return [{"i": [1] * round(rate * samples) + [0] * (samples - round(rate * samples))} for rate in rates]


def test_the_seed_level_test_is_exact_over_every_relabelling() -> None:
    """The registered seed-level test re-derived: over all 8! orders of the 8 seeds, the share whose first four
    (read as ``staged``) differ from the last four by at least |T| is the p over the 70 relabellings."""
    from agentgym_envs.evaluation.significance import seed_permutation_test

    staged, fixed = [0.5, 0.6, 0.7, 0.8], [0.1, 0.2, 0.3, 0.4]
    test = seed_permutation_test(seed_outcomes(staged), seed_outcomes(fixed), ["i"])
    assert test["difference"] == pytest.approx(0.4) and test["relabellings"] == 70
    assert test["p_value"] == pytest.approx(2 / 70), "only the observed split and its mirror are as extreme"
    assert test["seed_success"] == {"these": staged, "others": fixed}
    for these, others in (([0.1, 0.4, 0.5, 0.8], [0.2, 0.3, 0.6, 0.7]), ([0.3, 0.5, 0.6, 0.6], [0.2, 0.3, 0.4, 0.7])):
        values = these + others
        observed = np.mean(these) - np.mean(others)
        orders = list(itertools.permutations(values))
        extreme = sum(abs(np.mean(order[:4]) - np.mean(order[4:])) >= abs(observed) - 1e-12 for order in orders)
        test = seed_permutation_test(seed_outcomes(these), seed_outcomes(others), ["i"])
        assert test["p_value"] == pytest.approx(extreme / len(orders))
    assert seed_permutation_test(seed_outcomes([0.9]), seed_outcomes([0.1]), ["i"])["p_value"] == 1.0, (
        "one seed an arm: the two labellings are equally extreme, so two seeds can never reject")
    with pytest.raises(ValueError, match="at least one seed"):
        seed_permutation_test([], seed_outcomes([0.1]), ["i"])


def test_an_arms_report_decides_by_the_registered_test_and_counts_each_arms_cost() -> None:
    from agentgym_envs.evaluation.significance import arms_report

    staged, fixed = seed_outcomes([0.5, 0.6, 0.7, 0.8]), seed_outcomes([0.1, 0.2, 0.3, 0.4])
    models = {"start": seed_outcomes([0.1])[0], **{f"staged-seed{i}": m for i, m in enumerate(staged)},
              **{f"fixed-seed{i}": m for i, m in enumerate(fixed)}}
    runs = {name: {"steps": 30, "episodes_played": 32, "turns_played": 100 + i, "train_wall_s": 60.0}
            for i, name in enumerate(models) if name != "start"}
    result = {"models": models, "items": ["i"], "runs": runs, "comparisons": ["staged-fixed"],
              "arms": {arm: {"runs": [f"{arm}-seed{i}" for i in range(4)]} for arm in ("staged", "fixed")}}
    by_items = arms_report(result)
    by_seeds = arms_report({**result, "primary_test": "seeds"})
    assert by_items["test"] == "within_item_permutation" and by_seeds["test"] == "seed_permutation"
    items_test, seeds_test = by_items["primary"]["staged-fixed"], by_seeds["primary"]["staged-fixed"]
    assert seeds_test["seed_permutation"]["p_value"] == pytest.approx(2 / 70)
    assert seeds_test["holm_rejected"] and seeds_test["supported"], "2/70 < 0.05, staged above fixed"
    assert items_test["within_item_permutation"] == seeds_test["within_item_permutation"], "both tests, always"
    assert by_seeds["secondary"]["cost"] == {
        "staged": {"runs": 4, "steps": 120, "episodes_played": 128, "turns_played": 400 + 10, "train_wall_s": 240.0},
        "fixed": {"runs": 4, "steps": 120, "episodes_played": 128, "turns_played": 400 + 26, "train_wall_s": 240.0}}
    waiting = arms_report({**result, "comparisons": ["staged-fixed", "staged-other"], "primary_test": "seeds",
                           "arms": {**result["arms"], "other": {"runs": ["other-seed0"]}}})
    assert waiting["primary_waiting_for"] == ["staged-other"] and by_seeds["primary_waiting_for"] == []
    assert waiting["primary"]["staged-fixed"]["holm_rejected"] is None, "Holm decides on the whole family only"
    assert waiting["primary"]["staged-fixed"]["supported"] is None
    runs["fixed-seed0"]["turns_played"] = None  # a run from before turns were logged
    assert arms_report(result)["secondary"]["cost"]["fixed"]["turns_played"] is None


def test_tables_and_quotes_round_one_number_alike() -> None:
    """A table printed by a report and an inline quote of docs/results.md round half up alike: learning_3.json's
    (a) upper bound 0.3125 is 31.3 in both (Python's format would print 31.2, half to even)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from doc_numbers import interval as quoted_interval

    bound = {"mean": 0.203125, "bca_low": 0.10511363636363635, "bca_high": 0.3125}
    quoted = f"20.3% {quoted_interval(bound, 'bca_low', 'bca_high')}"
    assert experiments.interval_text(bound) == "20.3% [10.5, 31.3]" == quoted
    assert experiments.interval_text({"mean": -0.00025, "bca_low": -0.0125, "bca_high": 0.0125}, signed=True) == \
        "-0.0 [-1.3, +1.3]"
    assert experiments.change_text({"difference": 0.0625, "low": 0.0125, "high": 0.1135, "p_value": 0.0042}) == \
        "+6.3 points [+1.3, +11.4], p = 0.004"


def test_the_third_experiments_analysis_recomputes_from_its_file_alone() -> None:
    """A second reader's check of learning_3.json: the registered tests, computed again from the per-item outcomes,
    the arms and the runs' records it holds, give the analysis it states, number for number."""
    from agentgym_envs.evaluation.significance import arms_report

    result = json.loads((ROOT / "benchmarks" / "results" / "learning_3.json").read_text(encoding="utf-8"))
    assert json.loads(json.dumps(arms_report(result))) == result["analysis"]


def test_the_scalinginter_test_config_is_the_registered_design() -> None:
    """examples/scalinginter_test.yaml as docs/learning_protocol_3.md registers it, on the gate's start."""
    learning = load_learning()
    config = learning.parse_config(["--config", str(ROOT / "examples" / "scalinginter_test.yaml")])
    gate = learning.parse_config(["--config", str(ROOT / "examples" / "scalinginter_gate.yaml")])
    same_start = ("env_id", "out_dir", "items_file", "item_split", "warmup_items", "held_out_train_items",
                  "clone_steps", "clone_learning_rate", "clone_max_length", "max_turns", "eval_samples",
                  "max_context_tokens", "temperature", "max_turn_tokens", "engine")
    assert {name: getattr(config, name) for name in same_start} == {name: getattr(gate, name) for name in same_start}
    assert (config.rl_items, config.seeds, config.steps, config.learning_rate, config.groups_per_step,
            config.group_size, config.max_draw_batches) == ("all", [0, 1, 2, 3], 30, 1e-5, 2, 8, 4)
    assert config.arms == {"fixed": learning.Arm(), "staged": learning.Arm(max_turns_schedule="0:8,10:12,20:20")}
    assert (config.comparisons, config.primary_test, config.family_alpha) == (["staged-fixed"], "seeds", 0.05)
    fixed, staged = (learning.run_command(config, run) for run in learning.training_runs(config)[::4])
    assert fixed[fixed.index("--max_turns") + 1] == "20" and "--max_turns_schedule" not in fixed
    assert staged[staged.index("--max_turns_schedule") + 1] == "0:8,10:12,20:20" and "--max_turns" not in staged
    assert "--oracle_prefix_schedule" not in fixed + staged and "--advantage_estimator" not in fixed + staged
    with pytest.raises(SystemExit, match="unknown primary_test 'both'"):
        learning.parse_config(["--config", str(ROOT / "examples" / "scalinginter_test.yaml"), "--primary_test", "both"])


def test_arms_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    """The second and third experiments' options from a --config file: the gate per oracle prefix (--gate_only),
    then arms from one start in two parts (an oracle_sft arm, then an RFT arm with a reverse curriculum on the
    multi-ingredient items), hard items at their own K, kept checkpoints evaluated into a learning curve, the
    primary comparison with Holm on the hard items, each arm against the start, non-inferiority on the easy ones,
    and every model's fingerprint as its evaluations recorded it."""
    base = save_tiny(tmp_path / "tiny")
    config = tmp_path / "arms.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "env_id": TEXTCRAFT, "base_model": str(base), "out_dir": str(tmp_path / "exp"),
        "items_file": str(tmp_path / "items.json"), "warmup_items": 4, "clone_steps": 1, "seeds": [0], "steps": 2,
        "groups_per_step": 1, "group_size": 2, "max_draw_batches": 1, "max_turns": 2, "eval_samples": 2,
        "eval_limit": 1, "eval_batch_size": 8, "engine": "hf", "max_turn_tokens": 12, "max_context_tokens": 2048,
        "rl_items": "multi_ingredient", "hard_eval_samples": 3, "primary_items": "hard",
        "non_inferiority_margin": 0.05, "curve_steps": 1, "curve_samples": 2, "control_temperatures": [],
        "control_sampling_seeds": [], "arms": {"b": {"advantage_estimator": "rft", "oracle_prefix_schedule": "0:1,1:0"},
                                               "a": {"method": "oracle_sft"}},
        "comparisons": ["b-a"], "robustness_drop_items": [], "gate_samples": 2, "gate_prefixes": [0, 1],
        "results_file": str(tmp_path / "arms.json"), "plot_file": str(tmp_path / "arms.png")}))
    command = [sys.executable, str(ROOT / "examples" / "learning.py"), "--config", str(config)]
    gate = run_offline([*command, "--gate_only", "true"], tmp_path, timeout=600)
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-3000:]
    assert not (tmp_path / "exp" / "eval" / "start").exists(), "--gate_only evaluates nothing else"
    part1 = run_offline([*command, "--only_arms", "a"], tmp_path, timeout=900)
    assert part1.returncode == 0, part1.stdout[-3000:] + part1.stderr[-3000:]
    first = json.loads((tmp_path / "arms.json").read_text())
    assert set(first["models"]) == {"start", "a-seed0"} and first["analysis"]["primary"] == {}
    assert not (tmp_path / "exp" / "b").exists(), "part 1 trains only its arms"
    inputs = json.loads((tmp_path / "exp" / "a" / "seed0" / "stage_inputs.json").read_text())
    from agentgym_trl.models import weights_fingerprint

    assert inputs["weights"] == weights_fingerprint(tmp_path / "exp" / "start"), "cloned from the kept start"
    assert inputs["clone"]["clone_lr_schedule"] == "constant" and inputs["clone"]["clone_steps"] == 2
    items = json.loads((tmp_path / "items.json").read_text())
    multi = [i for i in items["warmup_and_rl"] if items["oracle_actions"][str(i)] > 2]
    assert inputs["items"] == {TEXTCRAFT: multi}

    part2 = run_offline(command, tmp_path, timeout=1200)
    assert part2.returncode == 0, part2.stdout[-3000:] + part2.stderr[-3000:]
    assert "training a-seed0" not in part2.stdout and "evaluating a-seed0" not in part2.stdout
    result = json.loads((tmp_path / "arms.json").read_text())
    assert set(result["models"]) == {"start", "a-seed0", "b-seed0"}
    for name, folder in (("start", "start"), ("a-seed0", "a/seed0"), ("b-seed0", "b/seed0")):
        assert result["weights"][name] == weights_fingerprint(tmp_path / "exp" / folder)
    assert result["arms"]["b"]["runs"] == ["b-seed0"] and result["arms"]["a"]["method"] == "oracle_sft"
    run_b, run_a = result["runs"]["b-seed0"], result["runs"]["a-seed0"]
    assert run_b["advantage_estimator"] == "rft" and "--oracle_prefix_schedule" in run_b["command"]
    assert run_a["method"] == "oracle_sft" and run_a["steps"] == 2 and run_a["train_wall_s"] > 0
    assert set(result["learning_curves"]) == {"b-seed0"}, "curves of the RL runs"
    assert [point["weights"] for point in result["learning_curves"]["b-seed0"]["steps"]] == [
        weights_fingerprint(tmp_path / "exp" / "b" / "seed0" / f"checkpoint-{step}") for step in (1, 2)]
    assert run_b["curve"]["oracle_prefix_k"] == [1, 0] and "success_k1" in run_b["curve"]
    assert result["rl_items"] == [f"{TEXTCRAFT}:{i}" for i in multi]
    assert json.loads((tmp_path / "exp" / "rl_items.json").read_text()) == {TEXTCRAFT: multi}
    assert set(result["gate"]["per_prefix"]) == {"0", "1"} and result["gate"]["items"] == multi
    assert f"start weights {result['gate']['start_weights']}" in gate.stdout
    gate_k1 = [json.loads(line) for line in (tmp_path / "exp" / "eval" / "gate" / "k1" / "trajectories.jsonl")
               .read_text().splitlines()]
    assert all(len(record["prefix_actions"]) == 1 for record in gate_k1)
    assert len(result["hard_items"]) == 2 and len(result["items"]) == 4  # one easy and one hard item per part
    for name in result["models"]:
        assert {len(result["models"][name][key]) for key in result["hard_items"]} == {3}
        assert {len(o) for key, o in result["models"][name].items() if key not in result["hard_items"]} == {2}
    analysis = result["analysis"]
    primary = analysis["primary"]["b-a"]
    assert primary["within_item_permutation"]["items"] == len(result["hard_items"])
    assert isinstance(primary["holm_rejected"], bool) and "supported" in primary
    assert analysis["test"] == "within_item_permutation", "the default: seeds pooled per item"
    assert primary["seed_permutation"]["relabellings"] == 2, "one seed an arm: the seed-level test rides along"
    assert run_b["turns_played"] >= run_b["episodes_played"], "every episode plays at least one turn"
    cost = analysis["secondary"]["cost"]
    assert cost["b"]["turns_played"] == run_b["turns_played"] and cost["a"]["turns_played"] is None
    assert set(analysis["secondary"]["arm_vs_start"]) == {"a", "b"}
    assert analysis["on"] == "hard" and analysis["items"] == 2
    assert analysis["secondary"]["non_inferiority"]["items"] == 2
    assert set(analysis["secondary"]["non_inferiority"]["per_arm"]) == {"a", "b"}
    assert (tmp_path / "arms.png").read_bytes()[:4] == b"\x89PNG"
    assert "| **b-a** (primary) |" in part2.stdout

    # A lost machine: the start's and (a)'s folders are gone, and (b) was not yet committed. Run again with
    # --keep_committed, it re-makes nothing it has, keeps the committed records, reads (b) from its folders and
    # recomputes the same analysis; a start that is not the committed one stops it.
    learning = load_learning()
    committed = json.loads(json.dumps(result))
    for key in ("models", "runs", "weights", "learning_curves"):
        del committed[key]["b-seed0"]
    (tmp_path / "arms.json").write_text(json.dumps(committed))
    for folder in ("eval/start", "eval/a-seed0", "a"):
        shutil.rmtree(tmp_path / "exp" / folder)
    argv = ["--config", str(config), "--keep_committed", "true"]
    kept = json.loads(json.dumps(learning.main([*argv, "--only_seeds", "0"])))
    assert kept["kept_from_committed"] == {"file": str(tmp_path / "arms.json"), "models": ["start", "a-seed0"]}
    assert not (tmp_path / "exp" / "eval" / "start").exists() and not (tmp_path / "exp" / "a").exists()
    for key in ("models", "runs", "weights", "eval", "learning_curves", "analysis"):
        assert kept[key] == result[key], key
    with pytest.raises(SystemExit, match=r"holds \['a-seed0', 'b-seed0'\], which this config does not"):
        learning.main([*argv, "--report_only", "true", "--seeds", "1"])  # a rewrite would drop seed 0's models
    other_start = {**committed, "weights": {**committed["weights"], "start": "0000000000000000"}}
    (tmp_path / "arms.json").write_text(json.dumps(other_start))
    for call in (argv, [*argv, "--report_only", "true"]):  # before any training, and in the report
        with pytest.raises(SystemExit, match="not the committed start"):
            learning.main(call)
