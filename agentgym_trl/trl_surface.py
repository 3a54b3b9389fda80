"""The TRL surface ``AgentGRPOTrainer`` (``trainer.py``) and its features stand on, kept in one list.

TRL's private members the adapter relies on (the ``trl==1.16.0`` pin makes them safe; ``TRL_PRIVATE_MEMBERS``
holds this list and ``tests/test_trl_surface.py`` fails when a TRL upgrade removes or changes one):

* ``GRPOTrainer._generate_and_score_completions``: overridden: opens the batch, replaces the advantages;
* ``GRPOTrainer._calculate_rewards``: overridden: keeps every process's rewards for the estimators;
* ``GRPOTrainer._compute_loss``: overridden and called per micro-batch (the value loss joins it);
* ``GRPOTrainer._get_per_token_logps_and_entropies``: the critic's no-grad forward (a shared value head;
  ``features/critic.py``);
* ``Trainer._save`` and ``Trainer._load_from_checkpoint``: the features' state beside the model (the value
  head, left out of the model's weights; the item estimates; the oracle prefix);
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

from dataclasses import dataclass


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
