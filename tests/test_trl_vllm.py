"""TRL's own vLLM integration as the rollout engine (vllm_engine='trl'), tested on the CPU where it can be:

* every ``vllm_*`` option applies to the engine that runs or is refused when the config is built;
* ``TRLVLLMGenerator`` drives a stand-in of TRL's ``VLLMGeneration`` (per-turn limits, stop ids, log-probs, sleep
  mode once per rollout), and, on two gloo ranks, keeps collective calls in step with equal counts;
* ``AgentGRPOTrainer`` trains with TRL building its (stand-in) ``VLLMGeneration`` from the config and syncing its
  weights before each rollout.

The stand-ins cover what a CPU cannot reach (tensor parallelism, sleep mode, collective calls over ranks); TRL's real
``VLLMGeneration`` on vLLM's CPU build is tests/test_trl_vllm_real.py's, on GPUs scripts/gpu_check.py's.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import agent_envs  # noqa: E402, F401  (registers the test envs)
from agent_envs import COUNTDOWN  # noqa: E402
from offline_run import run_offline  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer  # noqa: E402
from agentgym_trl import config as config_module  # noqa: E402
from agentgym_trl import engines  # noqa: E402
from agentgym_trl.engines import Sampling  # noqa: E402
from agentgym_trl.engines.trl_vllm import TRLVLLMGenerator  # noqa: E402
from agentgym_trl.engines.vllm_process import EngineOptions  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def make_config(tmp_path, **overrides) -> AgentGRPOConfig:
    settings = dict(output_dir=str(tmp_path / "run"), env_ids=[COUNTDOWN], max_turns=3, max_turn_tokens=12,
                    max_context_tokens=400, per_device_train_batch_size=8, num_generations=4, max_steps=1,
                    save_strategy="no", report_to="none", seed=0, use_cpu=True, dataloader_num_workers=0,
                    cpu_threads=1)
    settings.update(overrides)
    return AgentGRPOConfig(**settings)


@pytest.fixture
def vllm_importable(monkeypatch):
    """TRL's check for vllm in this environment answers yes (the trainer's CPU environment has no vllm)."""
    import importlib

    monkeypatch.setattr(importlib.import_module("trl.import_utils"), "is_vllm_available", lambda *a, **k: True)


# ---- options ------------------------------------------------------------------------------------------------
def test_every_vllm_option_has_a_declared_place() -> None:
    declared = engines.ANY_VLLM | engines.SERVER_ONLY | engines.COLOCATE_ONLY | engines.PROCESS_ONLY
    assert set(config_module.VLLM_OPTION_DEFAULTS) == declared, "a vllm_* field that no rule covers"


def test_auto_picks_trl_with_cuda_and_the_process_without() -> None:
    assert engines.engine_kind(True, "auto", cuda=True) == "vllm-trl"
    assert engines.engine_kind(True, "auto", cuda=False) == "vllm-process"
    assert engines.engine_kind(True, "trl", cuda=False) == "vllm-trl"
    assert engines.engine_kind(False, "trl", cuda=True) == "hf"
    with pytest.raises(ValueError, match="vllm_engine must be one of"):
        engines.engine_kind(True, "sglang", cuda=True)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"vllm_mode": "server"}, "vllm_mode applies only with use_vllm=True"),
    ({"vllm_tensor_parallel_size": 2}, "vllm_tensor_parallel_size applies only with use_vllm=True"),
    ({"use_vllm": True, "vllm_mode": "server"}, "vllm_mode is TRL's vLLM integration"),
    ({"use_vllm": True, "vllm_tensor_parallel_size": 2}, "vllm_tensor_parallel_size is TRL's"),
    ({"use_vllm": True, "vllm_enable_sleep_mode": True}, "vllm_enable_sleep_mode is TRL's"),
    ({"use_vllm": True, "vllm_structured_outputs_regex": "a+"}, "vllm_structured_outputs_regex is TRL's"),
    ({"use_vllm": True, "vllm_server_port": 9000}, "vllm_server_port is TRL's"),
    ({"use_vllm": True, "vllm_max_model_length": 100}, "must hold a whole episode"),
    ({"use_vllm": True, "vllm_mode": "grpc"}, "vllm_mode must be 'colocate' or 'server'"),
    ({"use_vllm": True, "vllm_engine": "trl"}, "has no vllm: install the GPU set"),
])
def test_options_that_would_be_ignored_are_refused(tmp_path, overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_config(tmp_path, **overrides)


def test_the_process_engine_takes_the_options_it_can_apply(tmp_path) -> None:
    config = make_config(tmp_path, use_vllm=True, vllm_max_model_length=512, vllm_model_impl="transformers",
                         vllm_gpu_memory_utilization=0.5)
    assert config.engine_kind == "vllm-process"
    options = EngineOptions.from_config(config, slots=8)
    assert (options.max_model_len, options.model_impl, options.gpu_memory_utilization) == (512, "transformers", 0.5)


@pytest.mark.usefixtures("vllm_importable")
@pytest.mark.parametrize(("overrides", "message"), [
    ({"vllm_server_port": 9000}, "vllm_server_port applies to vllm_mode='server'"),
    ({"vllm_mode": "server", "vllm_tensor_parallel_size": 2}, "is set on the server"),
    ({"vllm_mode": "server", "vllm_enable_sleep_mode": True}, "is set on the server"),
    ({"vllm_kv_cache_gb": 2.0}, "applies to the engine process"),
    ({"vllm_python": "/usr/bin/python3"}, "applies to the engine process"),
    ({"advantage_estimator": "gae", "value_head": "shared"}, "value_head lives on the policy"),
])
def test_trl_engine_refuses_what_it_cannot_apply(tmp_path, overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_config(tmp_path, use_vllm=True, vllm_engine="trl", **overrides)


BAD_VALUES = [
    ({"vllm_gpu_memory_utilization": 0.0}, "vllm_gpu_memory_utilization is the share"),
    ({"vllm_gpu_memory_utilization": 1.5}, "in \\(0, 1\\], got 1.5"),
    ({"vllm_max_model_length": -1}, "vllm_max_model_length must be a positive"),
    ({"vllm_model_impl": "sglang"}, "vllm_model_impl must be one of \\['vllm', 'transformers', 'auto'\\]"),
]


@pytest.mark.parametrize(("overrides", "message"), [
    *BAD_VALUES,
    ({"vllm_kv_cache_gb": 0.25}, "whole number of GiB, at least 1, got 0.25: vLLM's CPU backend reads"),
    ({"vllm_kv_cache_gb": 1.5}, "whole number of GiB"),
    ({"vllm_kv_cache_gb": 0.0}, "whole number of GiB"),
])
def test_the_process_engine_refuses_bad_values_when_the_config_is_built(tmp_path, overrides, message) -> None:
    """Issue 61 item 13: a value an engine cannot take fails here, not when an engine starts, and a cache size
    vLLM would round is refused rather than rounded."""
    with pytest.raises(ValueError, match=message):
        make_config(tmp_path, use_vllm=True, vllm_engine="process", **overrides)
    assert make_config(tmp_path, use_vllm=True, vllm_engine="process", vllm_kv_cache_gb=2).vllm_kv_cache_gb == 2


def test_the_engine_process_never_rounds_its_cache_size() -> None:
    from agentgym_trl.engines.vllm_process import EngineError, kv_cache_space

    assert kv_cache_space(3.0) == "3"
    with pytest.raises(EngineError, match="whole number of GiB"):
        kv_cache_space(0.25)


def test_an_evaluations_engine_cache_holds_its_whole_batch(tmp_path) -> None:
    """SmolLM2-135M's shape: 2 x 30 layers x 3 heads x 64 = 23,040 bytes a token in bf16 (twice in fp32)."""
    from agentgym_trl.engines.vllm_process import kv_cache_gb_for

    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 30, "num_attention_heads": 9,
                                                      "num_key_value_heads": 3, "hidden_size": 576}))
    assert kv_cache_gb_for(tmp_path, 64, 1536, "bfloat16") == 3  # 2.1 GiB: the Depth-1 experiments' evaluations
    assert kv_cache_gb_for(tmp_path, 64, 3072, "bfloat16") == 5  # 4.2 GiB: 20-turn Depth-2 episodes
    assert kv_cache_gb_for(tmp_path, 64, 3072, "float32", memory=64 * 2**30) == 9  # 8.4 GiB in fp32
    assert kv_cache_gb_for(tmp_path, 64, 3072, "float32", memory=24 * 2**30) == 6  # held to a quarter of the RAM
    assert kv_cache_gb_for(tmp_path, 1, 128, "bfloat16") == 1  # never below vLLM's smallest


def test_the_trainers_engine_cache_holds_its_rollout_batch_unless_set(tmp_path) -> None:
    """A training engine sized like an evaluation's: 16 depth-2 episodes of 3,072 tokens need 1.05 GiB, so 2;
    a size the config names wins; a model without config.json (a hub id) gets vLLM's smallest, 1 GiB. An engine
    with a larger cache serves a request for a smaller one (one engine for a job's evaluations and training)."""
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 30, "num_attention_heads": 9,
                                                      "num_key_value_heads": 3, "hidden_size": 576}))
    config = make_config(tmp_path, use_vllm=True, vllm_engine="process", max_context_tokens=3072,
                         vllm_dtype="bfloat16")
    assert config.vllm_kv_cache_gb is None
    assert EngineOptions.from_config(config, 16, tmp_path).kv_cache_gb == 2
    assert EngineOptions.from_config(config, 64, tmp_path).kv_cache_gb == 5
    assert EngineOptions.from_config(config, 16, "some/hub-id").kv_cache_gb == 1
    named = make_config(tmp_path, use_vllm=True, vllm_engine="process", max_context_tokens=3072, vllm_kv_cache_gb=3)
    assert EngineOptions.from_config(named, 64, tmp_path).kv_cache_gb == 3
    larger, smaller = EngineOptions.from_config(config, 64, tmp_path), EngineOptions.from_config(config, 16, tmp_path)
    assert larger.covers(smaller) and not smaller.covers(larger)


@pytest.mark.usefixtures("vllm_importable")
@pytest.mark.parametrize(("overrides", "message"), [
    *BAD_VALUES,
    ({"vllm_tensor_parallel_size": 0}, "vllm_tensor_parallel_size is the number of GPUs"),
    ({"vllm_mode": "server", "vllm_server_timeout": 0}, "vllm_server_timeout is the seconds"),
    ({"vllm_mode": "server", "vllm_server_timeout": -5.0}, "positive, got -5.0"),
])
def test_trl_engine_refuses_bad_values_when_the_config_is_built(tmp_path, overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_config(tmp_path, use_vllm=True, vllm_engine="trl", **overrides)


@pytest.mark.usefixtures("vllm_importable")
def test_colocate_engine_context_holds_a_whole_context_and_a_turn(tmp_path) -> None:
    config = make_config(tmp_path, use_vllm=True, vllm_engine="trl", vllm_tensor_parallel_size=2,
                         vllm_enable_sleep_mode=True)
    assert config.engine_kind == "vllm-trl"
    assert config.vllm_max_model_length == 400 + 12  # not the model's whole position range
    server = make_config(tmp_path, use_vllm=True, vllm_engine="trl", vllm_mode="server",
                         vllm_server_base_url="http://127.0.0.1:8000")
    assert server.vllm_max_model_length is None  # the server's own setting


# ---- the generator over a stand-in of TRL's VLLMGeneration ---------------------------------------------------
class StandIn:
    """What TRLVLLMGenerator touches of TRL's ``VLLMGeneration``, recording each call."""

    def __init__(self, mode: str = "colocate", sleep: bool = False, logprobs: bool = True):
        self.mode = mode
        self.max_completion_length = 4096
        self.temperature, self.top_p, self.top_k = 1.0, 1.0, 0
        self.generation_kwargs = {"user": 1}
        self.enable_sleep_mode = sleep
        self._llm_weights_sleeping = sleep
        self.with_logprobs = logprobs
        self.calls: list[dict] = []
        self.events: list[str] = []
        self.llm = self

    def wake_up(self, tags):
        self.events.append(f"wake {tags[0]}")

    def sleep(self, level):
        self.events.append(f"sleep {level}")

    def sync_weights(self):
        self.events.append("sync")
        self._llm_weights_sleeping = False

    def generate(self, prompts, images, num_generations):
        self.calls.append({"prompts": prompts, "max": self.max_completion_length, "temperature": self.temperature,
                           "kwargs": dict(self.generation_kwargs), "sleep": self.enable_sleep_mode,
                           "num_generations": num_generations})
        if self.enable_sleep_mode:
            self.events.append("per-call sleep")
        completions = [[5, 6, 7, 2, 8, 9][: self.max_completion_length] for _ in prompts]
        logprobs = [[[-1.0], [None], [-0.5], [-0.25], [-2.0], [-3.0]][: len(c)] for c in completions]
        return prompts, completions, (logprobs if self.with_logprobs else None), None


SAMPLING = Sampling(temperature=0.7, top_p=0.9)


def test_a_turn_samples_to_the_largest_limit_and_cuts_each_row_at_its_own() -> None:
    vllm = StandIn()
    generator = TRLVLLMGenerator(vllm, SAMPLING, stop_ids=[2], collective=False, filler_id=0)
    outputs = generator.generate([[1, 1], [1, 1, 1]], [2, 5])
    call = vllm.calls[0]
    assert call["max"] == 5 and call["num_generations"] == 1 and call["temperature"] == 0.7
    assert call["kwargs"] == {"user": 1, "stop_token_ids": [2]}, "the chat's end-of-turn ids stop a turn"
    assert (outputs[0].ids, outputs[0].stopped) == ([5, 6], False)
    assert (outputs[1].ids, outputs[1].stopped) == ([5, 6, 7, 2], True)
    assert outputs[1].logprobs[0] == -1.0 and math.isnan(outputs[1].logprobs[1]), "None becomes NaN"
    assert (vllm.max_completion_length, vllm.temperature, vllm.generation_kwargs) == (4096, 1.0, {"user": 1})
    assert generator.generate([], []) == [] and len(vllm.calls) == 1, "no call for nothing when not collective"


def test_greedy_and_missing_logprobs() -> None:
    vllm = StandIn(logprobs=False)
    output = TRLVLLMGenerator(vllm, SAMPLING.at(0), [2], collective=False, filler_id=0).generate([[1]], [3])[0]
    assert vllm.calls[0]["temperature"] == 0.0
    assert output.ids == [5, 6, 7] and all(math.isnan(value) for value in output.logprobs)


def test_sleep_mode_wakes_once_per_rollout_not_once_per_turn() -> None:
    vllm = StandIn(sleep=True)
    generator = TRLVLLMGenerator(vllm, SAMPLING, [2], collective=False, filler_id=0)
    for _ in range(2):  # two rollouts of three turns
        with generator.session():
            for _ in range(3):
                generator.generate([[1]], [4])
    assert all(not call["sleep"] for call in vllm.calls), "TRL's per-call sleep is off inside a rollout"
    assert vllm.events == ["sync", "wake kv_cache", "sleep 2"] * 2
    assert vllm.enable_sleep_mode and vllm._llm_weights_sleeping


def test_two_ranks_call_together_with_equal_counts_until_both_are_done(tmp_path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(ROOT / "tests" / "trl_vllm_ranks.py")]
    result = run_offline(command, ROOT, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RANK 0 OK 3 padded 0" in result.stdout and "RANK 1 OK 3 padded 8" in result.stdout, result.stdout


# ---- the trainer with TRL building its VLLMGeneration ----------------------------------------------------------
class FakeVLLMGeneration(StandIn):
    """Built by TRL's GRPOTrainer in place of ``VLLMGeneration`` (same keyword arguments); samples with the policy
    itself through HF ``generate``, so the training that follows is real."""

    built: list[FakeVLLMGeneration] = []

    def __init__(self, model, accelerator, processing_class, **options):
        super().__init__(mode=options["mode"], sleep=options["enable_sleep_mode"])
        self.model, self.options = model, options
        self.max_completion_length = options["max_completion_length"]
        self.temperature = options["temperature"]
        self.generation_kwargs = options["generation_kwargs"] or {}
        self.syncs = 0
        FakeVLLMGeneration.built.append(self)

    def sync_weights(self):
        super().sync_weights()
        self.syncs += 1

    def generate(self, prompts, images, num_generations):
        super().generate(prompts, images, num_generations)
        completions, logprobs = [], []
        stops = self.generation_kwargs["stop_token_ids"]
        with torch.no_grad():
            for prompt in prompts:
                out = self.model.generate(torch.tensor([prompt]), max_new_tokens=self.max_completion_length,
                                          do_sample=True, temperature=self.temperature, top_k=0, eos_token_id=stops,
                                          pad_token_id=stops[0], output_logits=True, return_dict_in_generate=True)
                ids = out.sequences[0, len(prompt):].tolist()
                scores = [torch.log_softmax(step[0] / self.temperature, -1)[t].item()
                          for step, t in zip(out.logits, ids)]
                completions.append(ids)
                logprobs.append([[value] for value in scores])
        return prompts, completions, logprobs, None


@pytest.mark.usefixtures("vllm_importable")
def test_the_trainer_trains_through_trls_vllm_generation(tmp_path, monkeypatch) -> None:
    import trl.trainer.grpo_trainer as grpo_module
    from datasets import Dataset

    monkeypatch.setattr(grpo_module, "VLLMGeneration", FakeVLLMGeneration)
    FakeVLLMGeneration.built.clear()
    tokenizer = tiny_tokenizer("chatml")
    config = make_config(tmp_path, use_vllm=True, vllm_engine="trl", max_steps=2, truncated_turn="step",
                         vllm_enable_sleep_mode=True, beta=0.0)
    rows = Dataset.from_list([{"env_id": COUNTDOWN, "item_id": i} for i in range(12)])
    trainer = AgentGRPOTrainer(tiny_model(tokenizer), args=config, train_dataset=rows, processing_class=tokenizer)
    assert isinstance(trainer.generator, TRLVLLMGenerator) and trainer.vllm_engine is None
    (vllm,) = FakeVLLMGeneration.built
    assert vllm.options["max_model_length"] == 400 + 12 and vllm.options["mode"] == "colocate"
    start = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    assert vllm.syncs >= 2, "TRL syncs the weights before each step's rollout"
    turns = max(len(trajectory.turn_ends) for trajectory in trainer.last_rollout.trajectories)
    assert turns >= 2 and len(vllm.calls) >= 2 * turns - 1, "one call per turn"
    assert all(len(call["prompts"]) <= 8 for call in vllm.calls)
    assert "per-call sleep" not in vllm.events and vllm.events.count("wake kv_cache") == 2
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and all(math.isfinite(h["loss"]) for h in logs)
    assert any(not torch.equal(start[n], p) for n, p in trainer.model.named_parameters()), "the weights moved"
    shutil.rmtree(tmp_path / "run", ignore_errors=True)


def test_a_server_too_short_for_a_turn_is_refused_at_start() -> None:
    from agentgym_trl.engines.trl_vllm import check_server_context

    class Client:
        def get_server_info(self):
            return {"model_config": {"max_model_len": 2048}}

    vllm = StandIn(mode="server")
    vllm.vllm_client = Client()
    check_server_context(vllm, 2048)
    with pytest.raises(ValueError, match="restart it with --max-model-len 4352"):
        check_server_context(vllm, 4096 + 256)
