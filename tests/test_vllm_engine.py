"""The vLLM rollout engine, for real: a tiny random Qwen2 served by vLLM's CPU build in its own environment.

The engine must sample what the policy scores (fp32: log-probs equal to HF's), follow every weight sync,
and carry the trainer (GRPO, GAE with a shared value head, ReMax's greedy rollouts) and ``agentgym eval``.
Outside CI the tests skip when ``scripts/setup_vllm.sh`` has not been run; in CI a missing engine fails.
"""

from __future__ import annotations

import math
import os
import random
import signal

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import agent_envs  # noqa: E402, F401  (registers the test envs)
from agent_envs import COUNTDOWN  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl.engines import Sampling  # noqa: E402
from agentgym_trl.engines.vllm_process import VLLMGenerator  # noqa: E402
from agentgym_trl.engines.vllm_process import (  # noqa: E402
    EngineError,
    EngineOptions,
    VLLMEngine,
    engine_available,
    policy_weights,
    close_shared_engine,
    shared_engine,
    sync_policy,
)

needs_engine = pytest.mark.skipif(
    not engine_available() and not os.environ.get("CI"),
    reason="no vLLM environment (bash scripts/setup_vllm.sh); CI installs it and runs these",
)


def vllm_ready_model(seed: int = 0) -> torch.nn.Module:
    """The tiny chat model with a head size vLLM's CPU attention takes (64)."""
    return tiny_model(tiny_tokenizer("chatml"), seed=seed, hidden_size=128, num_attention_heads=2)


def hf_logprobs(model: torch.nn.Module, prompt: list[int], sampled: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(sampled)[:, None]).squeeze(1)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(engine, model, prompt): one fp32 engine for the module, serving the saved tiny model."""
    folder = tmp_path_factory.mktemp("tiny-vllm")
    tokenizer = tiny_tokenizer("chatml")
    model = vllm_ready_model()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    engine = VLLMEngine(folder, EngineOptions(dtype="float32", max_model_len=512, max_num_seqs=8))
    prompt = list(tokenizer.apply_chat_template([{"role": "user", "content": "craft 3 acacia wood"}],
                                                add_generation_prompt=True, tokenize=True, return_dict=False))
    yield engine, model, prompt
    engine.close()


def test_policy_weights_leave_out_the_value_head_and_lora_tensors() -> None:
    from peft import LoraConfig, get_peft_model

    from agentgym_trl.value_head import attach_value_head

    model = vllm_ready_model()
    plain = dict(model.state_dict())
    attach_value_head(model, "shared")
    assert any(name.startswith("agent_value_head") for name in model.state_dict())
    names = [name for name, _ in policy_weights(model)]
    assert sorted(names) == sorted(plain)

    lora = get_peft_model(vllm_ready_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    names = [name for name, _ in policy_weights(lora)]
    assert sorted(names) == sorted(plain), "LoRA's names must map back onto the base checkpoint's"


def test_a_logprob_the_engine_did_not_give_stays_nan_and_no_prompt_is_padded() -> None:
    calls = []

    class Engine:
        def generate(self, prompts, max_tokens, **kwargs):
            calls.append(len(prompts))
            return [{"ids": [5, 2], "logprobs": [-1.0, float("nan")], "finish": "stop"} for _ in prompts]


    generator = VLLMGenerator(Engine(), Sampling(temperature=0.7), stop_ids=[2])
    outputs = generator.generate([[1, 2, 3], [4]], [8, 8])
    assert calls == [2]
    assert outputs[0].ids == [5, 2] and outputs[0].stopped
    assert outputs[0].logprobs[0] == -1.0 and math.isnan(outputs[0].logprobs[1])


def test_a_missing_engine_environment_says_how_to_make_one(tmp_path) -> None:
    with pytest.raises(EngineError, match="setup_vllm.sh"):
        VLLMEngine(tmp_path, EngineOptions(python=str(tmp_path / "no-such-python")))


@needs_engine
def test_engine_samples_what_the_policy_scores_and_follows_each_weight_sync(served) -> None:
    engine, model, prompt = served
    stop = [tiny_tokenizer("chatml").eos_token_id]
    outputs = engine.generate([prompt] * 3, [20, 20, 4], temperature=1.0, stop_token_ids=stop, seeds=[1, 2, 3])
    assert len(outputs[2]["ids"]) <= 4
    for output in outputs:
        torch.testing.assert_close(torch.tensor(output["logprobs"]), hf_logprobs(model, prompt, output["ids"]),
                                   atol=1e-4, rtol=0)
    again = engine.generate([prompt] * 3, [20, 20, 4], temperature=1.0, stop_token_ids=stop, seeds=[1, 2, 3])
    assert [o["ids"] for o in again] == [o["ids"] for o in outputs], "same seeds, same samples"

    changed = vllm_ready_model(seed=1)  # other weights under the same names
    sync_policy(engine, changed)
    greedy = engine.generate([prompt], [10], temperature=0.0, stop_token_ids=stop)[0]["ids"]
    with torch.no_grad():
        expected = changed.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False,
                                    eos_token_id=stop[0], pad_token_id=0)[0, len(prompt):].tolist()
    assert greedy == expected
    sampled = engine.generate([prompt], [12], temperature=0.7, stop_token_ids=stop, seeds=[4])[0]
    with torch.no_grad():
        logits = changed(torch.tensor([prompt + sampled["ids"]])).logits[0, len(prompt) - 1 : -1].float() / 0.7
    expected_lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(sampled["ids"])[:, None]).squeeze(1)
    torch.testing.assert_close(torch.tensor(sampled["logprobs"]), expected_lp, atol=1e-4, rtol=0)
    sync_policy(engine, model)  # back to the module's model for the other tests
    assert engine.stats.weight_loads >= 2


@needs_engine
def test_a_full_batch_of_long_seeded_prompts_is_served(served) -> None:
    # 8 distinct prompts of 450 tokens exceed one scheduler step's token budget: with chunked prefill, vLLM's CPU
    # runner crashed rewinding a seeded request's generator ("CPU Generator does not use offset")
    engine, _, prompt = served
    long = (prompt * 60)[:450]
    prompts = [long[i:] + long[:i] for i in range(8)]
    stop = [tiny_tokenizer("chatml").eos_token_id]
    outputs = engine.generate(prompts, [4] * 8, temperature=1.0, stop_token_ids=stop, seeds=list(range(8)))
    assert all(1 <= len(output["ids"]) <= 4 for output in outputs)
    again = engine.generate(prompts, [4] * 8, temperature=1.0, stop_token_ids=stop, seeds=list(range(8)))
    assert [o["ids"] for o in again] == [o["ids"] for o in outputs]


@needs_engine
def test_items_sharing_a_long_opening_hit_the_prefix_cache(served) -> None:
    """The engine runs with vLLM's prefix cache: items whose prompts share a long instruction prefill it once, and
    each reply says how many prompt tokens the cache held (``EngineStats``, the generator's prefilled count)."""
    engine, _, _ = served
    draw = random.Random(59)  # an opening no other test of the module has cached
    instruction = [draw.randrange(10, 390) for _ in range(320)]
    items = [instruction + [draw.randrange(10, 390) for _ in range(8 + item)] for item in range(6)]
    generator = VLLMGenerator(engine, Sampling(temperature=0.0), stop_ids=[tiny_tokenizer("chatml").eos_token_id])
    before = (engine.stats.prompt_tokens, engine.stats.cached_prompt_tokens)
    first = generator.generate(items, [2] * len(items))
    prompt_tokens = sum(len(item) for item in items)
    cached = engine.stats.cached_prompt_tokens - before[1]
    assert engine.stats.prompt_tokens - before[0] == prompt_tokens
    # whole blocks of the instruction (128 tokens on CPU), for every item after the first, in the same batch
    assert (len(items) - 1) * len(instruction) // 2 <= cached <= (len(items) - 1) * len(instruction)
    assert generator.prefilled_tokens == prompt_tokens - cached
    # the next turn: each item's own conversation so far comes from the cache too
    again = generator.generate([item + turn.ids + [11, 12] for item, turn in zip(items, first, strict=True)],
                               [2] * len(items))
    assert len(again) == len(items)
    assert engine.stats.cached_prompt_tokens - before[1] - cached >= len(items) * len(instruction) // 2


@needs_engine
def test_a_killed_engine_raises_instead_of_hanging(tmp_path) -> None:
    folder = tmp_path / "model"
    vllm_ready_model().save_pretrained(folder)
    engine = VLLMEngine(folder, EngineOptions(dtype="float32", max_model_len=256, max_num_seqs=2))
    os.kill(engine.pid, signal.SIGKILL)
    with pytest.raises(EngineError, match="stopped answering"):
        engine.generate([[1, 2, 3]], [4], temperature=1.0, stop_token_ids=[2])
    engine.close()


@needs_engine
@pytest.mark.parametrize("estimator", ["grpo", "gae", "remax"])
def test_trainer_trains_with_the_engine_and_syncs_it_every_step(tmp_path, estimator, monkeypatch) -> None:
    from datasets import Dataset

    from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer
    from agentgym_trl.engines import vllm_process

    sized = []  # the cache is sized from the policy's own folder, for the engine's batch at the context limit
    monkeypatch.setattr(vllm_process, "kv_cache_gb_for",
                        lambda model, sequences, tokens, dtype: sized.append((sequences, tokens)) or 1)

    extra = {"gae": dict(value_head="shared"), "remax": {}, "grpo": {}}[estimator]
    args = AgentGRPOConfig(output_dir=str(tmp_path / "run"), env_ids=[COUNTDOWN], max_turns=3, max_turn_tokens=12,
                           max_context_tokens=400, per_device_train_batch_size=4, num_generations=2, max_steps=2,
                           save_strategy="no", report_to="none", seed=0, use_cpu=True, cpu_threads=1,
                           dataloader_num_workers=0, beta=0.0, use_vllm=True, advantage_estimator=estimator,
                           **extra)
    tokenizer = tiny_tokenizer("chatml")
    trainer = AgentGRPOTrainer(vllm_ready_model(), args=args, processing_class=tokenizer,
                               train_dataset=Dataset.from_list([{"env_id": COUNTDOWN, "item_id": i} for i in range(8)]))
    assert sized == [(trainer.vllm_engine.options.max_num_seqs, 400)], "vllm_kv_cache_gb unset: sized to the batch"
    loads = trainer.vllm_engine.stats.weight_loads
    trainer.train()
    logs = [log for log in trainer.state.log_history if "agent/max_turns" in log]
    assert len(logs) == 2
    assert trainer.vllm_engine.stats.weight_loads - loads == 2, "one sync before each step's rollout"
    assert all("vllm/weight_sync_s" in log for log in logs)
    # bf16 engine vs the trainer's scoring: TRL's importance correction sees (and reports) a small gap only
    gaps = [log["sampling/sampling_logp_difference/mean"] for log in logs]
    assert all(0 <= gap < 0.05 for gap in gaps), gaps
    for trajectory in trainer.last_rollout.trajectories:
        assert len(trajectory.logprobs) == len(trajectory.completion_ids)
    trainer.close_envs()


@needs_engine
def test_eval_with_the_engine_replays_alike_and_shares_the_trainers_engine(tmp_path) -> None:
    from agentgym_envs.evaluation.records import load_run
    from agentgym_trl.eval import evaluate_model

    folder = tmp_path / "model"
    vllm_ready_model().save_pretrained(folder)
    tiny_tokenizer("chatml").save_pretrained(folder)
    options = EngineOptions(max_model_len=1024, max_num_seqs=8)
    runs = []
    for name in ("first", "second"):
        evaluate_model(str(folder), ["AgentGym/TextCraft-Depth1-v0"], tmp_path / name, n_samples=2, limit=3,
                       temperature=1.0, max_turns=[2], max_turn_tokens=12, max_context_tokens=1024, progress=False,
                       engine="vllm", engine_options=options)
        runs.append(sorted((r["item_id"], r["sample"], tuple(r["actions"])) for r in load_run(tmp_path / name)))
    assert runs[0] == runs[1] and len(runs[0]) == 6
    engine = shared_engine(folder, options)
    assert engine is shared_engine(folder, EngineOptions(max_model_len=200, max_num_seqs=4)), "covered: reused"
    close_shared_engine()  # before another process trains with its own engine: nothing of this one is left
    from agentgym_trl.engines import vllm_process as vllm_engine

    assert not engine.running and vllm_engine._SHARED is None
