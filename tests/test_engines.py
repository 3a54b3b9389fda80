"""The engines wing (``agentgym_trl.engines``): one declaration per engine, one ``make_generator``, one vocabulary
of kinds, a ``Sampling`` record for every engine; adding one is a module and a registration (``toy_engine.py``)."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import agent_envs  # noqa: E402, F401  (registers the test envs)
import toy_engine  # noqa: E402
from agent_envs import COUNTDOWN  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer  # noqa: E402
from agentgym_trl.engines import ENGINES, Sampling, engine_named, make_generator  # noqa: E402
from agentgym_trl.engines.hf import HFGenerator  # noqa: E402


def test_the_built_in_engines_and_their_vocabulary() -> None:
    assert {"hf", "vllm-process", "vllm-trl"} <= set(ENGINES)
    with pytest.raises(ValueError, match="unknown engine 'sglang'; the engines are: hf, vllm-process, vllm-trl"):
        engine_named("sglang")


def test_sampling_is_one_record_for_every_engine() -> None:
    from transformers import GenerationConfig

    trl_like = GenerationConfig(do_sample=True, temperature=0.7, top_p=0.9, top_k=0, repetition_penalty=1.1)
    sampling = Sampling.of(trl_like)
    assert sampling == Sampling(temperature=0.7, top_p=0.9, top_k=0) and not sampling.greedy
    assert Sampling.of(GenerationConfig(do_sample=False)).greedy
    config = sampling.generation_config(trl_like)  # HF's form keeps the base's other settings
    assert (config.do_sample, config.temperature, config.top_p, config.top_k, config.repetition_penalty) == (
        True, 0.7, 0.9, 0, 1.1)
    greedy = sampling.at(0).generation_config(trl_like)
    assert (greedy.do_sample, greedy.temperature, greedy.top_k, greedy.top_p) == (False, None, None, None)
    assert sampling.at(1.0) == Sampling()  # whole distribution: top-k 0, never transformers' default of 50
    with pytest.raises(ValueError, match="bad sampling"):
        Sampling(top_p=0.0)


def test_make_generator_builds_the_hf_engine_from_what_it_needs() -> None:
    tokenizer = tiny_tokenizer("chatml")
    model = tiny_model(tokenizer)
    generator = make_generator("hf", Sampling(temperature=0), [tokenizer.eos_token_id], model=model,
                               generation_config=model.generation_config, pad_id=0, device="cpu", unused=1)
    assert isinstance(generator, HFGenerator) and not generator.generation_config.do_sample
    (output,) = generator.generate([[1, 2, 3]], [4])
    assert 1 <= len(output.ids) <= 4


def test_an_engine_added_outside_the_package_trains(tmp_path) -> None:
    """``tests/toy_engine.py`` registers an engine; the config names it and the trainer plays every turn with it."""
    config = AgentGRPOConfig(output_dir=str(tmp_path / "run"), env_ids=[COUNTDOWN], max_turns=2, max_turn_tokens=8,
                             max_context_tokens=400, per_device_train_batch_size=4, num_generations=4, max_steps=1,
                             save_strategy="no", report_to="none", use_cpu=True, cpu_threads=1, beta=0.0,
                             truncated_turn="step", engine=toy_engine.KIND)
    assert config.engine_kind == toy_engine.KIND and not config.use_vllm
    tokenizer = tiny_tokenizer("chatml")
    from datasets import Dataset

    rows = Dataset.from_list([{"env_id": COUNTDOWN, "item_id": i} for i in range(4)])
    trainer = AgentGRPOTrainer(tiny_model(tokenizer), args=config, train_dataset=rows, processing_class=tokenizer)
    assert isinstance(trainer.generator, toy_engine.ScriptedGenerator)
    trainer.train()
    assert trainer.generator.calls >= 2, "one call per turn"
    episode = trainer.last_rollout.trajectories[0]
    assert list(episode.completion_ids[:3]) == list(toy_engine.REPLY_IDS)
    assert all(math.isfinite(h["loss"]) for h in trainer.state.log_history if "loss" in h)


def test_an_engine_with_vllm_options_refuses_the_others(tmp_path) -> None:
    with pytest.raises(ValueError, match="samples without vLLM"):
        AgentGRPOConfig(output_dir=str(tmp_path), engine=toy_engine.KIND, use_vllm=True)
    with pytest.raises(ValueError, match="vllm_kv_cache_gb applies only with use_vllm=True"):
        AgentGRPOConfig(output_dir=str(tmp_path), engine="hf", vllm_kv_cache_gb=2.0)
    config = AgentGRPOConfig(output_dir=str(tmp_path), engine="vllm-process")
    assert (config.use_vllm, config.vllm_engine, config.engine_kind) == (True, "process", "vllm-process")
    with pytest.raises(ValueError, match="vllm_dtype must be one of"):
        AgentGRPOConfig(output_dir=str(tmp_path), engine="vllm-process", vllm_dtype="bf17")
