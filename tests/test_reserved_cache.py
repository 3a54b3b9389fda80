"""The reserved key/value cache: the same tokens as transformers' concatenating cache, without the copies.

``HFGenerator(reserve_cache=True)`` (the default) hands ``generate`` a cache whose layers write each decode step
into buffers sized for the turn. These tests hold it to ``DynamicLayer``'s results step by step, show that decode
steps reuse the buffers (the copies are gone), that a turn longer than reserved or a replaced cache still works,
and that whole multi-turn rollouts sample the same tokens either way; ``GenerationTiming`` counts the same prefill
positions as ``prefilled_tokens``.
"""

from __future__ import annotations

import os

import pytest
import torch
from test_shared_prefix import assert_same, family, generator_for, play, tiny_parts
from transformers.cache_utils import DynamicLayer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

from agentgym_trl.engines.reserved_cache import ReservedLayer, reserved_cache  # noqa: E402

BATCH, HEADS, HEAD_DIM = 3, 2, 4


@pytest.fixture(scope="module")
def parts():
    return tiny_parts()


def states(length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values for ``length`` positions."""
    generator = torch.Generator().manual_seed(seed)
    shape = (BATCH, HEADS, length, HEAD_DIM)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def test_it_holds_what_a_dynamic_layer_holds_step_by_step() -> None:
    reserved, dynamic = ReservedLayer(capacity=8), DynamicLayer()
    for step, length in enumerate([5, 1, 1, 1, 3, 1]):  # a prefill, decode steps, then past the reserved room
        keys, values = states(length, step)
        got, expected = reserved.update(keys, values), dynamic.update(keys, values)
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
        assert reserved.get_seq_length() == dynamic.get_seq_length()


def test_decode_steps_write_into_the_same_buffers() -> None:
    layer = ReservedLayer(capacity=10)
    layer.update(*states(6, 0))
    first = layer.keys.data_ptr()
    for step in range(4):
        keys, _ = layer.update(*states(1, step + 1))
        assert keys.data_ptr() == first  # a view of the same buffer: nothing copied but the new position
    assert layer.get_seq_length() == 10


def test_a_turn_longer_than_reserved_moves_to_bigger_buffers() -> None:
    layer = ReservedLayer(capacity=4)
    keys, values = states(4, 0)
    layer.update(keys, values)
    more_keys, more_values = states(2, 1)
    got_keys, got_values = layer.update(more_keys, more_values)
    assert torch.equal(got_keys, torch.cat([keys, more_keys], dim=-2))
    assert torch.equal(got_values, torch.cat([values, more_values], dim=-2))
    assert layer._key_buffer is not None and layer._key_buffer.shape[-2] >= 8  # room doubled, not grown by one


def test_a_cropped_or_replaced_cache_goes_on_from_what_it_holds() -> None:
    layer = ReservedLayer(capacity=16)
    keys, values = states(6, 0)
    layer.update(keys, values)
    layer.crop(-2)  # as an assisted decoding would: a view of the buffer's start
    new_keys, new_values = states(1, 1)
    got, _ = layer.update(new_keys, new_values)
    assert torch.equal(got, torch.cat([keys[..., :4, :], new_keys], dim=-2))
    layer.batch_select_indices(torch.tensor([2, 0]))  # a new tensor, not a view of the buffer
    two_keys = new_keys[[0, 1]]
    got, _ = layer.update(two_keys, new_values[[0, 1]])
    assert got.shape[0] == 2 and torch.equal(got[..., -1:, :], two_keys)
    assert torch.equal(got[..., :5, :], torch.cat([keys[..., :4, :], new_keys], dim=-2)[[2, 0]])


def test_a_reserved_cache_replaces_only_full_attention_layers(parts) -> None:
    _, model, _ = parts
    cache = reserved_cache(model.config, capacity=32)
    assert cache.layers and all(isinstance(layer, ReservedLayer) for layer in cache.layers)
    assert all(layer.capacity == 32 for layer in cache.layers)


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded T=1"])
def test_rollouts_sample_the_same_tokens_with_either_cache(parts, sampled: bool) -> None:
    _, _, plain_ids = parts
    contexts = [context for context in family(plain_ids, 3) for _ in range(2)]
    concatenating = generator_for(parts, True, sampled=sampled)
    concatenating.reserve_cache = False
    reserved = generator_for(parts, True, sampled=sampled)
    assert reserved.reserve_cache
    before, before_count = play(concatenating, contexts, 3, plain_ids, seed=5 if sampled else None)
    after, after_count = play(reserved, contexts, 3, plain_ids, seed=5 if sampled else None)
    assert_same(before, after)
    assert before_count == after_count


def test_the_timing_counts_the_prefilled_positions_and_every_decode_step(parts) -> None:
    _, _, plain_ids = parts
    contexts = family(plain_ids, 4)
    generator = generator_for(parts, True)
    outputs, _ = play(generator, contexts, 2, plain_ids)
    timing = generator.timing
    assert timing.prefill_positions == generator.prefilled_tokens
    # per turn, a decode step feeds back each sampled token but the last (which ends the turn unfed)
    steps = sum(max(len(output.ids) for output in turn) - 1 for turn in outputs)
    assert timing.decode_steps == steps and timing.decode_positions <= steps * len(contexts)
    assert timing.generator_s >= timing.prefill_s + timing.decode_s > 0
