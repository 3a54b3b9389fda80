"""The batched multi-turn rollout: token stream, masks, logprobs, limits, concurrency, chat templates."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import pytest
import torch
from transformers import GenerationConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import agent_envs  # noqa: E402  (registers the test envs)
import agentgym_envs  # noqa: E402
from agent_envs import COUNTDOWN, CRASHING_ITEM, SLOW_COUNTDOWN  # noqa: E402
from agentgym_envs.agents import ACKNOWLEDGEMENT, first_user_message  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl import (  # noqa: E402
    ChatEncoder,
    ChatTemplateError,
    EnvPool,
    HFGenerator,
    TurnOutput,
    run_rollout,
    validate_rollout_output,
)
from agentgym_envs.core.episode import CONTEXT, ENV_ERROR, MAX_TURNS, TERMINATED, TURN_TOKENS  # noqa: E402

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"

# What each template writes between the model's end-of-turn token and the next assistant turn.
OBSERVATION_FORMAT = {
    "chatml": "\n<|im_start|>user\n{obs}<|im_end|>\n<|im_start|>assistant\n",
    "llama3": (
        "<|start_header_id|>user<|end_header_id|>\n\n{obs}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "zephyr": "\n<|user|>\n{obs}</s>\n<|assistant|>\n",
}


def make_parts(template: str = "chatml", seed: int = 0):
    tokenizer = tiny_tokenizer(template)
    model = tiny_model(tokenizer, seed=seed)
    encoder = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    generator = HFGenerator(model, config, tokenizer.pad_token_id, encoder.stop_ids)
    return tokenizer, model, encoder, generator


def rows(env_id: str, items) -> list[dict]:
    return [{"env_id": env_id, "item_id": int(i)} for i in items]


def segments(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) runs of the env mask."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


@pytest.mark.parametrize("template", ["chatml", "llama3", "zephyr"])
def test_token_stream_follows_the_models_own_chat_template(template: str) -> None:
    tokenizer, _, encoder, generator = make_parts(template)
    torch.manual_seed(1)
    result = run_rollout(
        rows(COUNTDOWN, range(9)),
        generator,
        encoder,
        EnvPool(),
        max_turns=3,
        max_turn_tokens=24,
        max_context_tokens=600,
    )
    validate_rollout_output(result.to_trl(), 9)
    multi_turn = 0
    for t in result.trajectories:
        assert t.prompt_messages == 3 and t.messages[:2] == [
            {"role": "user", "content": agent_envs.INSTRUCTION}, {"role": "assistant", "content": ACKNOWLEDGEMENT}]
        assert f"Item {t.item_id}:" in t.messages[2]["content"]
        expected_prompt = tokenizer.encode(
            tokenizer.apply_chat_template(t.messages[:3], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )
        assert t.prompt_ids == expected_prompt
        assert t.actions == [m["content"] for m in t.messages[3::2]]
        observations = [m["content"] for m in t.messages[4::2]]
        model_turns = 0
        for value, start, end in segments(t.env_mask):
            piece = t.completion_ids[start:end]
            if value == 1:
                model_turns += 1
                continue
            # a 0-run is an optional closer for a cut turn, then the observation in the template's own format
            if piece[0] == encoder.closer_id and t.completion_ids[start - 1] != encoder.closer_id:
                piece = piece[1:]
            if piece:
                text = tokenizer.decode(piece, skip_special_tokens=False)
                obs = observations.pop(0)
                assert text == OBSERVATION_FORMAT[template].format(obs=obs.strip() if template == "llama3" else obs)
        assert not observations and model_turns == t.turns
        # the completion always ends on the end-of-turn token, even when the last turn was cut
        assert t.completion_ids[-1] == encoder.closer_id
        multi_turn += t.turns > 1
    assert multi_turn >= 2
    assert sum(t.template_fallbacks for t in result.trajectories) == 0


@pytest.mark.parametrize("merged", [False, True])
def test_episodes_open_as_agentgym_does(merged: bool) -> None:
    """AgentGym's three opening turns by default; one merged user turn only when asked. Either is all prompt."""
    tokenizer, _, encoder, generator = make_parts()
    items = agentgym_envs.get_task(TEXTCRAFT).split("train")[:2]
    result = run_rollout(rows(TEXTCRAFT, items), generator, encoder, EnvPool(), max_turns=2, max_turn_tokens=8,
                         max_context_tokens=2048, merged_first_turn=merged)
    env = gym.make(TEXTCRAFT)
    for t in result.trajectories:
        observation, info = env.reset(seed=t.item_id, options={"item_id": t.item_id})
        if merged:
            opening = [{"role": "user", "content": first_user_message(info["instruction"], observation)}]
        else:
            opening = [{"role": "user", "content": info["instruction"]},
                       {"role": "assistant", "content": info.get("acknowledgement") or ACKNOWLEDGEMENT},
                       {"role": "user", "content": observation}]
        assert t.prompt_messages == len(opening) and t.messages[: t.prompt_messages] == opening
        assert t.prompt_ids == encoder.start(opening)[0]  # the acknowledgement is prompt: no loss, no sampling
        assert len(t.actions) == t.turns
    env.close()


def test_env_mask_and_logprobs_match_the_model() -> None:
    tokenizer, model, encoder, generator = make_parts()
    torch.manual_seed(2)
    result = run_rollout(
        rows(COUNTDOWN, range(6)),
        generator,
        encoder,
        EnvPool(),
        max_turns=3,
        max_turn_tokens=16,
        max_context_tokens=400,
    )
    for t in result.trajectories:
        assert len(t.completion_ids) == len(t.env_mask) == len(t.logprobs)
        ids = torch.tensor([t.prompt_ids + t.completion_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(t.prompt_ids) - 1 : -1]
        scored = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(t.completion_ids)[:, None])[:, 0]
        mask = torch.tensor(t.env_mask, dtype=torch.bool)
        logprobs = torch.tensor(t.logprobs)
        assert torch.allclose(logprobs[mask], scored[mask], atol=2e-3), (logprobs[mask], scored[mask])
        assert torch.all(logprobs[~mask] == 0)
        # every model turn ends with the end-of-turn token inside the model's part of the mask, unless it was cut
        for value, start, end in segments(t.env_mask):
            if value == 1 and t.completion_ids[end - 1] != encoder.closer_id:
                assert t.completion_ids[end] == encoder.closer_id and t.env_mask[end] == 0


def test_prefix_cache_feeds_only_new_tokens_and_changes_nothing() -> None:
    tokenizer, model, encoder, _ = make_parts()
    greedy = GenerationConfig(do_sample=False)
    results, fed = {}, {}
    for cached in (False, True):
        generator = HFGenerator(model, greedy, tokenizer.pad_token_id, encoder.stop_ids, prefix_cache=cached)
        seen: list[int] = []
        hook = model.register_forward_pre_hook(
            lambda module, args, kwargs: seen.append(kwargs["input_ids"].numel()), with_kwargs=True
        )
        try:
            results[cached] = run_rollout(rows(COUNTDOWN, range(6)), generator, encoder, EnvPool(), max_turns=4,
                                          max_turn_tokens=16, max_context_tokens=600)
        finally:
            hook.remove()
        fed[cached] = sum(seen)
    assert max(t.turns for t in results[True].trajectories) >= 3
    for plain, cached in zip(results[False].trajectories, results[True].trajectories, strict=True):
        assert plain.completion_ids == cached.completion_ids and plain.env_mask == cached.env_mask
        assert torch.allclose(torch.tensor(plain.logprobs), torch.tensor(cached.logprobs), atol=1e-4)
    assert fed[True] < 0.7 * fed[False], fed  # later turns encode only the reply and the new observation


def test_progress_bar_per_turn_shows_the_rollout_and_changes_nothing(capsys) -> None:
    """A rollout's turns show as bars (turn, episodes, decode steps with an ETA); the tokens stay the same."""
    tokenizer, model, encoder, _ = make_parts()
    greedy = GenerationConfig(do_sample=False)
    results = {}
    for progress in (False, True):
        generator = HFGenerator(model, greedy, tokenizer.pad_token_id, encoder.stop_ids, progress=progress)
        capsys.readouterr()
        results[progress] = run_rollout(rows(COUNTDOWN, range(4)), generator, encoder, EnvPool(), max_turns=3,
                                        max_turn_tokens=16, max_context_tokens=600)
        shown = capsys.readouterr().err
        if progress:
            turns = max(t.turns for t in results[True].trajectories)
            assert turns >= 2 and "rollout turn 1: 4 episodes" in shown and f"rollout turn {turns}:" in shown
            assert "/16 [" in shown and "tok" in shown  # decode steps out of max_turn_tokens, with tqdm's timing
        else:
            assert "rollout turn" not in shown
    for quiet, shown in zip(results[False].trajectories, results[True].trajectories, strict=True):
        assert quiet.completion_ids == shown.completion_ids and quiet.logprobs == shown.logprobs


def test_a_generator_without_logprobs_keeps_no_logits_and_samples_the_same() -> None:
    """``logprobs=False`` (evaluations): the same tokens, zero log-probs, and ``generate`` asked for no logits."""
    tokenizer, model, encoder, _ = make_parts()
    greedy = GenerationConfig(do_sample=False)
    results, asked = {}, {}
    for wanted in (True, False):
        generator = HFGenerator(model, greedy, tokenizer.pad_token_id, encoder.stop_ids, logprobs=wanted)
        asked[wanted] = generator.generation_config.output_logits
        results[wanted] = run_rollout(rows(COUNTDOWN, range(3)), generator, encoder, EnvPool(), max_turns=2,
                                      max_turn_tokens=16, max_context_tokens=600)
    assert asked == {True: True, False: False}
    for full, bare in zip(results[True].trajectories, results[False].trajectories, strict=True):
        assert full.completion_ids == bare.completion_ids and any(full.logprobs)
        assert not any(bare.logprobs)


def test_prefix_cache_turns_itself_off_for_a_cache_it_cannot_slice() -> None:
    tokenizer, model, encoder, _ = make_parts()
    generator = HFGenerator(model, GenerationConfig(do_sample=False), tokenizer.pad_token_id, encoder.stop_ids)
    generator._keep_prefixes(object(), [[5, 6]], [TurnOutput([7], [0.0], True)], [0], [[5, 6]], 0, 2)
    assert generator.prefix_cache is False and generator._prefixes == []


def test_turn_budget_limits_turns() -> None:
    _, _, encoder, generator = make_parts()
    items = [i for i in range(30) if i % 3 == 2]  # these need 3 turns
    one = run_rollout(
        rows(COUNTDOWN, items), generator, encoder, EnvPool(), max_turns=1, max_turn_tokens=64, max_context_tokens=900
    )
    assert all(t.turns == 1 for t in one.trajectories)
    assert {t.stop_reason for t in one.trajectories} <= {MAX_TURNS, TURN_TOKENS}
    assert all(not t.success and t.reward == 0 for t in one.trajectories)
    three = run_rollout(
        rows(COUNTDOWN, items),
        generator,
        encoder,
        EnvPool(),
        max_turns=3,
        max_turn_tokens=64,
        max_context_tokens=900,
        truncated_turn="step",
    )
    assert all(t.turns == 3 and t.stop_reason == TERMINATED for t in three.trajectories)
    assert {t.reward for t in three.trajectories} <= {0.0, 1.0}
    assert all(t.reward == float(t.success) for t in three.trajectories)


def test_per_turn_token_limit_ends_cleanly_and_policies() -> None:
    _, _, encoder, generator = make_parts()
    items = [i for i in range(40) if i % 3 == 2]
    torch.manual_seed(3)
    ended = run_rollout(
        rows(COUNTDOWN, items), generator, encoder, EnvPool(), max_turns=3, max_turn_tokens=3, max_context_tokens=400
    )
    cut = [t for t in ended.trajectories if t.stop_reason == TURN_TOKENS]
    assert cut, "with 3 tokens per turn some turns must be cut"
    for t in cut:
        last_turn = [s for s in segments(t.env_mask) if s[0] == 1][-1]
        assert last_turn[2] - last_turn[1] == 3  # the cut turn keeps its 3 sampled tokens in the loss
        assert t.completion_ids[-1] == encoder.closer_id and t.env_mask[-1] == 0  # closed by a non-model token
    torch.manual_seed(3)
    masked = run_rollout(
        rows(COUNTDOWN, items),
        generator,
        encoder,
        EnvPool(),
        max_turns=3,
        max_turn_tokens=3,
        max_context_tokens=400,
        mask_truncated_turns=True,
    )
    for t in masked.trajectories:
        if t.stop_reason == TURN_TOKENS:
            runs = segments(t.env_mask)
            assert runs[-1][0] == 0 and runs[-1][2] - runs[-1][1] >= 4  # the cut turn left the loss ...
            assert t.turns == 1 or any(v == 1 for v, _, _ in runs)  # ... earlier turns did not
    stepped = run_rollout(
        rows(COUNTDOWN, items),
        generator,
        encoder,
        EnvPool(),
        max_turns=3,
        max_turn_tokens=3,
        max_context_tokens=400,
        truncated_turn="step",
    )
    assert all(t.turns == 3 and t.stop_reason == TERMINATED for t in stepped.trajectories)
    # the episodes played on, but the cut turns are still counted (they drive the truncation warning)
    assert sum(t.cut_turns for t in stepped.trajectories) > 0
    assert all(t.token_truncated == (t.cut_turns > 0) for t in stepped.trajectories)
    for t in stepped.trajectories:  # which turns were cut reaches the record (the viewer marks them)
        assert len(t.cut) == t.cut_turns and all(1 <= turn <= t.turns for turn in t.cut)
        assert t.to_record().get("cut", []) == t.cut


def test_context_limit_ends_cleanly() -> None:
    _, _, encoder, generator = make_parts()
    limit = 180  # the opening (instruction, acknowledgement, observation) takes ~145
    result = run_rollout(
        rows(COUNTDOWN, [2, 5, 8, 11]),
        generator,
        encoder,
        EnvPool(),
        max_turns=3,
        max_turn_tokens=20,
        max_context_tokens=limit,
        truncated_turn="step",
    )
    for t in result.trajectories:
        assert len(t.prompt_ids) + len(t.completion_ids) <= limit
        assert t.completion_ids[-1] == encoder.closer_id
    assert any(t.stop_reason == CONTEXT for t in result.trajectories)
    with pytest.raises(ValueError, match="max_context_tokens"):
        run_rollout(
            rows(COUNTDOWN, [0]), generator, encoder, EnvPool(), max_turns=3, max_turn_tokens=5, max_context_tokens=20
        )


def test_slow_env_steps_run_concurrently() -> None:
    _, _, encoder, generator = make_parts()
    items = [i for i in range(24) if i % 3 == 1][:8]  # two steps each
    start = time.perf_counter()
    result = run_rollout(
        rows(SLOW_COUNTDOWN, items),
        generator,
        encoder,
        EnvPool(),
        max_turns=2,
        max_turn_tokens=8,
        max_context_tokens=300,
        truncated_turn="step",
    )
    elapsed = time.perf_counter() - start
    serial = 8 * 2 * 0.3
    assert all(t.turns == 2 for t in result.trajectories)
    assert result.env_s < serial / 3 and elapsed < serial / 2, (result.env_s, elapsed)


def test_crashing_env_ends_only_its_episode() -> None:
    _, _, encoder, generator = make_parts()
    pool = EnvPool()
    result = run_rollout(
        rows(COUNTDOWN, [CRASHING_ITEM, 1, 2]),
        generator,
        encoder,
        pool,
        max_turns=3,
        max_turn_tokens=8,
        max_context_tokens=300,
        truncated_turn="step",
    )
    reasons = [t.stop_reason for t in result.trajectories]
    assert reasons[0] == ENV_ERROR and reasons[1:] == [TERMINATED, TERMINATED]
    pool.close()


def test_textcraft_rollout_reuses_envs_from_the_pool() -> None:
    _, _, encoder, generator = make_parts()
    items = agentgym_envs.get_task(TEXTCRAFT).split("train")[:4]
    pool = EnvPool()
    result = run_rollout(
        rows(TEXTCRAFT, items), generator, encoder, pool, max_turns=3, max_turn_tokens=16, max_context_tokens=2048
    )
    for t in result.trajectories:
        instruction, acknowledgement, observation = t.messages[: t.prompt_messages]
        assert "crafting commands" in instruction["content"] and acknowledgement["role"] == "assistant"
        assert "Crafting commands:" in observation["content"] and "Goal: craft" in observation["content"]
        assert 1 <= t.turns <= 3 and 0 <= t.valid_actions <= t.turns
    made = list(pool._free[(TEXTCRAFT, 3)])
    run_rollout(
        rows(TEXTCRAFT, items), generator, encoder, pool, max_turns=3, max_turn_tokens=8, max_context_tokens=2048
    )
    assert len(made) == 4 and sorted(map(id, pool._free[(TEXTCRAFT, 3)])) == sorted(map(id, made))  # the same envs
    # the budget is each env's TimeLimit: another budget plays on envs of its own, the episode ends on it
    result = run_rollout(
        rows(TEXTCRAFT, items), generator, encoder, pool, max_turns=1, max_turn_tokens=8, max_context_tokens=2048
    )
    free = pool._free[(TEXTCRAFT, 1)]
    assert len(free) == 4 and all(env.spec.max_episode_steps == 1 for env in free)
    assert all(t.turns == 1 and t.stop_reason in (MAX_TURNS, TERMINATED, "turn_tokens") for t in result.trajectories)
    pool.drop_other_budgets({1})
    assert (TEXTCRAFT, 3) not in pool._free
    pool.close()


def test_template_without_end_of_turn_token_is_rejected() -> None:
    tokenizer = tiny_tokenizer("chatml")
    broken = tokenizer.__class__(
        tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    broken.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    with pytest.raises(ChatTemplateError, match="end-of-turn"):
        ChatEncoder(broken, [broken.eos_token_id])
    broken.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        ChatEncoder(broken)


def test_template_that_rewrites_history_falls_back_explicitly() -> None:
    tokenizer, _, _, generator = make_parts()
    rewriting = tokenizer.__class__(
        tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    # abbreviates earlier assistant turns (as templates that drop past reasoning do): history changes on re-render
    rewriting.chat_template = (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['role'] == 'assistant' and not loop.last %}{{ message['content'][:3] }}"
        "{% else %}{{ message['content'] }}{% endif %}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    encoder = ChatEncoder(rewriting, [rewriting.eos_token_id])
    result = run_rollout(
        rows(COUNTDOWN, [2, 5, 8]),
        generator,
        encoder,
        EnvPool(),
        max_turns=3,
        max_turn_tokens=8,
        max_context_tokens=400,
        truncated_turn="step",
    )
    assert 0 < encoder.fallbacks <= sum(t.turns - 1 for t in result.trajectories)
    for t in result.trajectories:
        text = rewriting.decode(t.completion_ids, skip_special_tokens=False)
        assert text.count("<|im_start|>user\nTick") == t.turns - 1



def test_bf16_sampling_copy_is_made_without_a_second_fp32_model() -> None:
    import copy

    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = tiny_tokenizer("chatml")
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config)
    model.lm_head.weight.grad = torch.ones_like(model.lm_head.weight)
    generator = HFGenerator(model, GenerationConfig(do_sample=False), tokenizer.pad_token_id, [tokenizer.eos_token_id],
                            sampling_dtype=torch.bfloat16)
    copied = []  # floating-point tensors deep-copied at full precision (the fp32 model copy this avoids)
    originals = {cls: cls.__deepcopy__ for cls in (torch.Tensor, torch.nn.Parameter)}

    def spy(cls):
        def deepcopy(tensor, memo):
            if tensor.is_floating_point():
                copied.append(tensor.dtype)
            return originals[cls](tensor, memo)
        return deepcopy

    for cls in originals:
        cls.__deepcopy__ = spy(cls)
    try:
        with generator.session():
            sampler = generator._sampling_copy
    finally:
        for cls, method in originals.items():
            cls.__deepcopy__ = method
    expected = copy.deepcopy(model).to(torch.bfloat16)
    assert copied == []  # every floating-point tensor went straight to bf16
    assert sampler.state_dict().keys() == expected.state_dict().keys()
    assert all(torch.equal(sampler.state_dict()[key], value) and value.dtype == torch.bfloat16
               for key, value in expected.state_dict().items())
    assert sampler.lm_head.weight is sampler.model.embed_tokens.weight  # tied weights stay one tensor
    assert sampler.lm_head.weight.grad is None and model.lm_head.weight.dtype == torch.float32
