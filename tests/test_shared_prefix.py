"""What a batch's rows share is prefilled once and changes nothing the generator samples.

``HFGenerator`` with ``share_prompt_prefill`` encodes, on a turn whose rows keep no states, the token prefix
common to a batch's items (a family's instruction and opening) once, and each context several rows share whole
(a GRPO group's prompt) once on top of it. These tests compare it token for token with the generator that
encodes every row whole, on a tiny random Qwen2 built in-process, and count the positions prefilled.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

import pytest
import torch
from transformers import GenerationConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl import HFGenerator  # noqa: E402
from agentgym_trl.engines.base import TurnOutput  # noqa: E402
from agentgym_trl.engines.hf import common_length, shared_prefixes  # noqa: E402

INSTRUCTION_TOKENS = 60
MAX_NEW_TOKENS = 8


def tiny_parts() -> tuple:
    """The tiny tokenizer and model, and the token ids a context may hold (no template tokens)."""
    tokenizer = tiny_tokenizer("chatml")
    model = tiny_model(tokenizer).eval()
    plain_ids = [i for i in range(len(tokenizer)) if i not in set(tokenizer.all_special_ids)]
    return tokenizer, model, plain_ids


@pytest.fixture(scope="module")
def parts():
    return tiny_parts()


def random_ids(plain_ids: Sequence[int], count: int, seed: int) -> list[int]:
    """``count`` ordinary token ids drawn with ``seed`` (the same ids for the same seed)."""
    draw = random.Random(seed)
    return [draw.choice(plain_ids) for _ in range(count)]


def family(plain_ids: Sequence[int], items: int, seed: int = 0) -> list[list[int]]:
    """Opening contexts of ``items`` items of one family: a shared instruction, then each item's own task (of
    different lengths, so rows are padded as in a real batch)."""
    instruction = random_ids(plain_ids, INSTRUCTION_TOKENS, seed)
    return [instruction + random_ids(plain_ids, 5 + 3 * item, seed * 1000 + item + 1) for item in range(items)]


def generator_for(parts, shared: bool, sampled: bool = False, sampling_dtype: torch.dtype | None = None
                  ) -> HFGenerator:
    tokenizer, model, _ = parts
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0) if sampled else GenerationConfig(
        do_sample=False)
    return HFGenerator(model, config, tokenizer.pad_token_id, [tokenizer.eos_token_id], share_prompt_prefill=shared,
                       progress=False, sampling_dtype=sampling_dtype)


def play(generator: HFGenerator, contexts: Sequence[Sequence[int]], turns: int, plain_ids: Sequence[int],
         seed: int | None = None) -> tuple[list[list[TurnOutput]], list[int]]:
    """``turns`` turns of every context in one session, each reply followed by a new 'observation' (the same
    tokens for a row and turn whatever the generator); per turn the outputs and the positions prefilled."""
    streams = [list(context) for context in contexts]
    outputs, prefilled = [], []
    with generator.session():
        if seed is not None:
            generator.reseed(seed)
        for turn in range(turns):
            before = generator.prefilled_tokens
            turn_outputs = generator.generate(streams, [MAX_NEW_TOKENS] * len(streams))
            prefilled.append(generator.prefilled_tokens - before)
            outputs.append(turn_outputs)
            for row, output in enumerate(turn_outputs):
                streams[row] += output.ids + random_ids(plain_ids, 4, 7919 * turn + row)
    return outputs, prefilled


def assert_same(plain: list[list[TurnOutput]], shared: list[list[TurnOutput]]) -> None:
    """Token for token the same turns, log-probs within float noise."""
    for plain_turn, shared_turn in zip(plain, shared, strict=True):
        for a, b in zip(plain_turn, shared_turn, strict=True):
            assert a.ids == b.ids and a.stopped == b.stopped
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def padded_width(contexts: Sequence[Sequence[int]], start: int = 0) -> int:
    """Positions a batched prefill runs for ``contexts`` past their first ``start`` tokens (padding included)."""
    return len(contexts) * max(len(context) - start for context in contexts)


def test_different_items_share_their_instruction_prefill(parts) -> None:
    _, _, plain_ids = parts
    contexts = family(plain_ids, 6)
    plain, plain_count = play(generator_for(parts, False), contexts, 1, plain_ids)
    shared, shared_count = play(generator_for(parts, True), contexts, 1, plain_ids)
    assert_same(plain, shared)
    assert plain_count == [padded_width(contexts)]
    # the instruction once, then each row from where it ends: (rows - 1) x instruction fewer positions
    assert shared_count == [INSTRUCTION_TOKENS + padded_width(contexts, INSTRUCTION_TOKENS)]
    assert plain_count[0] - shared_count[0] == (len(contexts) - 1) * INSTRUCTION_TOKENS


def test_groups_of_identical_prompts_share_them_on_top_of_the_instruction(parts) -> None:
    _, _, plain_ids = parts
    items = family(plain_ids, 3)
    contexts = [context for context in items for _ in range(3)]
    plain, plain_count = play(generator_for(parts, False), contexts, 1, plain_ids)
    shared, shared_count = play(generator_for(parts, True), contexts, 1, plain_ids)
    assert_same(plain, shared)
    assert plain_count == [padded_width(contexts)]
    # the instruction once, each item's rest but its last token once, then one token per row
    rests = sum(len(item) - 1 - INSTRUCTION_TOKENS for item in items)
    assert shared_count == [INSTRUCTION_TOKENS + rests + len(contexts)]


def test_a_single_items_group_shares_its_whole_prompt(parts) -> None:
    _, _, plain_ids = parts
    contexts = family(plain_ids, 1) * 4
    plain, plain_count = play(generator_for(parts, False), contexts, 1, plain_ids)
    shared, shared_count = play(generator_for(parts, True), contexts, 1, plain_ids)
    assert_same(plain, shared)
    assert shared_count == [len(contexts[0]) - 1 + len(contexts)]


def test_later_turns_continue_from_each_rows_own_states(parts) -> None:
    _, _, plain_ids = parts
    contexts = [context for context in family(plain_ids, 4) for _ in range(2)]
    plain, plain_count = play(generator_for(parts, False), contexts, 3, plain_ids)
    shared, shared_count = play(generator_for(parts, True), contexts, 3, plain_ids)
    assert_same(plain, shared)
    assert shared_count[0] < plain_count[0] - (len(contexts) - 1) * INSTRUCTION_TOKENS
    assert shared_count[1:] == plain_count[1:]  # only the turn with no kept states is shared


def test_a_batch_with_no_common_prefix_is_encoded_as_before(parts) -> None:
    _, _, plain_ids = parts
    contexts = [random_ids(plain_ids, 20 + row, 100 + row) for row in range(5)]
    contexts = [[plain_ids[row]] + context for row, context in enumerate(contexts)]  # a different first token each
    plain, plain_count = play(generator_for(parts, False), contexts, 2, plain_ids)
    shared, shared_count = play(generator_for(parts, True), contexts, 2, plain_ids)
    assert_same(plain, shared)
    assert shared_count == plain_count and shared_count[0] == padded_width(contexts)


def test_two_families_in_one_batch_each_share_their_own_instruction(parts) -> None:
    _, _, plain_ids = parts
    first, second = family(plain_ids, 3, seed=1), family(plain_ids, 3, seed=2)
    contexts = [row for pair in zip(first, second, strict=True) for row in pair]  # interleaved, as a mixed batch
    plain, plain_count = play(generator_for(parts, False), contexts, 1, plain_ids)
    shared, shared_count = play(generator_for(parts, True), contexts, 1, plain_ids)
    assert_same(plain, shared)
    assert plain_count[0] - shared_count[0] == 2 * (3 - 1) * INSTRUCTION_TOKENS


def test_sampling_with_a_seed_draws_the_same_tokens(parts) -> None:
    """Prefills draw no random numbers, so a seeded T=1 rollout samples the same tokens from the same logits (up
    to float noise, far from moving a draw across a boundary)."""
    _, _, plain_ids = parts
    contexts = [context for context in family(plain_ids, 3) for _ in range(2)]
    plain, _ = play(generator_for(parts, False, sampled=True), contexts, 3, plain_ids, seed=11)
    shared, _ = play(generator_for(parts, True, sampled=True), contexts, 3, plain_ids, seed=11)
    assert_same(plain, shared)
    assert len({tuple(output.ids) for output in shared[0]}) > 1  # it did sample: a group's rows differ


def test_in_bf16_the_shared_states_score_within_rounding(parts) -> None:
    """From a bf16 copy of the weights the same states computed in another shape (one row, or the padded batch)
    round apart, so a long sampled episode may part from the unshared one; its first token's scores stay within
    bf16's rounding."""
    _, _, plain_ids = parts
    contexts = [context for context in family(plain_ids, 4) for _ in range(2)]
    first: dict[bool, list[TurnOutput]] = {}
    for shared in (False, True):
        generator = generator_for(parts, shared, sampling_dtype=torch.bfloat16)
        with generator.session():
            first[shared] = generator.generate(contexts, [1] * len(contexts))
    plain = torch.tensor([output.logprobs[0] for output in first[False]])
    shared = torch.tensor([output.logprobs[0] for output in first[True]])
    assert [output.ids for output in first[False]] == [output.ids for output in first[True]]
    assert torch.allclose(plain, shared, atol=0.02), (plain, shared)


def test_a_short_common_prefix_is_not_worth_a_forward(parts) -> None:
    _, _, plain_ids = parts
    contexts = family(plain_ids, 4)
    generator = generator_for(parts, True)
    generator.min_shared_prefix = INSTRUCTION_TOKENS + 1
    _, counts = play(generator, contexts, 1, plain_ids)
    assert counts == [padded_width(contexts)]


def test_shared_prefixes_cuts_a_sorted_batch_into_families() -> None:
    instruction_a, instruction_b = [1] * 10, [2] * 10
    contexts = [instruction_a + [3, 4], instruction_b + [5], instruction_a + [3, 6, 7], instruction_b + [8, 9],
                [9, 9, 9]]
    assert sorted(shared_prefixes(contexts, 10)) == [tuple(instruction_a + [3]), tuple(instruction_b)]
    assert shared_prefixes(contexts, 12) == []
    assert shared_prefixes([[1, 2, 3]] * 3, 2) == [(1, 2)]  # a group alone: its whole prompt but the last token
    assert shared_prefixes([[1, 2, 3]], 1) == []
    assert common_length([1, 2], [1, 2]) == 1 and common_length([1, 2, 3], [1, 2, 4]) == 2


def test_a_rollout_reports_its_prefilled_positions(parts) -> None:
    """A rollout of different items of a real family (Countdown, AgentGym's opening) samples the same tokens with
    the sharing and reports fewer prefilled positions, as the trainer's ``agent/prefilled_tokens``."""
    import agent_envs  # noqa: F401  (registers the test envs)
    from agent_envs import COUNTDOWN

    from agentgym_trl import ChatEncoder, EnvPool, run_rollout
    from agentgym_trl.metrics import timing_metrics

    tokenizer, _, _ = parts
    encoder = ChatEncoder(tokenizer, [tokenizer.convert_tokens_to_ids("<|im_end|>")])
    rows = [{"env_id": COUNTDOWN, "item_id": item} for item in range(5)]
    results = {}
    for shared in (False, True):
        generator = generator_for(parts, shared)  # its stop id is the template's end of turn, as the encoder's
        assert generator.stop_ids == tuple(encoder.stop_ids)
        results[shared] = run_rollout(rows, generator, encoder, EnvPool(), max_turns=2, max_turn_tokens=8,
                                      max_context_tokens=600)
        assert results[shared].prefilled_tokens == generator.prefilled_tokens
    for plain, shared in zip(results[False].trajectories, results[True].trajectories, strict=True):
        assert plain.completion_ids == shared.completion_ids
    prompts = [t.prompt_ids for t in results[True].trajectories]
    common = min(common_length(prompts[0], other) for other in prompts[1:])
    assert common > 50  # the instruction and its acknowledgement
    assert results[False].prefilled_tokens - results[True].prefilled_tokens == (len(rows) - 1) * common
    metrics = timing_metrics(1.0, 0.5, 0.1, 0, results[True].prefilled_tokens)
    assert metrics["agent/prefilled_tokens"] == results[True].prefilled_tokens
