"""Does a real model learn with our trainer, and does the ScalingInter turn curriculum help?

Three GRPO arms train SmolLM2-135M-Instruct from one start on one task, with the same number of steps,
the same seed and the same items per step. Only the turn budget differs:

* ``small``:  a fixed small budget (short episodes: cheap, but long tasks cannot be finished);
* ``large``:  a fixed large budget;
* ``staged``: small first, then large (the paper's ScalingInter-RL schedule, here in two stages).

The start and every arm's final model are evaluated the same way on the held-out test split (the same
items, K samples each, the same turn budget), and the report puts a 95% bootstrap interval (over items)
on each success rate and a paired sign-flip test on each change::

    python examples/turn_budget.py                       # the whole experiment; run it again to resume
    python examples/turn_budget.py --arms staged small   # only some arms (then the report of what exists)
    python examples/turn_budget.py --report_only true    # table, JSON and plot from finished runs
    python examples/turn_budget.py --phase train & python examples/turn_budget.py --phase eval   # overlapped

SmolLM2's own success is 0 on every candidate task (TextCraft depth 1 and BabyAI GoTo: it never writes
a valid action), so all arms start from the behaviour-cloned checkpoint of ``examples/sft.py`` (trained
on oracle episodes of train items only); it is made first when ``--start_model`` does not exist.

Every step leaves its output on disk and is skipped when that output exists: the SFT checkpoint, each
evaluation (``agentgym eval`` resumes episode by episode), each arm (``python -m agentgym_trl.train --preset
cpu-demo`` in its own process, checkpointing every ``--save_steps`` steps and resuming from the newest checkpoint).
Results: ``benchmarks/results/turn_budget.json`` and ``docs/turn_budget.png``. The start, the training command,
the evaluations and the report's pieces are ``agentgym_trl.experiments``'; the arms are this file's.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import HfArgumentParser  # noqa: E402

from agentgym_envs.evaluation.metrics import compare_success, outcome_lists  # noqa: E402
from agentgym_trl.experiments import (  # noqa: E402
    ArmsConfig,
    change_text,
    logged_steps,
    percent_text,
    plot_arms,
    evaluation_result,
    train_once,
    training_curve,
    wait_until_trained,
    without_items,
    write_results,
)

ARMS = ("small", "large", "staged")


@dataclass
class ExperimentConfig(ArmsConfig):
    """The three arms' budgets on top of the settings every arm shares (``ArmsConfig``)."""

    arms: list[str] = field(default_factory=lambda: list(ARMS), metadata={"help": "arms to run: small large staged"})
    small_turns: int = field(default=3, metadata={"help": "budget of the 'small' arm"})
    large_turns: int = field(default=6, metadata={"help": "budget of the 'large' arm"})
    staged_schedule: str = field(default="0:3,11:4,22:6", metadata={
        "help": "'step:turns,...' of the 'staged' arm (ScalingInter-RL: the budget grows in rounds)"})
    phase: str = field(default="all", metadata={
        "help": "all | train (the arms only) | eval (the start, then each arm as soon as it is trained): run a "
                "'train' and an 'eval' process side by side to overlap them"})
    results_file: str = "benchmarks/results/turn_budget.json"
    plot_file: str = "docs/turn_budget.png"


def budget_args(config: ExperimentConfig, arm: str) -> list[str]:
    return {
        "small": ["--max_turns", str(config.small_turns)],
        "large": ["--max_turns", str(config.large_turns)],
        "staged": ["--max_turns_schedule", config.staged_schedule],
    }[arm]


def final_model(config: ExperimentConfig, arm: str) -> Path:
    return Path(config.out_dir) / arm


def train_arm(config: ExperimentConfig, arm: str) -> None:
    """The arm's training child (``agentgym_trl.train``), once; a stopped one resumes from its newest checkpoint."""
    train_once(config.grpo_command(final_model(config, arm), budget_args(config, arm)), final_model(config, arm),
               Path(config.out_dir) / "logs" / f"train-{arm}.log")


RUN_CONFIG_FILE = "experiment_config.json"  # the config of the run that trained and tested (not of --report_only)


def record_run_config(config: ExperimentConfig) -> None:
    """Keep the config of each training/evaluating call, so the report names what actually ran."""
    path = Path(config.out_dir) / RUN_CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    runs.append({"at": time.strftime("%Y-%m-%d %H:%M:%S"), "config": asdict(config)})
    path.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")


def report(config: ExperimentConfig) -> dict:
    out = Path(config.out_dir)
    if not (out / "eval" / "start" / "summary.json").is_file():
        sys.exit(f"error: nothing to report in {out}: the start has not been evaluated there yet; run the experiment "
                 f"first (python examples/turn_budget.py --out_dir {out}) or give the --out_dir of a finished run")
    start = evaluation_result(out / "eval" / "start")
    arms = {}
    for arm in ARMS:
        if not (out / "eval" / arm / "summary.json").exists():
            continue
        result = evaluation_result(out / "eval" / arm)
        curve = training_curve(logged_steps(out / arm))
        arms[arm] = {
            "budget": " ".join(budget_args(config, arm)[1:]),
            "train_minutes": round(sum(s for s in curve["step_s"] if s) / 60, 1),
            "curve": curve,
            "test": without_items(result),
            "change_vs_start": compare_success(start["per_item"], result["per_item"]),
            "per_item": result["per_item"],
        }
    pairs = {f"{a}_vs_{b}": compare_success(arms[b]["per_item"], arms[a]["per_item"])
             for a, b in (("staged", "small"), ("staged", "large"), ("large", "small")) if a in arms and b in arms}
    run_configs = out / RUN_CONFIG_FILE
    summary = {
        "what": "GRPO from one behaviour-cloned start, three turn-budget arms, test success before and after",
        "config": asdict(config),
        "run_configs": json.loads(run_configs.read_text(encoding="utf-8")) if run_configs.is_file() else [],
        "start": without_items(start),
        "arms": {arm: without_items(entry) for arm, entry in arms.items()},
        "per_item_outcomes": {"start": outcome_lists(start["per_item"]),
                              **{arm: outcome_lists(entry["per_item"]) for arm, entry in arms.items()}},
        "arm_vs_arm": pairs,
        "replication": replication(out, start["per_item"], {arm: entry["per_item"] for arm, entry in arms.items()}),
        "method": "success = Avg@K over every test item; 95% interval = bootstrap over items (10k resamples); "
                  "change = paired over items, p = two-sided sign-flip permutation test",
    }
    write_results(config.results_file, summary)
    plot_arms(config.plot_file, start, {arm: (out / arm, arms[arm]["test"]) for arm in arms},
              f"GRPO on {config.env_id.removeprefix('AgentGym/')}: turn budget arms, {config.steps} steps each, "
              "from the SFT start")
    print_table(summary)
    return summary


def replication(out: Path, first_start: dict, first_arms: dict[str, dict]) -> dict:
    """A second test of the start and of some arms with a new sampling seed (``<out_dir>/replication/<name>``, made
    with ``agentgym eval --seed 1``; see docs/results.md): the change on its own, and pooled with the first test
    (K=8)."""
    folder = out / "replication"
    if not (folder / "start" / "summary.json").is_file():
        return {}
    start = evaluation_result(folder / "start")
    result: dict = {"start": without_items(start),
                    "per_item_outcomes": {"start": outcome_lists(start["per_item"])}}
    for arm, first in first_arms.items():
        if not (folder / arm / "summary.json").is_file():
            continue
        again = evaluation_result(folder / arm)
        result["per_item_outcomes"][arm] = outcome_lists(again["per_item"])
        result[arm] = {
            "test": without_items(again),
            "change_vs_start": compare_success(start["per_item"], again["per_item"]),
            "pooled_change_vs_start": compare_success(pooled(first_start, start["per_item"]),
                                                      pooled(first, again["per_item"])),
        }
    return result


def pooled(first: dict, second: dict) -> dict:
    """Both tests' samples of each item (K + K per item)."""
    return {item: [*first[item], *second.get(item, [])] for item in first}


def print_table(summary: dict) -> None:
    start = summary["start"]
    print("\n| arm | train budget | test success (95% CI) | change vs start (95% CI) | p | test turns | train min |")
    print("|---|---|---|---|---|---|---|")
    print(f"| start (SFT) | - | {percent_text(start)} | - | - | {start['turns']:.2f} | - |")
    for arm, entry in summary["arms"].items():
        change = entry["change_vs_start"]
        print(f"| {arm} | {entry['budget']} | {percent_text(entry['test'])} | {change['difference'] * 100:+.1f} "
              f"[{change['low'] * 100:+.1f}, {change['high'] * 100:+.1f}] | {change['p_value']:.3f} | "
              f"{entry['test']['turns']:.2f} | {entry['train_minutes']} |")
    for name, change in summary["arm_vs_arm"].items():
        print(f"{name}: {change_text(change)}")
    again = summary.get("replication") or {}
    for arm, entry in again.items():
        if arm not in ("start", "per_item_outcomes"):
            print(f"replication, {arm} vs start: {percent_text(entry['test'])} vs {percent_text(again['start'])}, "
                  f"{change_text(entry['change_vs_start'])}; pooled with the first test: "
                  f"{change_text(entry['pooled_change_vs_start'])}")


def main(argv: list[str] | None = None) -> dict:
    (config,) = HfArgumentParser(ExperimentConfig).parse_args_into_dataclasses(args=argv)
    unknown = set(config.arms) - set(ARMS)
    if unknown:
        sys.exit(f"unknown arms {sorted(unknown)}; choose from {list(ARMS)}")
    if config.phase not in ("all", "train", "eval"):
        sys.exit(f"unknown phase {config.phase!r}; choose all, train or eval")
    if not config.report_only:
        record_run_config(config)
        began = time.time()
        if config.phase != "eval":
            config.make_start()
        if config.phase != "train":
            config.evaluate("start", config.start_model)
        for arm in config.arms:
            if config.phase != "eval":
                train_arm(config, arm)
            if config.phase != "train":
                wait_until_trained(final_model(config, arm))
                config.evaluate(arm, str(final_model(config, arm)))
        print(f"{config.phase} time: {(time.time() - began) / 60:.1f} min", flush=True)
    return report(config) if config.phase != "train" else {}


if __name__ == "__main__":
    main()
