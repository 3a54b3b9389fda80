"""Behaviour cloning on expert conversations, tokenised exactly like the RL rollout.

``agentgym collect`` (``agentgym_envs.collect``) saves episodes as chat conversations. Training on
them with TRL's ``SFTTrainer`` needs an assistant-only loss mask, and TRL's built-in one
(``assistant_only_loss=True``) only works with templates that carry ``{% generation %}`` markers,
which ChatML / SmolLM2 / Llama-3 templates do not. So the rows are pre-tokenised here, with the
same ``ChatEncoder`` calls ``run_rollout`` makes, into ``input_ids`` + ``assistant_masks``:

* the prompt (the opening: ``prompt_messages`` leading messages, e.g. AgentGym's instruction /
  acknowledgement / first observation; without that count, everything before the first assistant
  turn) is ``encoder.start`` — mask 0;
* each assistant turn is its text's ids followed by the template's end-of-turn token — mask 1,
  end-of-turn token included (the rollout's ``env_mask`` rule: the model samples that token);
* each later user turn (observation) is ``encoder.observation_ids`` — mask 0.

So a cloned policy is trained on the very token stream it later produces and is scored on in GRPO.
``SFTTrainer`` recognises the pre-tokenised dataset (an ``input_ids`` column) and turns
``assistant_masks`` into labels (-100 where 0).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.collect import KeepRule, episode_plan
from agentgym_trl.chat import ChatEncoder
from agentgym_trl.engines import Generator
from agentgym_trl.rollout import EnvPool, RolloutResult, run_rollout

logger = logging.getLogger(__name__)

ASSISTANT = "assistant"


def encoder_for(model_path: str | os.PathLike, tokenizer: Any) -> ChatEncoder:
    """The ``ChatEncoder`` the GRPO trainer would build for this model (its generation config's eos ids count)."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:  # no generation_config.json: the tokenizer's eos alone
        eos = None
    return ChatEncoder(tokenizer, [] if eos is None else [eos] if isinstance(eos, int) else list(eos))


def conversation_ids(encoder: ChatEncoder, messages: Sequence[Mapping[str, str]],
                     prompt_messages: int | None = None) -> tuple[list[int], list[int]]:
    """Token ids of a conversation and its loss mask (1 on assistant tokens incl. each end-of-turn token).

    The first ``prompt_messages`` messages form the prompt (an acknowledgement in AgentGym's opening
    is not trained on); without the count, the messages before the first assistant turn do. After
    the prompt, assistant and user turns alternate as in a rollout. User turns after the last
    assistant turn carry no loss and are left out.
    """
    messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
    first_reply = prompt_messages
    if first_reply is None:
        first_reply = next((i for i, m in enumerate(messages) if m["role"] == ASSISTANT), None)
    replies = [i for i, m in enumerate(messages) if m["role"] == ASSISTANT and i >= (first_reply or 0)]
    if not first_reply or not replies or messages[first_reply - 1]["role"] != "user":
        raise ValueError("a conversation needs a prompt ending in a user turn, then at least one assistant turn")
    last_reply = replies[-1]
    prompt_ids, rendered = encoder.start(messages[:first_reply])
    ids = list(prompt_ids)
    mask = [0] * len(ids)
    for index in range(first_reply, last_reply + 1):
        message = messages[index]
        expected = ASSISTANT if (index - first_reply) % 2 == 0 else "user"
        if message["role"] != expected:
            raise ValueError(
                f"message {index} is a {message['role']!r} turn where the rollout would have a {expected!r} turn; "
                "after the prompt, assistant and user turns must alternate"
            )
        if message["role"] == ASSISTANT:
            turn = encoder.encode_text(message["content"]) + [encoder.closer_id]
            ids.extend(turn)
            mask.extend([1] * len(turn))
        else:
            bridge, rendered, _ = encoder.observation_ids(messages[:index], rendered, message["content"])
            ids.extend(bridge)
            mask.extend([0] * len(bridge))
    return ids, mask


def tokenize_conversations(dataset: Any, encoder: ChatEncoder, messages_column: str = "messages") -> Any:
    """Map a conversation dataset to ``input_ids`` + ``assistant_masks`` rows (other columns are dropped)."""

    def tokenize(row: dict[str, Any]) -> dict[str, list[int]]:
        ids, mask = conversation_ids(encoder, row[messages_column], row.get("prompt_messages"))
        return {"input_ids": ids, "assistant_masks": mask}

    return dataset.map(tokenize, remove_columns=dataset.column_names, desc="Tokenising conversations")


def is_saved_dataset(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a ``save_to_disk`` dataset (so a run can reuse it instead of collecting)."""
    folder = Path(path)
    return (folder / "dataset_info.json").is_file() or (folder / "dataset_dict.json").is_file()


@dataclass
class ExpertDataArguments:
    """Where the expert conversations come from (the command-line fields ``load_or_collect`` takes)."""

    dataset_path: str = field(
        default="runs/sft-data/oracle-textcraft-babyai",
        metadata={"help": "a dataset saved by `agentgym collect`; collected there from --env_ids if missing"},
    )
    env_ids: list[str] = field(
        default_factory=lambda: [
            "AgentGym/TextCraft-Depth1-v0",
            "AgentGym/TextCraft-Depth2-v0",
            "AgentGym/BabyAI-GoTo-v0",
        ],
        metadata={"help": "env ids to collect train episodes from when --dataset_path does not exist yet"},
    )
    episodes_per_env: int = field(default=100, metadata={"help": "oracle episodes per env id when collecting"})
    merged_first_turn: bool = field(default=False, metadata={
        "help": "collect with one opening user turn (instruction + first observation), for a policy trained with "
                "merged_first_turn=True; default: AgentGym's instruction / acknowledgement / observation turns"})


def load_or_collect(
    path: str | os.PathLike,
    env_ids: Sequence[str],
    episodes_per_env: int,
    *,
    agent: str = "oracle",
    seed: int = 0,
    progress: bool = True,
    merged_first_turn: bool = False,
    items: dict[str, Sequence[int]] | None = None,
) -> Any:
    """The trajectory dataset at ``path``; collected there first (train items, solved episodes) if missing.

    ``items`` ({env id: item ids}) names the train items to play instead of a seeded shuffle of all of them.
    """
    from agentgym_envs.collect import collect, load_trajectories, save_trajectories

    if not is_saved_dataset(path):
        rows, counts = collect(list(env_ids), episodes_per_env, agent=agent, seed=seed, progress=progress,
                               merged_first_turn=merged_first_turn, items=items)
        for env_id, count in counts.items():
            logger.info("%s: kept %d of %d %s episodes", env_id, count["kept"], count["played"], agent)
        save_trajectories(rows, path)
    return load_trajectories(path)


def token_stats(dataset: Any, max_length: int | None = None) -> dict[str, float]:
    """Lengths and loss-token share of a tokenised dataset; with ``max_length``, how much a cut there loses.

    ``rows_without_loss`` counts conversations whose first assistant turn starts beyond ``max_length``:
    TRL drops them, so a too-short ``max_length`` silently removes an env with long prompts.
    """
    lengths = [len(ids) for ids in dataset["input_ids"]]
    masks = dataset["assistant_masks"]
    if not lengths:
        return {"rows": 0}
    ordered = sorted(lengths)
    stats = {
        "rows": len(lengths),
        "tokens_mean": round(sum(lengths) / len(lengths), 1),
        "tokens_median": ordered[len(ordered) // 2],
        "tokens_max": ordered[-1],
        "assistant_token_share": round(sum(sum(mask) for mask in masks) / max(1, sum(lengths)), 4),
    }
    if max_length is not None:
        kept = sum(sum(mask[:max_length]) for mask in masks)
        stats["rows_without_loss"] = sum(1 for mask in masks if sum(mask[:max_length]) == 0)
        stats["assistant_tokens_kept"] = round(kept / max(1, sum(sum(mask) for mask in masks)), 4)
    return stats


def save_sft_checkpoint(trainer: Any, output_dir: str | os.PathLike) -> None:
    """Save model + tokenizer as a plain checkpoint; a LoRA adapter is merged first, so RL starts from a full model."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    if hasattr(model, "merge_and_unload"):
        if trainer.accelerator.is_main_process:
            model.merge_and_unload().save_pretrained(output_dir)
            trainer.processing_class.save_pretrained(output_dir)
        trainer.accelerator.wait_for_everyone()
        return
    trainer.save_model(str(output_dir))


def rollout_rows(result: RolloutResult, keep: KeepRule, agent: str) -> list[dict[str, Any]]:
    """The kept trajectories of a rollout as records (the schema of ``agentgym collect``).

    Their ``messages`` are the rollout's own (decoded model turns, observations), so they
    tokenise back to the sampled stream as long as the tokenizer round-trips its own output.
    """
    return [t.to_record(agent=agent) for t in result.trajectories
            if t.turns and keep.keeps(t.reward, t.success)]


def explore(
    generator: Generator,
    encoder: ChatEncoder,
    env_ids: Sequence[str],
    episodes_per_env: int,
    *,
    keep: KeepRule | None = None,
    max_turns: int = 10,
    max_turn_tokens: int = 64,
    max_context_tokens: int = 2048,
    batch_size: int = 8,
    seed: int = 0,
    agent: str = "policy",
    merged_first_turn: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]]]:
    """AgentEvol's exploration step: the current policy plays train items; the kept episodes become SFT rows.

    Items come from ``episode_plan`` (train split, seeded order), so a later iteration with another
    ``seed`` explores other items first. Returns the rows and per-env ``played`` / ``kept`` counts.
    """
    pool = EnvPool()
    rows: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    try:
        for env_id in env_ids:
            plan = episode_plan(env_id, "train", episodes_per_env, seed)
            kept_before = len(rows)
            for start in range(0, len(plan), batch_size):
                chunk = plan[start : start + batch_size]
                batch = [{"env_id": env_id, "item_id": item, "seed": item_seed} for item, item_seed in chunk]
                result = run_rollout(batch, generator, encoder, pool, max_turns=max_turns,
                                     max_turn_tokens=max_turn_tokens, max_context_tokens=max_context_tokens,
                                     merged_first_turn=merged_first_turn)
                rows.extend(rollout_rows(result, keep or KeepRule(), agent))
            counts[env_id] = {"played": len(plan), "kept": len(rows) - kept_before}
    finally:
        pool.close()
    return rows, counts


__all__ = [
    "conversation_ids",
    "encoder_for",
    "explore",
    "is_saved_dataset",
    "load_or_collect",
    "rollout_rows",
    "save_sft_checkpoint",
    "token_stats",
    "tokenize_conversations",
]
