"""``AgentGRPOTrainer``: TRL's GRPO with multi-turn env rollouts and a turn curriculum (its config: ``config.py``).

The subclass is thin on purpose. TRL's ``GRPOTrainer`` already accepts a ``rollout_func`` that
returns prompt ids, completion ids, logprobs and an ``env_mask`` (1 = model token, trained; 0 =
observation, masked out of the loss); everything after generation (rewards, group advantages, KL
against the reference model, the clipped loss, DDP / DeepSpeed / FSDP, LoRA through
``peft_config``, vLLM weight sync) stays TRL's. What the subclass adds:

* the dataset: one row per (env id, item id) from the envs' train splits, mixtures allowed;
* the rows reach the rollout: ``rollout_func`` only receives prompts, so
  ``_generate_and_score_completions`` (which sees the rows) opens a ``ScoringBatch`` for it: the one
  per-batch object that carries the rows, the rollout, TRL's rewards and ReMax's greedy returns between
  TRL's calls, set and cleared there and nowhere else;
* the rollout's output is validated (TRL does not check ``env_mask`` lengths) before TRL uses it;
* the env's outcome reward is the default reward function (``env_reward``); extra reward functions
  can be added and see ``env_reward``, ``env_success``, ``env_turns``, ``env_stop_reason``;
* the turn budget comes from ``TurnBudgetCallback`` and per-env metrics are logged every step;
* ``advantage_estimator`` / ``turn_credit`` other than plain GRPO replace TRL's group advantages
  after it computed them (TRL computes and logs them inline, with no hook to skip it): per episode or
  per token, as the estimator's declaration in ``estimators.py`` says (critic, greedy rollout, where
  beta goes).

By default each turn is generated with HF ``generate`` in this process. ``use_vllm=True`` generates with vLLM:
on GPUs through TRL's own integration (``vllm_mode`` colocate or server; ``trl_vllm.py``), on CPUs with a vLLM
engine in its own process and environment (``vllm_engine.py``); ``vllm_engine`` chooses.

TRL's private members the adapter relies on (the ``trl==1.16.0`` pin makes them safe; ``TRL_PRIVATE_MEMBERS``
holds this list and ``tests/test_trl_surface.py`` fails when a TRL upgrade removes or changes one):

* ``GRPOTrainer._generate_and_score_completions``: overridden: opens the batch, replaces the advantages;
* ``GRPOTrainer._calculate_rewards``: overridden: keeps every process's rewards for the estimators;
* ``GRPOTrainer._compute_loss``: overridden and called per micro-batch (the value loss joins it);
* ``GRPOTrainer._get_per_token_logps_and_entropies``: the critic's no-grad forward (a shared value head);
* ``Trainer._save`` and ``Trainer._load_from_checkpoint``: the value head beside the model;
* ``GRPOTrainer._metrics``: where every metric is logged;
* ``GRPOTrainer._logs``: the completions table, whose ``advantages`` column is replaced;
* ``GRPOTrainer._tokenizer``: the pad token and the chat encoder's tokenizer;
* ``GRPOTrainer._dist``: ``summon_full_params`` around a rollout (FSDP);
* ``GRPOTrainer._entropy_bonus_enabled``: a term that rules out micro-batching;
* ``GRPOTrainer._last_loaded_step``: reset when the vLLM engine starts, so TRL syncs its weights;
* ``GRPOTrainer.vllm_generation``: TRL's own (vllm_engine 'trl'), driven a turn at a time by ``TRLVLLMGenerator``,
  or replaced by the engine process's sync (vllm_engine 'process'); TRL calls its ``sync_weights()`` before a rollout;
* ``VLLMGeneration.generate``, ``VLLMGeneration.sync_weights`` and its settings ``VLLMGeneration.mode``,
  ``VLLMGeneration.max_completion_length``, ``VLLMGeneration.temperature``, ``VLLMGeneration.top_p``,
  ``VLLMGeneration.top_k``, ``VLLMGeneration.generation_kwargs``, ``VLLMGeneration.enable_sleep_mode``,
  ``VLLMGeneration.llm``, ``VLLMGeneration._llm_weights_sleeping`` and ``VLLMGeneration.vllm_client`` (server mode:
  its context is checked at start): set or read by ``trl_vllm.py``;
* the batch keys ``tool_mask``, ``old_per_token_logps``, ``sampling_per_token_logps`` and
  ``ref_per_token_logps`` of ``_generate_and_score_completions``'s output: masks and REINFORCE++'s KL;
* ``trl.trainer.utils._use_triton``: ``fast_training.use_compact_lm_head`` swaps it on CPU.
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import gather_object, is_peft_model
from transformers import PreTrainedModel, TrainerCallback, TrainerState
from transformers.trainer_utils import TrainOutput
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation

from agentgym_trl.chat import ChatEncoder
from agentgym_trl.checkpoints import TRAINER_STATE, finished_run, last_complete_checkpoint
from agentgym_trl.estimators import ESTIMATORS
from agentgym_trl.fast_training import (
    LOSS_NORMALISERS,
    action_mask,
    cast_where_used,
    micro_batch_shares,
    plan_micro_batches,
    release_memory,
    return_freed_heap,
    row_lengths,
    rows_that_teach,
    take_rows,
    use_compact_lm_head,
    use_cpu_threads,
)
from agentgym_envs.core.loop import EnvPool, env_step_budget
from agentgym_envs.evaluation.records import TRAJECTORIES_FILE, TrajectoryLog
from agentgym_trl.config import AgentGRPOConfig, env_turn_cap
from agentgym_trl.curriculum import TurnBudgetCallback
from agentgym_trl.data import build_env_dataset, check_env_ids, placeholder_prompt
from agentgym_trl.dynamic_sampling import fill_informative_groups
from agentgym_trl.engines import Generator, Sampling, make_generator, required_model_len
from agentgym_trl.engines.hf import HFGenerator
from agentgym_trl.item_draws import ItemDrawer, ItemKey, LearnabilityDrawer, assign_items, item_rows
from agentgym_trl.metrics import (
    IDLE_STEP,
    ITEMS_DRAWN_TEACH,
    ITEMS_ESTIMATE_SPREAD,
    ITEMS_PLAYED_FRAC,
    NONFINITE_GRAD_STEP,
    SKIPPED_ROWS_FRAC,
    VALUE_LOSS,
    WEIGHT_SYNC_S,
    MetricsFileCallback,
    episode_stats,
    rollout_metrics,
    timing_metrics,
)
from agentgym_trl.model_card import agent_section, base_model_of, complete_model_card
from agentgym_trl.models import is_reloadable, save_plain_copy
from agentgym_trl.reverse_curriculum import OraclePrefixCurriculum
from agentgym_trl.rollout import RolloutProgress, RolloutResult, run_rollout, validate_rollout_output
from agentgym_trl.scoring import AdvantageAdapter, ScoringBatch, distinct_items
from agentgym_trl.engines.vllm_process import EngineOptions, EngineWeightSync, VLLMEngine, shared_engine
from agentgym_trl.value_head import VALUE_HEAD_ATTRIBUTE, VALUE_HEAD_FILE, ValueHead, attach_value_head, value_loss

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrlMember:
    """A private member of TRL (or of the ``transformers.Trainer`` under it) that this adapter relies on.

    ``owner``: ``"GRPOTrainer"`` (a method, or an attribute its source sets or reads as ``self.<name>``),
    ``"batch"`` (a key of ``_generate_and_score_completions``'s output) or a module's dotted name;
    ``parameters``: the parameters of a method or function that the adapter passes or receives.
    """

    owner: str
    name: str
    parameters: tuple[str, ...] = ()


TRL_PRIVATE_MEMBERS = (
    TrlMember("GRPOTrainer", "_generate_and_score_completions", ("inputs",)),
    TrlMember("GRPOTrainer", "_calculate_rewards", ("inputs", "prompts", "completions", "completion_ids_list")),
    TrlMember("GRPOTrainer", "_compute_loss", ("model", "inputs")),
    TrlMember("GRPOTrainer", "_get_per_token_logps_and_entropies",
              ("model", "input_ids", "attention_mask", "logits_to_keep", "batch_size")),
    TrlMember("Trainer", "_save", ("output_dir", "state_dict")),
    TrlMember("Trainer", "_load_from_checkpoint", ("resume_from_checkpoint", "model")),
    TrlMember("GRPOTrainer", "_metrics"),
    TrlMember("GRPOTrainer", "_logs"),
    TrlMember("GRPOTrainer", "_tokenizer"),
    TrlMember("GRPOTrainer", "_dist"),
    TrlMember("GRPOTrainer", "_entropy_bonus_enabled"),
    TrlMember("GRPOTrainer", "_last_loaded_step"),
    TrlMember("GRPOTrainer", "vllm_generation"),
    TrlMember("VLLMGeneration", "generate", ("prompts", "images", "num_generations")),
    *(TrlMember("VLLMGeneration", name) for name in (
        "sync_weights", "mode", "max_completion_length", "temperature", "top_p", "top_k", "generation_kwargs",
        "enable_sleep_mode", "llm", "_llm_weights_sleeping", "vllm_client")),
    TrlMember("batch", "tool_mask"),
    TrlMember("batch", "old_per_token_logps"),
    TrlMember("batch", "sampling_per_token_logps"),
    TrlMember("batch", "ref_per_token_logps"),
    TrlMember("trl.trainer.utils", "_use_triton", ("device",)),
)


def env_reward(completions: list, env_reward: list[float] | None = None, **kwargs: Any) -> list[float]:
    """The env's outcome reward of each episode (the sum of its rewards: its final outcome, on the env's scale)."""
    if env_reward is None:
        raise ValueError("env_reward needs the rollout's 'env_reward' field: use it with AgentGRPOTrainer, "
                         "or with GRPOTrainer(rollout_func=agentgym_trl.trl_recipes.env_rollout_func(...))")
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
                "AgentGRPOTrainer plays the Gymnasium envs of args.env_ids itself (any registered id, remote ones "
                "included), so it takes no rollout_func / environment_factory / tools: register your environment as a "
                "text Gymnasium env instead (tool envs give TRL-style schemas with env.unwrapped.tool_schemas())"
            )
        self.schedule = args.turn_schedule()
        self.on_cpu = prepare_torch(args)
        self._micro_batching_warned = False
        train_dataset = (prepare_rows_dataset(train_dataset) if train_dataset is not None else build_env_dataset(
            args.env_ids, args.train_split, args.max_items_per_env, args.seed, only_items=args.train_items()))
        self.item_drawer = make_item_drawer(args, list(zip(train_dataset["env_id"], train_dataset["item_id"])))
        if self.item_drawer is not None:  # draws move rows: a moved row takes its new item's whole row
            self.item_drawer.rows = item_rows(train_dataset)
        self.step_guard = OptimizerStepGuard(self)
        if eval_dataset is not None:
            eval_dataset = prepare_rows_dataset(eval_dataset)
        engine_kind = args.engine_kind  # "hf", "vllm-process" or "vllm-trl" (engines.ENGINES)
        if (args.beta != 0.0 and peft_config is None) or engine_kind == "vllm-trl":
            model = _make_reloadable(model, args.output_dir)  # TRL loads the KL reference / its vLLM from the folder
        self.curriculum = TurnBudgetCallback(self.schedule, args.truncation_warning_threshold)
        callbacks = [self.curriculum, self.step_guard, *(callbacks or [])]
        self.oracle_prefix = OraclePrefixCurriculum.from_config(args)  # reverse curriculum (R3), None when off
        if self.oracle_prefix is not None:
            callbacks.append(self.oracle_prefix)
        if args.metrics_file:  # the JSON-lines copy of the logs, when asked (report_to gets them regardless)
            callbacks.append(MetricsFileCallback(os.path.join(args.output_dir, args.metrics_file)))
        funcs = [env_reward]
        if reward_funcs is not None:
            funcs += list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        self.estimator = ESTIMATORS[args.advantage_estimator]
        self._batch: ScoringBatch | None = None  # the batch being scored (only inside _generate_and_score_completions)
        self._last_batch: ScoringBatch | None = None  # the last batch played (last_rollout)
        # vllm_engine 'trl': TRL builds and syncs its own vLLM (colocate or server) and the turns go through it.
        # 'process': this project's engine process (vllm_engine.py), which TRL's in-process vLLM cannot replace on a
        # CPU: TRL is built without vLLM and told afterwards (its weight-sync hook and importance-sampling
        # correction then run as with its own vLLM).
        wants_vllm, args.use_vllm = args.use_vllm, engine_kind == "vllm-trl"
        try:
            with warnings.catch_warnings():  # rollout_func is "experimental" in TRL; this class validates its output
                warnings.filterwarnings("ignore", message=".*rollout_func.*experimental")
                super().__init__(
                    model=model,
                    reward_funcs=funcs,
                    args=args,
                    train_dataset=train_dataset,
                    eval_dataset=eval_dataset,
                    processing_class=processing_class,
                    callbacks=callbacks,
                    peft_config=peft_config,
                    rollout_func=self._agent_rollout,
                    **kwargs,
                )
        finally:
            args.use_vllm = wants_vllm  # the config says what the user asked, even when TRL refused it
        self.use_vllm = wants_vllm
        if self.on_cpu and args.release_memory:
            cast_where_used(self.accelerator)
        self.vllm_engine = self._start_vllm_engine(model) if engine_kind == "vllm-process" else None
        if engine_kind == "vllm-trl" and args.vllm_mode == "server" and self.accelerator.is_main_process:
            from agentgym_trl.engines.trl_vllm import check_server_context

            check_server_context(self.vllm_generation, required_model_len(args.max_context_tokens,
                                                                          args.max_turn_tokens))
        self.chat = ChatEncoder(self._tokenizer, self.eos_token_ids, args.chat_template_kwargs)
        self._owns_env_pool = env_pool is None
        if env_pool is None and args.env_servers:  # the same ids, played on `agentgym serve` hosts
            from agentgym_envs.server.hosts import RemoteEnvFactory

            env_pool = EnvPool(make_env=RemoteEnvFactory(args.env_servers))
        self.env_pool = env_pool or EnvPool()  # envs per (id, turn budget): the budget is each env's TimeLimit
        self.env_executor = ThreadPoolExecutor(max_workers=args.env_workers, thread_name_prefix="agentgym-env")
        self.generator = self._make_generator()
        self.greedy_generator = self._make_generator(greedy=True) if self.estimator.needs_greedy_rollout else None
        self.advantage_adapter = AdvantageAdapter(
            self.estimator, args, self.accelerator, num_generations=self.num_generations,
            scale_rewards=self.scale_rewards, beta=self.beta, reward_weights=self.reward_weights,
            log=lambda name, value: self._metrics["train"][name].append(value), critic_values=self._value_estimates)
        self.value_head: ValueHead | None = None
        if args.value_head is not None:  # before the optimizer and DDP exist, so both see its parameters
            self.value_head = attach_value_head(self.model, args.value_head, args.critic_model)

    # ---- plumbing into TRL ---------------------------------------------------------------------
    def _make_generator(self, greedy: bool = False) -> Generator:
        """The generator of the config's engine (``engines.make_generator``), sampling as TRL's generation config
        says (greedy: ReMax's baseline)."""
        if not hasattr(self, "generation_config"):  # TRL builds one only without its vLLM: the same sampling settings
            from transformers import GenerationConfig

            self.generation_config = GenerationConfig(do_sample=True, temperature=self.temperature, top_p=self.top_p,
                                                      top_k=self.top_k)
        sampling = Sampling.of(self.generation_config)
        sampling = Sampling.at(0.0) if greedy else sampling
        kind, pad = self.args.engine_kind, self._tokenizer.pad_token_id
        needs = dict(model=self.model, generation_config=self.generation_config, pad_id=pad,
                     unwrap=self._unwrapped_model, device=self.accelerator.device)
        if kind == "hf":
            # a CPU bf16 run samples from a bf16 copy of the weights (not fp32 weights cast at every decode step); a
            # value head's hooks stay on the policy itself
            copy_dtype = torch.bfloat16 if self.args.bf16 and self.on_cpu and self.args.value_head is None else None
            needs.update(share_prompt_prefill=self.args.share_prompt_prefill, sampling_dtype=copy_dtype)
        elif kind == "vllm-process":  # TRL's sync hook (vllm_generation.sync_weights) keeps its weights current
            needs.update(engine=self.vllm_engine)
        elif kind == "vllm-trl":  # TRL syncs its engine's weights before each rollout
            args = self.args
            collective = ((args.vllm_mode == "server" and self.accelerator.num_processes > 1)
                          or args.vllm_tensor_parallel_size > 1)
            needs.update(vllm_generation=self.vllm_generation, collective=collective,
                         filler_id=pad if pad is not None else self.chat.closer_id)
        return make_generator(kind, sampling, self.chat.stop_ids, **needs)

    def _start_vllm_engine(self, model: str | PreTrainedModel) -> VLLMEngine:
        """The vLLM engine process, started from the policy's folder (a plain copy is saved when it has none)."""
        folder = model if isinstance(model, str) and is_reloadable(model) else None
        if folder is None:
            base = self.accelerator.unwrap_model(self.model)
            base = base.get_base_model() if is_peft_model(base) else base
            source = getattr(base.config, "_name_or_path", None)
            folder = source if is_reloadable(source) else str(save_plain_copy(
                base, os.path.join(self.args.output_dir, "vllm-engine-start")))
        args = self.args
        slots = max(args.per_device_train_batch_size * args.steps_per_generation, args.per_device_eval_batch_size)
        engine = shared_engine(folder, EngineOptions.from_config(args, slots))
        # TRL calls its sync_weights() when the step changed
        self.vllm_generation = EngineWeightSync(engine, self._unwrapped_model, self._record_weight_sync)
        self._last_loaded_step = -1
        return engine

    def _record_weight_sync(self, seconds: float) -> None:
        self._metrics["train" if self.model.training else "eval"][WEIGHT_SYNC_S].append(seconds)

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

    @property
    def last_rollout(self) -> RolloutResult | None:
        """The episodes of the last batch played (training or evaluation); None before the first."""
        return self._last_batch.rollout if self._last_batch is not None else None

    @contextmanager
    def _scoring(self, rows: list[dict[str, Any]]) -> Iterator[ScoringBatch]:
        """The one place the per-batch state is set and cleared: open for the whole scoring of ``rows``."""
        batch = ScoringBatch(rows)
        self._batch = batch
        try:
            yield batch
        finally:
            self._batch = None
            if batch.rollout is not None:
                self._last_batch = batch

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        # TRL hands rollout_func only the prompts; the rollout needs each row's env id and item id.
        with self._scoring(inputs) as batch:
            output = super()._generate_and_score_completions(inputs)
            if self.model.training and self.args.custom_advantages:
                per_row = self.advantage_adapter.replace(output, batch)
                replace_newest(self._logs["advantages"], per_row.tolist())
        return output

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> torch.Tensor:
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._batch is not None:
            self._batch.rewards_per_func = rewards
        return rewards

    def _agent_rollout(self, prompts: list, trainer: Any = None) -> dict[str, list]:
        batch = self._batch
        if batch is None or len(batch.rows) != len(prompts):
            raise RuntimeError("the agent rollout runs only inside AgentGRPOTrainer._generate_and_score_completions")
        rows = batch.rows
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            budget: int | list[int] = self.curriculum.budget
            eval_budgets = {self._eval_budget(env_id) for env_id in self.args.env_ids}
            prefix_steps = {env_step_budget(budget, k) for k in range(self._oracle_prefix_k() + 1)}
            self.env_pool.drop_other_budgets({budget, *eval_budgets, *prefix_steps})  # finished stages' envs go
            result = self._play_train_batch(rows, budget)
        else:
            budget = [self._eval_budget(str(r["env_id"])) for r in rows]
            result = self._play(rows, self.generator, budget)
        output = result.to_trl()
        validate_rollout_output(output, len(rows))
        if self.args.release_memory and self.on_cpu:  # the generation caches are garbage now
            if isinstance(self.generator, HFGenerator):
                self.generator.drop_sampling_copy()  # made again for the next rollout: not held while training
            release_memory()
        batch.rollout = result
        if mode == "train" and self.greedy_generator is not None:
            batch.greedy_returns = self._greedy_rollout(rows, budget)
        if self.args.log_trajectories:
            self._log_trajectories(result, mode)
        self._record_rollout_metrics(result, mode)
        return output

    def _play_train_batch(self, rows: list[dict[str, Any]], budget: int) -> RolloutResult:
        """The training rollout: the rows' items (redrawn by learnability first, with ``item_draws='learnability'``),
        then dynamic sampling's refills; every episode played updates the learnability estimates."""
        draw = self.item_drawer.for_step(self.state.global_step, self.accelerator.process_index) \
            if self.item_drawer is not None else None
        learnability = isinstance(self.item_drawer, LearnabilityDrawer)
        drawn: list[ItemKey] = []
        outcomes: list[tuple[str, int, bool]] = []
        prefixed: list[dict[str, Any]] = []  # every episode played, refills too (the reverse curriculum's success)

        def draw_items(count: int) -> list[ItemKey]:
            items = draw(count)
            drawn.extend(items)
            return items

        def play(batch_rows: list[dict[str, Any]]) -> RolloutResult:
            played = self._play(batch_rows, self.generator, budget)
            outcomes.extend((t.env_id, t.item_id, bool(t.success)) for t in played.trajectories)  # before refills
            prefixed.extend(episode_stats(t) for t in played.trajectories)
            return played

        if learnability:  # the global batch's groups, drawn alike on every process (a group may span processes)
            here, ranks, rank = len(rows), self.accelerator.num_processes, self.accelerator.process_index
            items = self.item_drawer.for_step(self.state.global_step, process=None)(
                -(-here * ranks // self.num_generations))
            assign_items(rows, items, self.num_generations, offset=rank * here, table=self.item_drawer.rows)
            drawn.extend(items[rank * here // self.num_generations:-(-(rank + 1) * here // self.num_generations)])
        result = play(rows)
        if self.args.dynamic_sampling:
            stats = fill_informative_groups(
                rows, result, self.num_generations, play=play, draw_items=draw_items,
                max_groups=len(rows) // self.num_generations * self.args.dynamic_sampling_max_batches,
                more=self.generator.any_active,  # under ZeRO-3 / FSDP every rank plays as many refill batches
                item_rows=self.item_drawer.rows,
            )
            for name, value in stats.metrics().items():
                self._metrics["train"][name].append(value)
        if self.oracle_prefix is not None:  # k and success per k over every episode played; may move k by success
            for name, value in self.oracle_prefix.observe(gather_object(prefixed)).items():
                self._metrics["train"][name].append(value)
        if learnability:  # every rank counts every rank's episodes, so all keep the same estimates
            summary = self.item_drawer.summary(drawn)
            self.item_drawer.observe(gather_object(outcomes))
            for name, key in ((ITEMS_ESTIMATE_SPREAD, "spread"), (ITEMS_PLAYED_FRAC, "played"),
                              (ITEMS_DRAWN_TEACH, "drawn_teach")):
                self._metrics["train"][name].append(summary[key])
        return result

    def _oracle_prefix_k(self) -> int:
        """The oracle actions training episodes start after (reverse curriculum); 0 in evaluations and when off."""
        return self.oracle_prefix.k if self.oracle_prefix is not None and self.model.training else 0

    def _eval_budget(self, env_id: str) -> int:
        return self.args.eval_max_turns or env_turn_cap(env_id)

    def _play(self, rows: Sequence[dict[str, Any]], generator: Generator, budget: int | list[int]) -> RolloutResult:
        """One batch of episodes with ``generator`` under the config's token limits and opening."""
        interval = self.args.rollout_progress_s
        progress = RolloutProgress(len(rows), interval, f"step {self.state.global_step + 1} rollout") \
            if interval > 0 and self.accelerator.is_local_main_process else None
        return run_rollout(rows, generator, self.chat, self.env_pool, max_turns=budget,
                           max_turn_tokens=self.args.max_turn_tokens, max_context_tokens=self.args.max_context_tokens,
                           executor=self.env_executor, truncated_turn=self.args.truncated_turn,
                           mask_truncated_turns=self.args.mask_truncated_turns,
                           merged_first_turn=self.args.merged_first_turn, on_step=progress,
                           oracle_prefix=self._oracle_prefix_k())

    # ---- advantage estimators other than TRL's GRPO ------------------------------------------------
    def _greedy_rollout(self, rows: Sequence[dict[str, Any]], budget: int) -> list[float]:
        """ReMax's baseline: one greedy episode per distinct item among this process's rows (never trained on)."""
        keys, starts = distinct_items(rows)
        result = self._play(starts, self.greedy_generator, budget)
        by_key = dict(zip(dict.fromkeys(keys), self.advantage_adapter.greedy_returns(result)))
        return [by_key[key] for key in keys]

    def _value_estimates(self, output: dict[str, Any]) -> torch.Tensor:
        """The critic's ``(B, T)`` estimates of the rollout's states, from one no-grad forward."""
        ids, attention, width = whole_sequences(output)
        with torch.no_grad():
            if self.value_head.critic is not None:
                return self.value_head.critic_values(ids, attention, width).detach().float()
            with self.value_head.capture(width) as captured:
                self._get_per_token_logps_and_entropies(self.model, ids, attention, width,
                                                        batch_size=self.args.per_device_train_batch_size)
        return torch.cat(captured, dim=0).detach().float()

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """The whole batch's loss, as TRL's training step asks for it: the policy loss plus any value loss."""
        policy, critic = self._loss_parts(model, inputs)
        if critic is None:
            return policy
        self._log_value_loss(critic)
        return policy + self._weighted_value_loss(critic)

    def _loss_parts(self, model: Any, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """TRL's policy loss (REINFORCE++'s without TRL's KL term: its KL is in the reward) and GAE's value loss.

        They are kept apart because they average differently: the policy loss as the ``loss_type`` says, the
        value loss over rows, so a micro-batch weighs each by its own share of the batch.
        """
        with self._trl_loss_beta():
            if self.value_head is None:
                return super()._compute_loss(model, inputs), None
            loss, values = self._policy_loss_and_values(model, inputs)
        if "value_targets" not in inputs:  # evaluation: TRL's advantages, no value targets
            return loss, None
        return loss, value_loss(values, inputs["value_targets"], action_mask(inputs))

    @contextmanager
    def _trl_loss_beta(self) -> Iterator[None]:
        """TRL's loss reads ``self.beta`` for its KL term: 0 while it runs when the estimator has put the KL
        penalty into its token rewards already (``Estimator.kl_in_reward``)."""
        beta = self.beta
        if self.estimator.kl_in_reward:
            self.beta = 0.0
        try:
            yield
        finally:
            self.beta = beta

    def _weighted_value_loss(self, critic_loss: torch.Tensor) -> torch.Tensor:
        return self.args.value_coef * critic_loss / self.current_gradient_accumulation_steps

    def _log_value_loss(self, critic_loss: torch.Tensor) -> None:
        self._metrics["train"][VALUE_LOSS].append(float(self.accelerator.gather(critic_loss.detach()).mean()))

    def _policy_loss_and_values(self, model: Any, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """TRL's policy loss and the critic's values (read from that very forward, or from the separate critic)."""
        if self.value_head.critic is not None:
            return super()._compute_loss(model, inputs), self.value_head.critic_values(*whole_sequences(inputs))
        with self.value_head.capture(inputs["completion_ids"].size(1)) as captured:
            loss = super()._compute_loss(model, inputs)
        return loss, torch.cat(captured, dim=0)

    # ---- saving: the value head beside the model (a LoRA checkpoint holds only the adapter) ----------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """The model without its value head (so it loads as a plain causal LM), and the head beside it."""
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.value_head is not None and state_dict is None and not is_peft_model(self.model):
            state_dict = {name: value for name, value in self.accelerator.unwrap_model(self.model).state_dict().items()
                          if not name.startswith(f"{VALUE_HEAD_ATTRIBUTE}.")}
        super()._save(output_dir, state_dict)
        if self.value_head is not None and self.args.should_save:
            torch.save(self.value_head.state_dict(), os.path.join(output_dir, VALUE_HEAD_FILE))
        if isinstance(self.item_drawer, LearnabilityDrawer) and self.args.should_save:
            self.item_drawer.save(output_dir)  # a resumed run draws from what this one learned of the items
        if self.oracle_prefix is not None and self.args.should_save:
            self.oracle_prefix.save(output_dir)  # the stage measured success moved to

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """Train; ``resume_from_checkpoint=True`` (or ``"last"``) resumes from the newest *complete* checkpoint in
        output_dir, skipping one cut short while saving (HF's own choice would fail on it on every rerun).
        ``"last"`` with no checkpoint starts afresh; ``True`` with none fails as HF's does."""
        if resume_from_checkpoint is True or resume_from_checkpoint == "last":
            found = last_complete_checkpoint(self.args.output_dir)
            if found is None and resume_from_checkpoint is True:
                raise ValueError(f"no complete checkpoint to resume from in {self.args.output_dir}")
            resume_from_checkpoint = found
        if isinstance(resume_from_checkpoint, str) and finished_run(SimpleNamespace(
                resume_from_checkpoint=resume_from_checkpoint, output_dir=self.args.output_dir,
                max_steps=self.args.max_steps)):
            # a finished run, resumed, trains nothing: its weights and state are the checkpoint's, as after training
            self._load_from_checkpoint(resume_from_checkpoint)
            self.state = TrainerState.load_from_json(os.path.join(resume_from_checkpoint, TRAINER_STATE))
            return TrainOutput(self.state.global_step, 0.0, {})
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        path = os.path.join(resume_from_checkpoint, VALUE_HEAD_FILE)
        if self.value_head is not None and os.path.exists(path):
            self.value_head.load_state_dict(torch.load(path, map_location="cpu"))
        if isinstance(self.item_drawer, LearnabilityDrawer) and not self.item_drawer.load(resume_from_checkpoint):
            logger.warning("%s holds no item estimates: learnability draws start from the prior",
                           resume_from_checkpoint)
        if self.oracle_prefix is not None:
            self.oracle_prefix.load(resume_from_checkpoint)

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
        batch = int(inputs["prompt_ids"].shape[0])
        done = torch.zeros((), device=self.accelerator.device)
        value_parts = []
        # the heap's freed pages go back after each forward and backward: what one micro-batch frees in pieces the
        # next cannot reuse would otherwise stay resident and add up over the step (0.44 GB of the GRPO stage's peak)
        trim = return_freed_heap if self.args.release_memory and self.on_cpu else lambda: None
        for rows, share in zip(groups[:-1], shares[:-1]):
            with self.accelerator.no_sync(model):
                loss, value_part = self._micro_batch_loss(model, inputs, rows, share, len(rows) / batch)
                trim()
                self.accelerator.backward(loss)
                trim()
            done = done + loss.detach().float()
            value_parts.append(value_part)
        loss, value_part = self._micro_batch_loss(model, inputs, groups[-1], shares[-1], len(groups[-1]) / batch)
        trim()  # (its backward is the Trainer's; training_step releases after it)
        if value_part is not None:  # the whole batch's value loss, as an unsplit batch logs it
            self._log_value_loss(torch.stack([*value_parts, value_part]).sum())
        return loss + done

    def _micro_batch_loss(self, model: Any, inputs: dict[str, Any], rows: list[int], policy_share: float,
                          row_share: float) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The part of the batch's loss that ``rows`` make (the policy loss by its share, the value loss by rows),
        and their part of the batch's value loss, detached for the log (None without a critic)."""
        policy, critic = self._loss_parts(model, take_rows(inputs, rows))
        loss = policy * policy_share
        if critic is None:
            return loss, None
        return loss + self._weighted_value_loss(critic) * row_share, critic.detach() * row_share

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
                (f"loss_type {self.loss_type!r}", self.loss_type not in LOSS_NORMALISERS),
            )
            if present
        ]
        if unsupported:  # these terms are normalised per call in TRL: splitting would change the loss
            if not self._micro_batching_warned:
                logger.warning("micro_batch_tokens and skip_zero_advantage are ignored with %s: each batch trains "
                               "whole", " and ".join(unsupported))
                self._micro_batching_warned = True
            return None
        lengths = row_lengths(inputs)
        rows = list(range(len(lengths)))
        if skip:
            rows = rows_that_teach(inputs["advantages"])
            self.step_guard.count(len(rows))
            self._metrics["train"][SKIPPED_ROWS_FRAC].append(1.0 - len(rows) / max(len(lengths), 1))
            if not rows:  # one short row (its loss is 0) keeps every process's backward and DDP's sync in step
                return [[min(range(len(lengths)), key=lengths.__getitem__)]]
        if not budget:
            return [rows] if len(rows) < len(lengths) else None
        groups = [[rows[i] for i in group] for group in plan_micro_batches([lengths[i] for i in rows], budget)]
        return groups if len(groups) > 1 or len(rows) < len(lengths) else None

    def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> torch.Tensor:
        """TRL's training step; on CPU with ``release_memory``, the step's freed activations and gradient
        temporaries are handed back to the OS so the rollout that follows has the memory.
        """
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.args.release_memory and self.on_cpu:  # activations and gradients' temporaries go back to the OS
            release_memory()
        return loss

    def release_training_memory(self, keep_model: bool = True) -> None:
        """After ``train()``: drop what only training needs (the optimizer's state, the scheduler, the sampling copy)
        and hand the memory back, so an evaluation in the same process has it; the model stays as trained.

        ``keep_model=False`` (once the model is saved): the weights go too (to the ``meta`` device; not under ZeRO-3 or
        FSDP, whose engines own them), for an evaluation that loads the saved model, which would otherwise sit beside a
        fp32 copy nothing uses (0.5 GB for 135M).
        """
        self.accelerator.free_memory()  # Accelerate's own references to the prepared optimizer and scheduler
        self.optimizer = self.lr_scheduler = None
        self.callback_handler.optimizer = self.callback_handler.lr_scheduler = None  # (it holds them for callbacks)
        if isinstance(self.generator, HFGenerator):
            self.generator.drop_sampling_copy()
        if not keep_model and not (self.is_deepspeed_enabled or self.is_fsdp_enabled):  # (sharded: the engine's)
            # new (meta) parameters replace the module's; with the optimizer's references gone above, nothing keeps
            # the fp32 data (the generator and the wrapped model hold the module, not its old parameters)
            self.model.to("meta")
        release_memory()

    def _log_trajectories(self, result: RolloutResult, mode: str) -> None:
        """Each process appends its own episodes (no gather of whole conversations across ranks)."""
        rank = self.accelerator.process_index
        name = TRAJECTORIES_FILE if rank == 0 else TRAJECTORIES_FILE.replace(".jsonl", f".rank{rank}.jsonl")
        # a training rollout at global step N trains optimizer step N + 1, the step its metrics are logged at;
        # an evaluation after N steps is logged at N
        step = self.state.global_step + 1 if mode == "train" else self.state.global_step
        TrajectoryLog(os.path.join(self.args.output_dir, name)).append(
            t.to_record(step=step, mode=mode) for t in result.trajectories
        )

    def _record_rollout_metrics(self, result: RolloutResult, mode: str) -> None:
        stats = gather_object([episode_stats(t) for t in result.trajectories])
        if mode == "train" and len({s["budget"] for s in stats}) > 1:
            raise RuntimeError(
                f"processes disagree on the turn budget ({sorted({s['budget'] for s in stats})}); every rank must "
                "derive it from the same global step"
            )
        fallbacks = sum(t.template_fallbacks for t in result.trajectories)
        values = {**rollout_metrics(stats), **timing_metrics(result.total_s, result.generation_s, result.env_s,
                                                              fallbacks, result.prefilled_tokens)}
        for name, value in values.items():
            self._metrics[mode][name].append(value)

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None,
                          tags: str | list[str] | None = None) -> None:
        """TRL's card (written on save and by ``push_to_hub``) naming the real base model, the envs, the turn
        curriculum and the held-out results of the run (``stages.json``, the trainer's evaluations)."""
        tags = [tags] if isinstance(tags, str) else list(tags or [])
        model_name = model_name or os.path.basename(os.path.normpath(self.args.output_dir))  # as push_to_hub names it
        super().create_model_card(model_name, dataset_name, [*tags, "agentgym", "multi-turn-rl"])
        if not self.is_world_process_zero():
            return
        config = self.accelerator.unwrap_model(self.model).config
        section = agent_section(self.args.env_ids, str(self.schedule), self.args.output_dir, self.state.log_history)
        complete_model_card(os.path.join(self.args.output_dir, "README.md"),
                            base_model_of(config, self.args.base_model_id), section, self.hub_model_id)

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


class OptimizerStepGuard(TrainerCallback):
    """Two rules checked before every optimizer step, so a step never moves the weights for nothing or into NaN.

    * Idle steps (with ``skip_zero_advantage``): when no row on any process has a non-zero advantage, the
      gradients are zero, but Adam's momentum would still move every weight.
    * Non-finite gradients (a bf16 kernel's NaN, an overflow): applied, they would turn every weight into NaN and
      the next rollout would crash.

    Either way the gradients are set to None: the optimizer skips every parameter and its state is untouched. The
    learning-rate scheduler still advances one step. Logged as ``train/idle_step`` and ``train/nonfinite_grad_step``.
    """

    def __init__(self, trainer: AgentGRPOTrainer):
        self.trainer = trainer
        self.rows_that_teach = 0
        self.counted = False

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start counting this step's rows that teach afresh."""
        self.rows_that_teach = 0
        self.counted = False

    def count(self, rows: int) -> None:
        """Add rows with a non-zero advantage from one micro-batch of this step.

        Args:
            rows: how many rows of the micro-batch teach (0 when none does).
        """
        self.rows_that_teach += rows
        self.counted = True

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Drop the gradients (the step then leaves the weights and the optimizer state alone) when no process had
        a row that teaches or a gradient is non-finite; log both.
        """
        trainer = self.trainer
        metrics = trainer._metrics["train"]
        parameters = [p for group in trainer.optimizer.param_groups for p in group["params"]]
        idle = False
        if self.counted:  # else the loss ran whole (skip_zero_advantage off or not applicable): nothing to say
            device = trainer.accelerator.device
            taught = trainer.accelerator.reduce(torch.tensor(float(self.rows_that_teach), device=device), "sum")
            idle = taught.item() == 0
            metrics[IDLE_STEP].append(float(idle))
        grads = [p.grad for p in parameters if p.grad is not None]  # all-reduced already: every process agrees
        nonfinite = bool(grads) and not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())
        metrics[NONFINITE_GRAD_STEP].append(float(nonfinite))
        if nonfinite:
            logger.warning("step %d: non-finite gradients; the step is skipped (the weights and the optimizer state "
                           "stay as they were)", state.global_step + 1)
        if idle or nonfinite:
            for parameter in parameters:
                parameter.grad = None


def make_item_drawer(args: AgentGRPOConfig, items: list[ItemKey]) -> ItemDrawer | None:
    """The drawer of train items: learnability-aware, uniform for dynamic sampling's refills, or none (TRL's order)."""
    if args.item_draws == "learnability":
        return LearnabilityDrawer(items, args.seed, args.num_generations, args.learnability_prior,
                                  args.learnability_floor)
    return ItemDrawer(items, args.seed) if args.dynamic_sampling else None


def whole_sequences(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Prompt + completion ids, their attention mask, and the completion width (TRL's forward inputs)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return ids, attention, batch["completion_ids"].size(1)


def replace_newest(logged: Any, values: list[float]) -> None:
    """Put ``values`` in place of the newest ``len(values)`` entries of a log deque: TRL logs its own group
    advantages of a batch inline, with no hook to log the estimator's instead."""
    for _ in range(min(len(values), len(logged))):
        logged.pop()
    logged.extend(values)


def prepare_torch(args: AgentGRPOConfig) -> bool:
    """This process's torch settings for training (threads, LM head, attention kernels); returns whether on CPU."""
    on_cpu = args.use_cpu or not torch.cuda.is_available()
    if on_cpu:
        use_cpu_threads(PartialState().num_processes, args.cpu_threads)
    else:
        # cuDNN's SDPA backward (what bf16 sdpa ran on an H100, torch 2.11) returned NaN gradients for fully
        # masked query rows, which left-padded prompts have; the NaN reached every weight although those rows
        # are never scored (benchmarks/results/gpu_check_h100_nan.json). Eager attention and fp32 did not.
        torch.backends.cuda.enable_cudnn_sdp(False)
    use_compact_lm_head(args.compact_lm_head)
    return on_cpu


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


def _make_reloadable(model: Any, output_dir: str) -> Any:
    """TRL rebuilds the KL reference, and starts its vLLM, from ``model.config._name_or_path``: save a plain copy when
    that cannot work.

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
            logger.warning("saving the initial policy to %s so TRL can load it (KL reference, vLLM)", target)
            shutil.rmtree(target, ignore_errors=True)
            save_plain_copy(model, target)
    model.config._name_or_path = target
    return model
