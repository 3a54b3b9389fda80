"""Behaviour cloning: conversations tokenise to the rollout's own token stream, the loss covers assistant
tokens only, SFT on oracle data lowers a tiny model's loss, and examples/sft.py feeds examples/grpo.py."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

from datasets import Dataset  # noqa: E402
from tiny_model import save_tiny, tiny_model, tiny_tokenizer  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

import agentgym_envs  # noqa: E402
from agentgym_envs.collect import collect  # noqa: E402
from agentgym_trl import ChatEncoder, EnvPool, TurnOutput, run_rollout  # noqa: E402
from agentgym_trl.fast_training import checkpointing_arguments  # noqa: E402
from agentgym_trl.sft import (  # noqa: E402
    conversation_ids,
    is_saved_dataset,
    load_or_collect,
    token_stats,
    tokenize_conversations,
)

ROOT = Path(__file__).resolve().parents[1]
TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"
BABYAI = "AgentGym/BabyAI-GoTo-v0"


class ScriptedGenerator:
    """A Generator that 'samples' given responses: their ids plus the end-of-turn token, as a model would."""

    def __init__(self, responses: list[str], encoder: ChatEncoder):
        self.responses = list(responses)
        self.encoder = encoder
        self.stop_ids = encoder.stop_ids

    def session(self):
        return nullcontext()

    def any_active(self, local_active: int) -> bool:
        return local_active > 0

    def generate(self, contexts, max_new_tokens):
        assert len(contexts) == 1, "one episode per rollout keeps the script unambiguous"
        ids = self.encoder.encode(self.responses.pop(0)) + [self.encoder.closer_id]
        assert len(ids) <= max_new_tokens[0]
        return [TurnOutput(ids, [0.0] * len(ids), True)]


def replay_in_rollout(row: dict, encoder: ChatEncoder, merged_first_turn: bool = False):
    """The rollout's trajectory for the row's episode when the policy answers with the row's responses."""
    responses = [m["content"] for m in row["messages"][row["prompt_messages"] :] if m["role"] == "assistant"]
    result = run_rollout(
        [{"env_id": row["env_id"], "item_id": row["item_id"], "seed": row["seed"]}],
        ScriptedGenerator(responses, encoder),
        encoder,
        EnvPool(),
        max_turns=64,
        max_turn_tokens=512,
        max_context_tokens=200_000,
        merged_first_turn=merged_first_turn,
    )
    return result.trajectories[0]


@pytest.fixture(scope="module")
def oracle_rows() -> list[dict]:
    rows, _ = collect([TEXTCRAFT, BABYAI], 2, progress=False)
    return rows


@pytest.mark.parametrize("template", ["chatml", "llama3", "zephyr"])
def test_conversations_tokenise_to_the_rollouts_token_stream(template: str, oracle_rows: list[dict]) -> None:
    tokenizer = tiny_tokenizer(template)
    encoder = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
    for row in oracle_rows:
        trajectory = replay_in_rollout(row, encoder)
        assert trajectory.success and trajectory.messages == row["messages"]
        # AgentGym's instruction / acknowledgement / task
        assert trajectory.prompt_messages == row["prompt_messages"] == 3
        ids, mask = conversation_ids(encoder, row["messages"], row["prompt_messages"])
        assert ids == trajectory.prompt_ids + trajectory.completion_ids
        assert mask == [0] * len(trajectory.prompt_ids) + trajectory.env_mask


def test_only_assistant_tokens_carry_loss(oracle_rows: list[dict]) -> None:
    tokenizer = tiny_tokenizer("chatml")
    encoder = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
    for row in oracle_rows:
        ids, mask = conversation_ids(encoder, row["messages"], row["prompt_messages"])
        runs, start = [], 0  # maximal runs of equal mask values
        for end in range(1, len(mask) + 1):
            if end == len(mask) or mask[end] != mask[start]:
                runs.append((mask[start], ids[start:end]))
                start = end
        trained = [run for value, run in runs if value == 1]
        replies = [m["content"] for m in row["messages"][row["prompt_messages"] :] if m["role"] == "assistant"]
        assert len(trained) == len(replies) == row["turns"]
        for run, reply in zip(trained, replies):
            assert run[-1] == encoder.closer_id and tokenizer.decode(run[:-1]) == reply
        untrained = "".join(tokenizer.decode(run) for value, run in runs if value == 0)
        for observation in [m["content"] for m in row["messages"] if m["role"] == "user"]:
            assert observation in untrained
        assert row["messages"][1]["content"] in untrained  # the acknowledgement is prompt, not an action
        assert runs[-1][0] == 1, "the conversation ends on the last model turn, as the rollout's does"


def test_token_stats_report_conversations_a_max_length_would_drop(oracle_rows: list[dict]) -> None:
    encoder = ChatEncoder(tiny_tokenizer("chatml"))
    data = tokenize_conversations(
        Dataset.from_list([{"messages": r["messages"], "prompt_messages": r["prompt_messages"]} for r in oracle_rows]),
        encoder)
    first_reply = [mask.index(1) for mask in data["assistant_masks"]]
    stats = token_stats(data, max_length=min(first_reply))
    assert stats["rows"] == len(oracle_rows) and stats["rows_without_loss"] == len(oracle_rows)
    assert stats["assistant_tokens_kept"] == 0.0
    full = token_stats(data, max_length=max(len(ids) for ids in data["input_ids"]))
    assert full["rows_without_loss"] == 0 and full["assistant_tokens_kept"] == 1.0
    assert 0 < full["assistant_token_share"] < 0.5


def test_malformed_conversations_are_refused() -> None:
    encoder = ChatEncoder(tiny_tokenizer("chatml"))
    with pytest.raises(ValueError, match="at least one assistant turn"):
        conversation_ids(encoder, [{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="must alternate"):
        conversation_ids(encoder, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                   {"role": "assistant", "content": "c"}])
    ids, mask = conversation_ids(  # a trailing user turn carries no loss and is left out
        encoder, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                  {"role": "user", "content": "c"}])
    assert ids[-1] == encoder.closer_id and mask[-1] == 1


def test_the_opening_is_prompt_not_loss() -> None:
    """AgentGym's acknowledgement is an assistant turn of the prompt: ``prompt_messages`` keeps it out of the loss."""
    encoder = ChatEncoder(tiny_tokenizer("chatml"))
    opening = [{"role": "user", "content": "instruction"}, {"role": "assistant", "content": "OK."},
               {"role": "user", "content": "observation"}]
    conversation = [*opening, {"role": "assistant", "content": "get 1 log"}]
    ids, mask = conversation_ids(encoder, conversation, prompt_messages=3)
    assert ids[: mask.index(1)] == encoder.start(opening)[0]
    assert sum(mask) == len(encoder.encode("get 1 log")) + 1
    legacy_ids, legacy_mask = conversation_ids(encoder, conversation[2:])  # one opening user turn: no count needed
    assert sum(legacy_mask) == sum(mask) and legacy_ids[-sum(mask):] == ids[-sum(mask):]
    with pytest.raises(ValueError, match="prompt ending in a user turn"):
        conversation_ids(encoder, conversation, prompt_messages=2)


@pytest.mark.parametrize("merged", [False, True])
def test_collected_openings_match_the_rollouts(merged: bool) -> None:
    rows, _ = collect(TEXTCRAFT, 1, progress=False, merged_first_turn=merged)
    tokenizer = tiny_tokenizer("chatml")
    encoder = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
    (row,) = rows
    trajectory = replay_in_rollout(row, encoder, merged_first_turn=merged)
    assert row["prompt_messages"] == trajectory.prompt_messages == (1 if merged else 3)
    ids, mask = conversation_ids(encoder, row["messages"], row["prompt_messages"])
    assert ids == trajectory.prompt_ids + trajectory.completion_ids and mask[len(trajectory.prompt_ids):] == \
        trajectory.env_mask


def test_tiny_model_sft_loss_falls_on_oracle_data(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer("chatml")
    encoder = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
    rows, _ = collect(TEXTCRAFT, 8, progress=False)
    conversations = [{"messages": r["messages"], "prompt_messages": r["prompt_messages"]} for r in rows]
    data = tokenize_conversations(Dataset.from_list(conversations), encoder)
    config = SFTConfig(
        output_dir=str(tmp_path),
        max_steps=12,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        max_length=2048,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        **checkpointing_arguments(False),
        seed=0,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(model=tiny_model(tokenizer), args=config, train_dataset=data, eval_dataset=data,
                         processing_class=tokenizer)
    prepared = trainer.train_dataset  # TRL's labels are -100 exactly where our mask is 0
    for index in range(len(data)):
        labels, masks = prepared[index]["labels"], data[index]["assistant_masks"]
        assert [label != -100 for label in labels] == [bool(bit) for bit in masks[: len(labels)]]
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    assert after < 0.7 * before, (before, after)


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_sft_example_checkpoint_starts_grpo(tmp_path: Path) -> None:
    model_dir = save_tiny(tmp_path / "tiny")
    data_dir = tmp_path / "data"
    checkpoint = tmp_path / "sft"
    common = ["--model_name_or_path", str(model_dir), "--dataset_path", str(data_dir), "--env_ids", TEXTCRAFT,
              "--episodes_per_env", "6", "--max_steps", "2", "--max_length", "1024", "--learning_rate", "1e-3",
              "--eval_conversations", "1", "--disable_tqdm", "true"]
    trainer = load_example("sft").main([*common, "--output_dir", str(checkpoint)])
    assert is_saved_dataset(data_dir) and len(load_or_collect(data_dir, [TEXTCRAFT], 6)) == 6  # reused, not redone
    assert any("loss" in log for log in trainer.state.log_history)
    assert (checkpoint / "config.json").is_file() and (checkpoint / "tokenizer.json").is_file()
    Qwen2ForCausalLM.from_pretrained(checkpoint)
    assert PreTrainedTokenizerFast.from_pretrained(checkpoint).chat_template == tiny_tokenizer("chatml").chat_template

    grpo = load_example("grpo").main([
        "--preset", "cpu-demo", "--model_name_or_path", str(checkpoint), "--output_dir", str(tmp_path / "grpo"),
        "--max_steps", "1",
        "--max_turns_schedule", "0:1", "--max_turn_tokens", "12", "--max_context_tokens", "2048",
        "--disable_tqdm", "true", "--clone_episodes", "0", "--eval_items", "0", "--per_device_train_batch_size", "4",
    ])
    assert grpo.state.global_step == 1

    merged = tmp_path / "sft-lora"  # LoRA: the adapter is merged, so the checkpoint is a full model
    load_example("sft").main([*common, "--max_steps", "1", "--use_peft", "true", "--lora_r", "4",
                              "--output_dir", str(merged)])
    assert not (merged / "adapter_config.json").exists()
    assert "lora" not in json.dumps(json.loads((merged / "config.json").read_text())).lower()
    reloaded = Qwen2ForCausalLM.from_pretrained(merged)
    assert not any("lora" in name for name, _ in reloaded.named_parameters())


def test_exploration_keeps_policy_episodes_as_trainable_conversations() -> None:
    from transformers import GenerationConfig

    from agentgym_envs.collect import KeepRule, rows_to_dataset
    from agentgym_trl import HFGenerator
    from agentgym_trl.sft import explore

    tokenizer = tiny_tokenizer("chatml")
    encoder = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
    sampling = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    generator = HFGenerator(tiny_model(tokenizer), sampling, tokenizer.pad_token_id, encoder.stop_ids)
    torch.manual_seed(0)
    rows, counts = explore(generator, encoder, [TEXTCRAFT], 3, max_turns=2, max_turn_tokens=8, batch_size=2)
    assert counts == {TEXTCRAFT: {"played": 3, "kept": len(rows)}}
    # a random tiny model solves nothing: the default rule keeps none
    assert all(row["info"]["success"] for row in rows)
    torch.manual_seed(0)
    every, counts = explore(generator, encoder, [TEXTCRAFT], 3, keep=KeepRule(keep_failures=True), max_turns=2,
                            max_turn_tokens=8, batch_size=2)
    assert len(every) == counts[TEXTCRAFT]["kept"] == 3
    train_items = set(agentgym_envs.get_task(TEXTCRAFT).split("train"))
    for row in every:
        assert row["item_id"] in train_items and 1 <= row["turns"] <= 2 and row["messages"][0]["role"] == "user"
        _, mask = conversation_ids(encoder, row["messages"], row["prompt_messages"])
        assert sum(1 for i in range(len(mask)) if mask[i] == 1 and (i == 0 or mask[i - 1] == 0)) == row["turns"]
    assert len(tokenize_conversations(rows_to_dataset(every), encoder)) == 3


def test_agentevol_example_runs_train_explore_rounds(tmp_path: Path) -> None:
    model_dir = save_tiny(tmp_path / "tiny")
    history = load_example("agentevol").main([
        "--model_name_or_path", str(model_dir), "--dataset_path", str(tmp_path / "data"), "--env_ids", TEXTCRAFT,
        "--episodes_per_env", "4", "--iterations", "2", "--max_steps", "1", "--max_length", "1024",
        "--explore_episodes_per_env", "2", "--explore_max_turns", "2", "--explore_max_turn_tokens", "8",
        "--output_dir", str(tmp_path / "evol"), "--disable_tqdm", "true",
    ])
    assert [record["iteration"] for record in history] == [0, 1]
    assert all(record["explored"][TEXTCRAFT]["played"] == 2 for record in history)
    assert history[0]["train_conversations"] == 4
    for iteration in range(2):
        Qwen2ForCausalLM.from_pretrained(tmp_path / "evol" / f"iter-{iteration}")
