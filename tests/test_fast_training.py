"""The CPU speed and memory measures of the trainer change its speed and memory, never what it computes.

Micro-batches give the gradients of the whole batch for every loss type they accept; the compact LM
head scores the same log-probs; a group's shared prompt encoded once generates the same tokens;
each process gets its share of the cores whatever ``OMP_NUM_THREADS`` says.
"""

from __future__ import annotations

import logging
import os

import pytest
import torch
from transformers import GenerationConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import agent_envs  # noqa: E402, F401  (registers the test envs)
from agent_envs import COUNTDOWN  # noqa: E402
from test_trainer import countdown_rows, make_trainer  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl import ChatEncoder, EnvPool, HFGenerator, run_rollout  # noqa: E402
from agentgym_trl.fast_training import (  # noqa: E402
    available_cores,
    plan_micro_batches,
    row_lengths,
    take_rows,
    use_compact_lm_head,
)
from agentgym_trl.fast_training import bf16_is_fast  # noqa: E402
from agentgym_trl.trainer import AgentGRPOConfig  # noqa: E402


def scored_batch(trainer, items=(2, 5)) -> dict:
    """One rollout of the tiny model turned into TRL's training inputs, with a distinct advantage per row."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which these tests bypass
    rows = [dict(r) for r in countdown_rows(items) for _ in range(4)]
    for row in rows:
        row["prompt"] = [{"role": "user", "content": "x"}]
    torch.manual_seed(0)
    inputs = trainer._generate_and_score_completions(rows)
    inputs["advantages"] = torch.linspace(-1.0, 1.0, len(rows)) + 0.05
    return inputs


def gradients(trainer, inputs) -> tuple[torch.Tensor, torch.Tensor]:
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    return loss.detach(), grads


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo", "dr_grpo"])
def test_micro_batches_give_the_whole_batch_gradients(tmp_path, monkeypatch, loss_type: str) -> None:
    trainer = make_trainer(tmp_path, loss_type=loss_type, truncated_turn="step", max_turn_tokens=10, bf16=False,
                           beta=0.0, micro_batch_tokens=0)
    # on a CPU (release_memory): no autocast weight cache, and the heap handed back around each micro-batch's passes
    assert trainer.accelerator.autocast_handler.cache_enabled is False
    trims = []
    monkeypatch.setattr("agentgym_trl.trainer.return_freed_heap", lambda: trims.append(1))
    inputs = scored_batch(trainer)
    lengths = row_lengths(inputs)
    assert len(set(lengths)) > 1, "rows of different lengths, so trimming is exercised"
    whole_loss, whole = gradients(trainer, inputs)

    trainer.args.micro_batch_tokens = 2 * max(lengths)  # two rows or fewer per micro-batch
    calls = []
    compute = trainer._loss_parts
    trainer._loss_parts = lambda model, batch: calls.append(batch["prompt_ids"].shape) or compute(model, batch)
    split_loss, split = gradients(trainer, inputs)

    assert len(calls) >= 4, "the batch of 8 rows was cut into micro-batches"
    assert all(shape[0] <= 2 for shape in calls)
    assert len(trims) == 2 * len(calls) - 1  # after each forward, and each backward but the Trainer's own
    assert torch.allclose(split_loss, whole_loss, rtol=1e-5, atol=1e-7)
    assert torch.allclose(split, whole, rtol=1e-4, atol=1e-7), (split - whole).abs().max()


@pytest.mark.parametrize("value_head", ["shared", "detached"])
def test_gae_micro_batches_give_the_whole_batch_gradients(tmp_path, value_head: str) -> None:
    """The value loss averages over rows, the policy loss as its loss_type says: each is weighed on its own."""
    trainer = make_trainer(tmp_path, truncated_turn="step", max_turn_tokens=10, bf16=False, beta=0.0,
                           micro_batch_tokens=0, advantage_estimator="gae", value_head=value_head)
    inputs = scored_batch(trainer)
    assert "value_targets" in inputs
    lengths = row_lengths(inputs)
    head = {id(p) for p in trainer.features["critic"].value_head.parameters()}
    assert head <= {id(p) for p in trainer.model.parameters()}, "the head is the model's: gradients() sees it"
    whole_loss, whole = gradients(trainer, inputs)
    logged = trainer._metrics["train"]["value/loss"]
    whole_value_loss = logged[-1]
    trainer.args.micro_batch_tokens = 2 * max(lengths)
    calls = []
    compute = trainer._loss_parts
    trainer._loss_parts = lambda model, batch: calls.append(batch["prompt_ids"].shape[0]) or compute(model, batch)
    split_loss, split = gradients(trainer, inputs)

    assert len(calls) >= 4 and max(calls) <= 2, "the batch of 8 rows was cut into micro-batches"
    assert torch.allclose(split_loss, whole_loss, rtol=1e-5, atol=1e-7)
    assert torch.allclose(split, whole, rtol=1e-4, atol=1e-7), (split - whole).abs().max()
    assert len(logged) == 2 and logged[-1] == pytest.approx(whole_value_loss, rel=1e-5), "one value loss per batch"


def test_micro_batches_are_skipped_where_they_would_change_the_loss(tmp_path, caplog) -> None:
    trainer = make_trainer(tmp_path, truncated_turn="step", max_turn_tokens=10, bf16=False, beta=0.0,
                           entropy_coef=0.01, micro_batch_tokens=1)
    inputs = scored_batch(trainer)
    calls = []
    compute = trainer._loss_parts
    trainer._loss_parts = lambda model, batch: calls.append(1) or compute(model, batch)
    with caplog.at_level(logging.WARNING, logger="agentgym_trl.trainer"):
        gradients(trainer, inputs)
    assert calls == [1], "an entropy bonus is averaged per call in TRL: the batch trains in one piece"
    assert "micro_batch_tokens and skip_zero_advantage are ignored with an entropy bonus: each batch" in caplog.text


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo"])
@pytest.mark.parametrize("micro_batch_tokens", [0, 10**6])
def test_skipping_zero_advantage_rows_keeps_the_gradients(tmp_path, loss_type: str, micro_batch_tokens: int) -> None:
    trainer = make_trainer(tmp_path, loss_type=loss_type, truncated_turn="step", max_turn_tokens=10, bf16=False,
                           beta=0.0, micro_batch_tokens=micro_batch_tokens)
    inputs = scored_batch(trainer)
    inputs["advantages"][:4] = 0.0  # the first group: every episode scored the same
    whole_loss, whole = gradients(trainer, inputs)

    trainer.args.skip_zero_advantage = True
    rows_seen = []
    compute = trainer._loss_parts
    trainer._loss_parts = lambda model, batch: rows_seen.append(batch["prompt_ids"].shape[0]) or compute(model, batch)
    skip_loss, skipped = gradients(trainer, inputs)

    assert sum(rows_seen) == 4, "only the group with a non-zero advantage went through the model"
    assert torch.allclose(skip_loss, whole_loss, rtol=1e-5, atol=1e-7)
    assert torch.allclose(skipped, whole, rtol=1e-4, atol=1e-7), (skipped - whole).abs().max()
    assert trainer._metrics["train"]["train/skipped_rows_frac"][-1] == 0.5

    inputs["advantages"][:] = 0.0  # nothing to learn: one row runs (so every process steps alike), no gradient
    rows_seen.clear()
    _, nothing = gradients(trainer, inputs)
    assert rows_seen == [1]
    assert not nothing.any()


def test_skipping_zero_advantage_rows_needs_beta_zero(tmp_path) -> None:
    with pytest.raises(ValueError, match="skip_zero_advantage needs beta=0"):
        AgentGRPOConfig(output_dir=str(tmp_path), env_ids=[COUNTDOWN], max_turns=2, skip_zero_advantage=True, beta=0.1)


def test_plan_keeps_each_micro_batch_within_the_budget() -> None:
    lengths = [700, 120, 650, 90, 300, 2500]
    groups = plan_micro_batches(lengths, token_budget=1400)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    for group in groups:
        longest = max(lengths[i] for i in group)
        assert len(group) == 1 or longest * len(group) <= 1400
    assert [5] in groups, "a row over the budget trains alone"
    assert plan_micro_batches(lengths, token_budget=10**9) == [[5, 0, 2, 4, 1, 3]]


def test_take_rows_trims_only_padding() -> None:
    pad = 0
    inputs = {
        "prompt_ids": torch.tensor([[pad, pad, 5, 6], [pad, 7, 8, 9], [1, 2, 3, 4]]),
        "prompt_mask": torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]]),
        "completion_ids": torch.tensor([[10, 11, pad, pad, pad], [12, pad, pad, pad, pad], [1, 2, 3, 4, 5]]),
        "completion_mask": torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]),
        "tool_mask": torch.tensor([[1, 0, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 1]]),
        "advantages": torch.tensor([0.5, -0.5, 1.0]),
        "num_items_in_batch": torch.tensor(9),
        "notes": ["a", "b", "c"],
    }
    assert row_lengths(inputs) == [4, 4, 9]
    batch = take_rows(inputs, [1, 0])
    assert batch["prompt_ids"].tolist() == [[7, 8, 9], [pad, 5, 6]]
    assert batch["completion_ids"].tolist() == [[12, pad], [10, 11]]
    assert batch["tool_mask"].tolist() == [[1, 1], [1, 0]]
    assert batch["advantages"].tolist() == [-0.5, 0.5]
    assert batch["num_items_in_batch"].item() == 9 and batch["notes"] == ["b", "a"]


def test_compact_lm_head_scores_the_same_logprobs(tmp_path) -> None:
    trainer = make_trainer(tmp_path, truncated_turn="step", max_turn_tokens=10, bf16=False, compact_lm_head=False)
    inputs = scored_batch(trainer)
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].shape[1]
    mask = inputs["completion_mask"].bool()

    def logprobs() -> torch.Tensor:
        with torch.no_grad():
            return trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention, width)[0]

    full = logprobs()
    try:
        assert use_compact_lm_head(True)
        compact = logprobs()
    finally:
        use_compact_lm_head(False)
    assert torch.allclose(compact[mask], full[mask], atol=1e-5)
    assert torch.all(compact[~mask] == 0)
    from trl.trainer import utils as trl_utils

    assert trl_utils._use_triton.__name__ == "_use_triton", "switched off, TRL's own check is back"


def test_each_process_gets_its_share_of_the_cores(tmp_path) -> None:
    torch.set_num_threads(1)  # as under `accelerate launch`, which exports OMP_NUM_THREADS=1
    try:
        make_trainer(tmp_path, cpu_threads=None)  # the default
        assert torch.get_num_threads() == available_cores()
        make_trainer(tmp_path, cpu_threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)


def test_bf16_autocast_is_the_cpu_default_where_it_is_native(tmp_path) -> None:
    config = AgentGRPOConfig(output_dir=str(tmp_path), env_ids=[COUNTDOWN], max_turns=2, use_cpu=True,
                             report_to="none")
    assert config.bf16 == bf16_is_fast()
    assert config.micro_batch_tokens == 2048
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        AgentGRPOConfig(output_dir=str(tmp_path), env_ids=[COUNTDOWN], max_turns=2, micro_batch_tokens=-1)


def test_a_groups_shared_prompt_is_encoded_once_and_changes_nothing() -> None:
    tokenizer = tiny_tokenizer("chatml")
    model = tiny_model(tokenizer)
    encoder = ChatEncoder(tokenizer, [tokenizer.convert_tokens_to_ids("<|im_end|>")])
    rows = [{"env_id": COUNTDOWN, "item_id": item} for item in (2, 5) for _ in range(4)]
    results, fed = {}, {}
    for shared in (False, True):
        generator = HFGenerator(model, GenerationConfig(do_sample=False), tokenizer.pad_token_id, encoder.stop_ids,
                                share_prompt_prefill=shared)
        seen: list[int] = []
        hook = model.register_forward_pre_hook(
            lambda module, args, kwargs: seen.append(kwargs["input_ids"].shape[1]), with_kwargs=True
        )
        try:
            results[shared] = run_rollout(rows, generator, encoder, EnvPool(), max_turns=3, max_turn_tokens=12,
                                          max_context_tokens=600)
        finally:
            hook.remove()
        fed[shared] = seen
    for plain, shared in zip(results[False].trajectories, results[True].trajectories, strict=True):
        assert plain.completion_ids == shared.completion_ids and plain.env_mask == shared.env_mask
        assert torch.allclose(torch.tensor(plain.logprobs), torch.tensor(shared.logprobs), atol=1e-4)
    first, second = (results[True].trajectories[row].prompt_ids for row in (0, 4))
    common = next(index for index, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    # without sharing the first call encodes 8 rows of the whole prompt; with it, the items' common opening once,
    # then the rest of each group's prompt on top of it, then 1 token per row
    assert fed[False][0] >= len(first)
    assert fed[True][:4] == [common, len(first) - 1 - common, len(second) - 1 - common, 1]


def test_the_warm_up_hands_the_heap_back_after_each_forward_and_backward(monkeypatch) -> None:
    """``release_memory_each_step`` (the warm-up's callback): after each training forward, before the optimizer step
    (after the backward) and after the step; an evaluation forward is left alone."""
    from agentgym_trl.fast_training import release_memory_each_step

    trims = []
    monkeypatch.setattr("agentgym_trl.fast_training.return_freed_heap", lambda: trims.append(1))
    model = tiny_model(tiny_tokenizer("chatml"))
    callback = release_memory_each_step()
    callback.on_train_begin(None, None, None, model=model)
    ids = torch.tensor([[1, 2, 3]])
    model.train()
    model(input_ids=ids)
    assert len(trims) == 1
    model.eval()
    model(input_ids=ids)
    assert len(trims) == 1
    callback.on_pre_optimizer_step(None, None, None)
    callback.on_step_end(None, None, None)
    assert len(trims) == 3
