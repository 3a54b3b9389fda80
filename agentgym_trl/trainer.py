"""``AgentGRPOConfig`` and ``AgentGRPOTrainer``: TRL's GRPO with multi-turn env rollouts and a turn curriculum.

The subclass is thin on purpose. TRL's ``GRPOTrainer`` already accepts a ``rollout_func`` that
returns prompt ids, completion ids, logprobs and an ``env_mask`` (1 = model token, trained; 0 =
observation, masked out of the loss); everything after generation (rewards, group advantages, KL
against the reference model, the clipped loss, DDP / DeepSpeed / FSDP, LoRA through
``peft_config``, vLLM weight sync) stays TRL's. What the subclass adds:

* the dataset: one row per (env id, item id) from the envs' train splits, mixtures allowed;
* the rows reach the rollout: ``rollout_func`` only receives prompts, so
  ``_generate_and_score_completions`` (which sees the rows) stashes them for it;
* the rollout's output is validated (TRL does not check ``env_mask`` lengths) before TRL uses it;
* the env's outcome reward is the default reward function (``env_reward``); extra reward functions
  can be added and see ``env_reward``, ``env_success``, ``env_turns``, ``env_stop_reason``;
* the turn budget comes from ``TurnBudgetCallback`` and per-env metrics are logged every step.

CPU (tests, CI) generates with HF ``generate``; on GPUs ``use_vllm=True`` with ``vllm_mode="server"``
or ``"colocate"`` routes each turn's generation through TRL's vLLM client instead.
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import gather_object, is_peft_model
from transformers import PreTrainedModel
from trl import GRPOConfig, GRPOTrainer
from trl.models import unwrap_model_for_generation

from agentgym_trl.chat import ChatEncoder
from agentgym_trl.cpu import (
    plan_micro_batches,
    release_memory,
    row_lengths,
    take_rows,
    use_compact_lm_head,
    use_cpu_threads,
)
from agentgym_trl.curriculum import TRUNCATED_METRIC, ScheduleError, TurnBudgetCallback, TurnSchedule
from agentgym_trl.data import build_env_dataset, check_env_ids, placeholder_prompt
from agentgym_trl.generation import Generator, HFGenerator, VLLMGenerator
from agentgym_trl.models import bf16_is_fast, is_reloadable, save_plain_copy
from agentgym_trl.rollout import (
    CONTEXT,
    ENV_ERROR,
    MAX_TURNS,
    TURN_TOKENS,
    EnvPool,
    RolloutResult,
    run_rollout,
    validate_rollout_output,
)

logger = logging.getLogger(__name__)

DEFAULT_ENV_ID = "AgentGym/TextCraft-Depth1-v0"
DEFAULT_FIXED_TURNS = 10
DEFAULT_CPU_MICRO_BATCH_TOKENS = 2048
# Loss types whose normaliser spans the whole batch already (TRL's num_items_in_batch): a micro-batch's loss is its
# share as it is. The others average within the batch they see, so a micro-batch is weighted by its rows or tokens.
BATCH_NORMALISED_LOSSES = ("dapo", "cispo", "vespo")
ROW_AVERAGED_LOSSES = ("grpo", "sapo", "luspo", "dr_grpo")
TOKEN_AVERAGED_LOSSES = ("bnpo",)


@dataclass
class AgentGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the envs, the turn schedule and the token limits of multi-turn rollouts.

    Defaults that differ from ``GRPOConfig``: ``logging_steps=1`` (the curriculum metrics are per
    step); ``bf16`` only when a GPU supports it; ``gradient_checkpointing`` only on GPU; ``beta=0.001``
    (the paper's KL coefficient); ``max_completion_length`` = ``max_context_tokens`` (a multi-turn
    completion holds every turn and observation). ``mask_truncated_completions`` is replaced by
    ``mask_truncated_turns`` (TRL's flag looks only at the last token of the whole episode).
    """

    env_ids: list[str] = field(
        default_factory=lambda: [DEFAULT_ENV_ID],
        metadata={"help": "Registered Gymnasium env ids to train on (several = a mixture of their train items)."},
    )
    train_split: str = field(default="train", metadata={"help": "Which split of the envs' items to train on."})
    max_items_per_env: int | None = field(
        default=None, metadata={"help": "Use at most this many items per env id (a fixed random subset)."}
    )
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
    max_turn_tokens: int = field(default=256, metadata={"help": "Token limit of one model turn."})
    max_context_tokens: int = field(
        default=4096, metadata={"help": "Token limit of a whole episode: prompt, model turns and observations."}
    )
    env_workers: int = field(default=8, metadata={"help": "Threads stepping envs concurrently within a turn."})
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
    metrics_file: str | None = field(
        default="agent_metrics.jsonl",
        metadata={"help": "JSON-lines file (relative to output_dir) receiving every log; empty to disable."},
    )
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
            "this budget; 0 = off. Default: 2048 on CPU, off on GPU. One process only: with several, TRL's loss gathers "
            "per-row metrics on every call, so each process trains its batch whole."
        },
    )
    release_memory: bool = field(
        default=True,
        metadata={"help": "Return freed memory to the OS after each rollout and optimizer step (CPU)."},
    )
    share_prompt_prefill: bool = field(
        default=True,
        metadata={"help": "Encode a group's shared first prompt once, not once per episode (HF generation)."},
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
    log_trajectories: bool = field(
        default=False,
        metadata={
            "help": "Append every rollout's episodes (conversation, reward, success, turns) to "
            "output_dir/trajectories.jsonl (trajectories.rank<N>.jsonl on other processes); `agentgym view` reads them."
        },
    )

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
        if self.activation_checkpointing is None:  # transformers 5 name; gradient_checkpointing is its alias
            checkpointing = self.gradient_checkpointing
            self.activation_checkpointing = gpu if checkpointing is None else bool(checkpointing)
            self.gradient_checkpointing = None
        if isinstance(self.env_ids, str):
            self.env_ids = [part for part in self.env_ids.replace(",", " ").split() if part]
        check_env_ids(self.env_ids)
        self.turn_schedule()  # raises on a bad schedule
        if self.max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be at least 1, got {self.max_turn_tokens}")
        if self.max_turn_tokens >= self.max_context_tokens:
            raise ValueError(
                f"max_turn_tokens ({self.max_turn_tokens}) must be smaller than max_context_tokens "
                f"({self.max_context_tokens}): one turn has to fit in the context together with the prompt"
            )
        if self.truncated_turn not in ("end", "step"):
            raise ValueError(f"truncated_turn must be 'end' or 'step', got {self.truncated_turn!r}")
        if self.micro_batch_tokens < 0:
            raise ValueError(f"micro_batch_tokens must be 0 (off) or positive, got {self.micro_batch_tokens}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads must be at least 1, got {self.cpu_threads}")
        if self.skip_zero_advantage and self.beta != 0.0:
            raise ValueError(
                "skip_zero_advantage needs beta=0: a row with zero advantage still has a KL gradient when beta > 0"
            )
        if self.env_workers < 1:
            raise ValueError(f"env_workers must be at least 1, got {self.env_workers}")
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


def env_reward(completions: list, env_reward: list[float] | None = None, **kwargs: Any) -> list[float]:
    """The env's outcome reward of each episode (sum of its rewards = final score in [0, 1])."""
    if env_reward is None:
        raise ValueError("env_reward needs the rollout's 'env_reward' field: use it with AgentGRPOTrainer")
    return [float(r) for r in env_reward]


class AgentGRPOTrainer(GRPOTrainer):
    """GRPO over multi-turn env episodes. ``model`` is a path/hub id or a ``PreTrainedModel``."""

    def __init__(
        self,
        model: str | PreTrainedModel,
        args: AgentGRPOConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_funcs: Callable | Sequence[Callable] | None = None,
        callbacks: Sequence[Any] | None = None,
        peft_config: Any = None,
        env_pool: EnvPool | None = None,
        **kwargs: Any,
    ):
        if args is None:
            args = AgentGRPOConfig(output_dir="agentgym-grpo")
        if not isinstance(args, AgentGRPOConfig):
            raise TypeError(f"AgentGRPOTrainer needs an AgentGRPOConfig, got {type(args).__name__}")
        if "rollout_func" in kwargs or "environment_factory" in kwargs or "tools" in kwargs:
            raise TypeError(
                "AgentGRPOTrainer supplies its own rollout; do not pass rollout_func/environment_factory/tools"
            )
        self.schedule = args.turn_schedule()
        self.on_cpu = args.use_cpu or not torch.cuda.is_available()
        if self.on_cpu:
            use_cpu_threads(PartialState().num_processes, args.cpu_threads)
        use_compact_lm_head(args.compact_lm_head)
        self._micro_batching_warned = False
        if train_dataset is None:
            train_dataset = build_env_dataset(args.env_ids, args.train_split, args.max_items_per_env, args.seed)
        else:
            train_dataset = prepare_rows_dataset(train_dataset)
        if eval_dataset is not None:
            eval_dataset = prepare_rows_dataset(eval_dataset)
        if args.beta != 0.0 and peft_config is None:
            model = _make_reference_reloadable(model, args.output_dir)
        metrics_path = os.path.join(args.output_dir, args.metrics_file) if args.metrics_file else None
        self.curriculum = TurnBudgetCallback(self.schedule, args.truncation_warning_threshold, metrics_path)
        funcs = [env_reward]
        if reward_funcs is not None:
            funcs += list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        self._rollout_rows: list[dict[str, Any]] | None = None
        self.last_rollout: RolloutResult | None = None
        with warnings.catch_warnings():  # rollout_func is "experimental" in TRL; this class validates its output
            warnings.filterwarnings("ignore", message=".*rollout_func.*experimental")
            super().__init__(
                model=model,
                reward_funcs=funcs,
                args=args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=processing_class,
                callbacks=[self.curriculum, *(callbacks or [])],
                peft_config=peft_config,
                rollout_func=self._agent_rollout,
                **kwargs,
            )
        self.chat = ChatEncoder(self._tokenizer, self.eos_token_ids, args.chat_template_kwargs)
        eval_cap = max([args.eval_max_turns or 0, *(env_turn_cap(e) for e in args.env_ids)])
        self._owns_env_pool = env_pool is None
        self.env_pool = env_pool or EnvPool(max_episode_steps=max(self.schedule.max_turns, eval_cap))
        self.env_executor = ThreadPoolExecutor(max_workers=args.env_workers, thread_name_prefix="agentgym-env")
        self.generator = self._make_generator()

    # ---- plumbing into TRL ---------------------------------------------------------------------
    def _make_generator(self) -> Generator:
        pad = self._tokenizer.pad_token_id
        if self.use_vllm:
            merged = dict(self.vllm_generation.generation_kwargs or {})
            merged.setdefault("stop_token_ids", list(self.chat.stop_ids))
            self.vllm_generation.generation_kwargs = merged
            slots = self.args.per_device_train_batch_size * self.args.steps_per_generation
            slots = max(slots, self.args.per_device_eval_batch_size)
            return VLLMGenerator(self.vllm_generation, self.accelerator, self.chat.stop_ids, slots, pad)
        return HFGenerator(self.model, self.generation_config, pad, self.chat.stop_ids, unwrap=self._unwrapped_model,
                           share_prompt_prefill=self.args.share_prompt_prefill)

    @contextmanager
    def _unwrapped_model(self) -> Iterator[Any]:
        """The policy to sample from, gathered once for the whole rollout (ZeRO-3 / FSDP) as TRL does per call."""
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as unwrapped,
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            yield unwrapped

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        # TRL hands rollout_func only the prompts; the rollout needs each row's env id and item id.
        self._rollout_rows = inputs
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._rollout_rows = None

    def _agent_rollout(self, prompts: list, trainer: Any = None) -> dict[str, list]:
        rows = self._rollout_rows
        if rows is None or len(rows) != len(prompts):
            raise RuntimeError("the agent rollout runs only inside AgentGRPOTrainer._generate_and_score_completions")
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            budget: int | list[int] = self.curriculum.budget
        else:
            budget = [self.args.eval_max_turns or env_turn_cap(str(r["env_id"])) for r in rows]
        result = run_rollout(
            rows,
            self.generator,
            self.chat,
            self.env_pool,
            max_turns=budget,
            max_turn_tokens=self.args.max_turn_tokens,
            max_context_tokens=self.args.max_context_tokens,
            executor=self.env_executor,
            truncated_turn=self.args.truncated_turn,
            mask_truncated_turns=self.args.mask_truncated_turns,
            merged_first_turn=self.args.merged_first_turn,
        )
        output = result.to_trl()
        validate_rollout_output(output, len(rows))
        if self.args.release_memory and self.on_cpu:  # the generation caches are garbage now
            release_memory()
        self.last_rollout = result
        if self.args.log_trajectories:
            self._log_trajectories(result, budget, mode)
        self._record_rollout_metrics(result, budget, mode)
        return output

    # ---- the loss in micro-batches ---------------------------------------------------------------
    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> torch.Tensor:
        """TRL's loss, back-propagated micro-batch by micro-batch, over the rows that teach.

        With ``skip_zero_advantage`` the rows of zero advantage are left out (their gradient is zero);
        with ``micro_batch_tokens`` the remaining rows are cut into micro-batches. Every micro-batch but
        the last is back-propagated here (without DDP's gradient sync); the last is returned for the
        Trainer's own backward, plus the others' detached losses for logging. Each micro-batch's loss is
        scaled by its share of the whole batch, so the summed gradients are the whole batch's gradients.
        """
        groups = self._loss_plan(inputs) if model.training and torch.is_grad_enabled() else None
        if groups is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        shares = micro_batch_shares(self.loss_type, inputs, groups)
        done = torch.zeros((), device=self.accelerator.device)
        for rows, share in zip(groups[:-1], shares[:-1]):
            with self.accelerator.no_sync(model):
                loss = self._compute_loss(model, take_rows(inputs, rows)) * share
                self.accelerator.backward(loss)
            done = done + loss.detach().float()
        return self._compute_loss(model, take_rows(inputs, groups[-1])) * shares[-1] + done

    def _loss_plan(self, inputs: dict[str, Any]) -> list[list[int]] | None:
        """The row groups to run the loss on, or None to hand the batch to TRL whole."""
        budget = self.args.micro_batch_tokens
        skip = self.args.skip_zero_advantage
        if not budget and not skip:
            return None
        unsupported = [
            reason
            for reason, present in (
                ("an entropy bonus", self._entropy_bonus_enabled),
                ("top_entropy_quantile < 1", self.top_entropy_quantile < 1.0),
                ("an MoE aux loss", self.aux_loss_enabled),
                ("DeepSpeed", self.is_deepspeed_enabled),
                # TRL gathers per-row metrics on every call: each process must pass the same number of rows
                ("several processes", self.accelerator.num_processes > 1),
                (f"loss_type {self.loss_type!r}", self.loss_type not in MICRO_BATCHED_LOSSES),
            )
            if present
        ]
        if unsupported:  # these terms are normalised per call in TRL: splitting would change the loss
            if not self._micro_batching_warned:
                logger.warning("micro_batch_tokens and skip_zero_advantage are ignored with %s: each batch trains "
                               "whole", unsupported)
                self._micro_batching_warned = True
            return None
        lengths = row_lengths(inputs)
        rows = list(range(len(lengths)))
        if skip:
            rows = rows_that_teach(inputs["advantages"])
            self._metrics["train"]["train/skipped_rows_frac"].append(1.0 - len(rows) / max(len(lengths), 1))
            if not rows:  # one short row (its loss is 0) keeps every process's backward and DDP's sync in step
                return [[min(range(len(lengths)), key=lengths.__getitem__)]]
        if not budget:
            return [rows] if len(rows) < len(lengths) else None
        groups = [[rows[i] for i in group] for group in plan_micro_batches([lengths[i] for i in rows], budget)]
        return groups if len(groups) > 1 or len(rows) < len(lengths) else None

    def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> torch.Tensor:
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.args.release_memory and self.on_cpu:  # activations and gradients' temporaries go back to the OS
            release_memory()
        return loss

    def _log_trajectories(self, result: RolloutResult, budget: int | list[int], mode: str) -> None:
        """Each process appends its own episodes (no gather of whole conversations across ranks)."""
        from agentgym_envs.evaluation.records import TrajectoryLog
        from agentgym_trl.eval import training_records

        rank = self.accelerator.process_index
        name = "trajectories.jsonl" if rank == 0 else f"trajectories.rank{rank}.jsonl"
        budgets = budget if isinstance(budget, list) else [budget] * len(result.trajectories)
        TrajectoryLog(os.path.join(self.args.output_dir, name)).append(
            training_records(result, self.state.global_step, budgets, mode)
        )

    def _record_rollout_metrics(self, result: RolloutResult, budget: int | list[int], mode: str) -> None:
        budgets = budget if isinstance(budget, list) else [budget] * len(result.trajectories)
        records = gather_object([{**t.stats(), "budget": b} for t, b in zip(result.trajectories, budgets)])
        if mode == "train" and len({r["budget"] for r in records}) > 1:
            raise RuntimeError(
                f"processes disagree on the turn budget ({sorted({r['budget'] for r in records})}); every rank must "
                "derive it from the same global step"
            )
        metrics = self._metrics[mode]
        count = len(records)
        reasons = [r["stop_reason"] for r in records]
        turns = sum(r["turns"] for r in records)
        metrics["agent/max_turns"].append(float(budget if isinstance(budget, int) else max(budget)))
        metrics["agent/turns_mean"].append(turns / count)
        metrics["agent/success"].append(sum(r["success"] for r in records) / count)
        metrics["agent/reward"].append(sum(r["reward"] for r in records) / count)
        metrics["agent/valid_action_rate"].append(sum(r["valid_actions"] for r in records) / turns if turns else 0.0)
        metrics[TRUNCATED_METRIC].append(sum(r["token_truncated"] for r in records) / count)
        metrics["agent/cut_turn_frac"].append(sum(r["cut_turns"] for r in records) / turns if turns else 0.0)
        metrics["agent/truncated_turn_tokens_frac"].append(reasons.count(TURN_TOKENS) / count)
        metrics["agent/truncated_context_frac"].append(reasons.count(CONTEXT) / count)
        metrics["agent/budget_exhausted_frac"].append(reasons.count(MAX_TURNS) / count)
        metrics["agent/env_error_frac"].append(reasons.count(ENV_ERROR) / count)
        metrics["agent/model_tokens_mean"].append(sum(r["model_tokens"] for r in records) / count)
        by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in records:
            by_env[record["env_id"]].append(record)
        for env_id, group in sorted(by_env.items()):
            metrics[f"agent/{env_id}/success"].append(sum(r["success"] for r in group) / len(group))
            metrics[f"agent/{env_id}/reward"].append(sum(r["reward"] for r in group) / len(group))
            metrics[f"agent/{env_id}/turns_mean"].append(sum(r["turns"] for r in group) / len(group))
        metrics["agent/rollout_s"].append(result.total_s)
        metrics["agent/generation_s"].append(result.generation_s)
        metrics["agent/env_s"].append(result.env_s)
        if result.total_s > 0:
            metrics["agent/outside_model_frac"].append(result.outside_model_s / result.total_s)
        metrics["agent/template_fallbacks"].append(float(sum(t.template_fallbacks for t in result.trajectories)))

    def __del__(self) -> None:
        executor = getattr(self, "env_executor", None)
        if executor is not None:
            executor.shutdown(wait=False)
        pool = getattr(self, "env_pool", None)
        if pool is not None and getattr(self, "_owns_env_pool", False):
            try:
                pool.close()
            except Exception:  # interpreter shutdown: engines may already be gone
                pass

    def close_envs(self) -> None:
        """Release every env the rollouts created (engines, JVMs, browsers)."""
        self.env_pool.close()


MICRO_BATCHED_LOSSES = BATCH_NORMALISED_LOSSES + ROW_AVERAGED_LOSSES + TOKEN_AVERAGED_LOSSES


def rows_that_teach(advantages: torch.Tensor) -> list[int]:
    """Rows with a non-zero advantage at some position (a zero-advantage row adds nothing to the policy gradient)."""
    per_row = advantages.reshape(advantages.shape[0], -1).abs().amax(dim=1)
    return torch.nonzero(per_row > 0).flatten().tolist()


def micro_batch_shares(loss_type: str, inputs: dict[str, Any], groups: list[list[int]]) -> list[float]:
    """The factor of each micro-batch's loss so that the factors times the losses sum to the batch's loss.

    The shares are of the whole batch, so rows left out of every group (zero advantage) count in the
    denominator as they do in TRL's loss, where their terms are zero.
    """
    if loss_type in BATCH_NORMALISED_LOSSES:
        return [1.0] * len(groups)
    if loss_type in TOKEN_AVERAGED_LOSSES:
        mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
        weights = [float(mask[rows].sum()) for rows in groups]
        total = float(mask.sum())
    elif loss_type in ROW_AVERAGED_LOSSES:
        weights = [float(len(rows)) for rows in groups]
        total = float(inputs["completion_mask"].shape[0])
    else:
        raise ValueError(f"no micro-batch weighting for loss_type {loss_type!r}")
    return [w / total for w in weights] if total else [1.0 / len(groups)] * len(groups)


def prepare_rows_dataset(dataset: Any) -> Any:
    """Check a user dataset's ``env_id`` / ``item_id`` columns and add TRL's ``prompt`` column if missing."""
    columns = set(dataset.column_names)
    missing = {"env_id", "item_id"} - columns
    if missing:
        raise ValueError(
            f"the dataset lacks the column(s) {sorted(missing)}; each row must name an env id and an item id "
            "(agentgym_trl.data.build_env_dataset builds one from the envs' splits)"
        )
    check_env_ids(sorted(set(dataset["env_id"])))
    if "prompt" not in columns:
        dataset = dataset.map(lambda row: {"prompt": placeholder_prompt(row["env_id"], row["item_id"])})
    return dataset


def _make_reference_reloadable(model: Any, output_dir: str) -> Any:
    """TRL rebuilds the KL reference from ``model.config._name_or_path``: save a plain copy when that cannot work.

    This covers models built in memory and GGUF-loaded models (whose folder holds no HF weights).
    """
    if not isinstance(model, PreTrainedModel) or is_peft_model(model):
        return model
    name = getattr(model.config, "_name_or_path", "") or ""
    if is_reloadable(name) or (name and not os.path.exists(name) and not os.path.isabs(name)):
        return model  # a loadable folder or a hub id
    target = os.path.join(output_dir, "reference_model")
    state = PartialState()
    with state.main_process_first():
        if state.is_main_process:  # always this model's weights, never a copy left by an earlier run
            logger.warning("beta > 0: saving the initial policy to %s so TRL can load the KL reference", target)
            shutil.rmtree(target, ignore_errors=True)
            save_plain_copy(model, target)
    model.config._name_or_path = target
    return model
