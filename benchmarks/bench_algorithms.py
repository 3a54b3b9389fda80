"""The advantage estimators side by side on the learning experiment's task -> results/algorithms.json.

Every arm trains SmolLM2-135M-Instruct from the same behaviour-cloned start (``examples/turn_budget.py``'s,
made first when missing) on TextCraft depth 1 with the same steps, items per step, group size, turn budget,
learning rate and seeds; only ``--advantage_estimator`` / ``--turn_credit`` differ:

* ``grpo`` (the baseline), ``rloo``, ``reinforce_pp`` (with its KL in the reward, ``--reinforce_pp_beta``),
  ``remax`` (one greedy episode per item and step on top: slower per step), ``gae`` (shared value head),
  ``grpo_step_level`` (GiGPO's step advantage, per-step env rewards).

Each (arm, seed) is one ``agentgym_trl.train`` process (its peak RSS measured from its rusage), then tested
on all depth-1 test items, K samples each; the arm's seeds are pooled per item. Reported per arm: held-out
success with a 95% bootstrap interval over items, the change against ``grpo`` paired by item (bootstrap
interval and sign-flip p), seconds per optimizer step and peak memory. Every step resumes: run it again::

    python benchmarks/bench_algorithms.py                          # every arm, seeds 0 and 1
    python benchmarks/bench_algorithms.py --arms grpo rloo --seeds 0
    python benchmarks/bench_algorithms.py --report_only true       # table, JSON and plot from finished runs

Two processes can share the machine: disjoint ``--arms``, ``--evaluate_start false`` in the second (it
waits for the first to make the start), each with ``OMP_NUM_THREADS=1 ... --cpu_threads 1`` (the trainer
otherwise takes every core, and two such processes slow each other down several times). ``--conditions``
records the layout in the JSON, since the step times depend on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import HfArgumentParser  # noqa: E402

from agentgym_envs.evaluation.metrics import compare_success, success_interval  # noqa: E402
from agentgym_trl.experiments import (  # noqa: E402
    ArmsConfig,
    change_text,
    logged_steps,
    percent_text,
    plot_arms,
    evaluation_result,
    train_once,
    training_curve,
    without_items,
    write_results,
)
from agentgym_trl.models import is_reloadable  # noqa: E402

NO_SKIP = ["--skip_zero_advantage", "false"]  # gae trains its critic on every row; beta > 0 forbids skipping
ARMS: dict[str, list[str]] = {
    "grpo": [],
    "rloo": ["--advantage_estimator", "rloo"],
    "reinforce_pp": ["--advantage_estimator", "reinforce_pp", *NO_SKIP],
    "remax": ["--advantage_estimator", "remax"],
    "gae": ["--advantage_estimator", "gae", "--value_head", "shared", *NO_SKIP],
    "grpo_step_level": ["--turn_credit", "step_level", "--turn_reward", "env"],
}
PEAK_FILE = "peak_rss.json"


@dataclass
class AlgorithmsConfig(ArmsConfig):
    out_dir: str = field(default="runs/algorithms", metadata={"help": "arms, evaluations and logs"})
    arms: list[str] = field(default_factory=lambda: list(ARMS), metadata={"help": f"arms to run: {list(ARMS)}"})
    seeds: list[int] = field(default_factory=lambda: [0, 1], metadata={"help": "training seeds of every arm"})
    steps: int = field(default=16, metadata={"help": "steps of every arm (16 x 8 episodes: six arms fit a session)"})
    train_turns: int = field(default=6, metadata={"help": "turn budget of every arm in training"})
    reinforce_pp_beta: float = field(default=0.001, metadata={"help": "KL coefficient in REINFORCE++'s reward"})
    evaluate_start: bool = field(default=True, metadata={
        "help": "make and test the start first; false in a second process beside the first: it waits for the start"})
    cpu_threads: int = field(default=0, metadata={
        "help": "torch threads of each training process (0: the trainer's default, all cores); 1 side by side"})
    conditions: str = field(default="one process, all cores", metadata={
        "help": "how the runs shared the machine, recorded in the JSON beside the step times"})
    results_file: str = "benchmarks/results/algorithms.json"
    plot_file: str = "docs/algorithms.png"


def arm_args(config: AlgorithmsConfig, arm: str) -> list[str]:
    extra = ["--max_turns", str(config.train_turns), *ARMS[arm]]
    if config.cpu_threads:
        extra += ["--cpu_threads", str(config.cpu_threads)]
    if arm == "reinforce_pp":
        extra += ["--beta", str(config.reinforce_pp_beta)]
    return extra


def run_dir(config: AlgorithmsConfig, arm: str, seed: int) -> Path:
    return Path(config.out_dir) / f"{arm}-seed{seed}"


def eval_dir(config: AlgorithmsConfig, arm: str, seed: int) -> Path:
    return Path(config.out_dir) / "eval" / f"{arm}-seed{seed}"


def run_measured(command: list[str], log: Path) -> float:
    """Run a child with its output in ``log``; its peak RSS in MB (from its own rusage)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"$ {' '.join(command)}\n  (log: {log})", flush=True)
    with open(log, "a", encoding="utf-8") as handle:
        child = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"failed with exit code {code}; see {log}. Run the same command again to resume.")
    return usage.ru_maxrss / 1024  # kilobytes on Linux


def train(config: AlgorithmsConfig, arm: str, seed: int) -> None:
    """One (arm, seed) training child, once, with its peak memory kept beside it."""
    folder = run_dir(config, arm, seed)

    def measured(command: list[str], log: Path) -> None:
        peak_mb = run_measured(command, log)
        (folder / PEAK_FILE).write_text(json.dumps({"peak_rss_mb": round(peak_mb, 1)}) + "\n", encoding="utf-8")

    command = replace(config, seed=seed).grpo_command(folder, arm_args(config, arm))
    train_once(command, folder, Path(config.out_dir) / "logs" / f"train-{arm}-seed{seed}.log", run=measured)


def arm_result(config: AlgorithmsConfig, arm: str) -> dict | None:
    """The arm's seeds pooled per test item, its step time and its peak memory; None until every seed is tested."""
    if not all((eval_dir(config, arm, s) / "summary.json").is_file() for s in config.seeds):
        return None
    per_item: dict = {}
    step_s, peaks = [], []
    for seed in config.seeds:
        for item, successes in evaluation_result(eval_dir(config, arm, seed))["per_item"].items():
            per_item.setdefault(item, []).extend(successes)
        curve = training_curve(logged_steps(run_dir(config, arm, seed)))
        step_s += [s for s in curve["step_s"] if s]
        peaks.append(json.loads((run_dir(config, arm, seed) / PEAK_FILE).read_text())["peak_rss_mb"])
    return {"test": success_interval(per_item), "per_item": per_item,
            "step_s_mean": round(sum(step_s) / max(len(step_s), 1), 1), "peak_rss_mb": max(peaks)}


def report(config: AlgorithmsConfig) -> dict:
    if not (Path(config.out_dir) / "eval" / "start" / "summary.json").is_file():
        sys.exit(f"error: nothing to report in {config.out_dir}: run the benchmark first")
    start = evaluation_result(Path(config.out_dir) / "eval" / "start")
    arms = {arm: result for arm in config.arms if (result := arm_result(config, arm)) is not None}
    baseline = arms.get("grpo")
    for result in arms.values():
        result["change_vs_start"] = compare_success(start["per_item"], result["per_item"])
        if baseline is not None:
            result["change_vs_grpo"] = compare_success(baseline["per_item"], result["per_item"])
    summary = {
        "what": "advantage estimators from one behaviour-cloned start: held-out success, step time, peak memory",
        "config": asdict(config),
        "start": without_items(start),
        "arms": {arm: without_items(result) for arm, result in arms.items()},
        "method": "success = Avg@K over every test item, the seeds pooled per item; 95% interval = bootstrap over "
                  "items; changes paired over items, p = two-sided sign-flip permutation test",
        "conditions": config.conditions,
    }
    runs = {arm: (run_dir(config, arm, config.seeds[0]), arms[arm]["test"]) for arm in arms}
    write_results(config.results_file, summary)
    plot_arms(config.plot_file, start, runs, f"advantage estimators on {config.env_id.removeprefix('AgentGym/')}"
              f", {config.steps} steps, seeds {config.seeds}")
    print_table(summary)
    return summary


def print_table(summary: dict) -> None:
    print("\n| estimator | test success (95% CI) | vs grpo (95% CI), p | vs start, p | s / step | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    print(f"| start (SFT) | {percent_text(summary['start'])} | - | - | - | - |")
    for arm, entry in summary["arms"].items():
        versus = change_text(entry["change_vs_grpo"]) if "change_vs_grpo" in entry else "-"
        print(f"| {arm} | {percent_text(entry['test'])} | {versus} | {change_text(entry['change_vs_start'])} | "
              f"{entry['step_s_mean']} | {entry['peak_rss_mb']} |")


def wait_for_start(config: AlgorithmsConfig, poll_s: float = 10.0) -> None:
    if is_reloadable(config.start_model):
        return
    print(f"waiting for {config.start_model} (made by the process with --evaluate_start true)", flush=True)
    while not is_reloadable(config.start_model):
        time.sleep(poll_s)
    time.sleep(poll_s)  # the weights may still be being written


def main(argv: list[str] | None = None) -> dict:
    (config,) = HfArgumentParser(AlgorithmsConfig).parse_args_into_dataclasses(args=argv)
    unknown = set(config.arms) - set(ARMS)
    if unknown:
        sys.exit(f"unknown arms {sorted(unknown)}; choose from {list(ARMS)}")
    if not config.report_only:
        if config.evaluate_start:
            config.make_start()
            config.evaluate("start", config.start_model)
        else:  # the second of two processes: the first makes the start
            wait_for_start(config)
        for arm in config.arms:
            for seed in config.seeds:
                train(config, arm, seed)
                config.evaluate(f"{arm}-seed{seed}", str(run_dir(config, arm, seed)))
    return report(config)


if __name__ == "__main__":
    main()
