"""Batched multi-turn rollouts over registered Gymnasium text envs, token in / token out.

Every row names an env id and an item id. The rollout resets one env per row, then plays turns:
one batched generation over all still-active trajectories, the env steps of that turn run
concurrently in a thread pool (a slow env, such as a JVM, a browser or a remote server, does not
serialise the batch), and each observation is appended as a user turn with the model's own chat
template (see ``chat.py``). The result, per trajectory:

* ``prompt_ids`` (the opening: AgentGym's instruction / acknowledgement / first observation turns, or
  with ``merged_first_turn`` one user turn holding both; ending with the assistant header) and
  ``completion_ids`` (every later token: model turns and observations, concatenated as generated);
* ``env_mask``: 1 on tokens the model sampled, including each turn's end-of-turn token, 0 on
  observation / template tokens; ``logprobs`` aligned with ``completion_ids`` (0 where mask is 0);
* the outcome reward (sum of env rewards = final progress), success, turns used, valid-action
  count, why it stopped, and the time spent generating vs in envs.

Limits: ``max_turns`` (the curriculum's budget), ``max_turn_tokens`` per model turn and
``max_context_tokens`` for prompt + completion. A trajectory that hits a token limit ends cleanly:
its cut turn is closed with the template's end-of-turn token (a non-model token), so the completion
never ends mid-turn and TRL's whole-sequence truncation masking cannot silently drop the episode;
whether the cut turn itself is trained on is ``mask_truncated_turns``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym_envs.agents import close_quietly, first_messages
from agentgym_trl.chat import ChatEncoder
from agentgym_trl.generation import Generator

logger = logging.getLogger(__name__)

# Why a trajectory ended.
TERMINATED = "terminated"  # the env said the episode is over (success or failure)
ENV_TRUNCATED = "env_truncated"  # the env's own time limit
MAX_TURNS = "max_turns"  # the turn budget of the current curriculum stage ran out
TURN_TOKENS = "turn_tokens"  # a model turn hit max_turn_tokens
CONTEXT = "context"  # prompt + completion reached max_context_tokens
ENV_ERROR = "env_error"  # the env raised (engine crash); the episode keeps what it earned
TOKEN_LIMITS = (TURN_TOKENS, CONTEXT)


@dataclass
class Trajectory:
    """One episode's tokens, masks and outcome."""

    env_id: str
    item_id: int
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    turns: int = 0
    valid_actions: int = 0
    cut_turns: int = 0
    stop_reason: str | None = None
    template_fallbacks: int = 0
    rendered: str = ""
    opening: int = 1  # leading messages that are the prompt (instruction, acknowledgement, first observation)

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    @property
    def token_truncated(self) -> bool:
        """A token limit cut one of its turns or ended it (the episode may have played on after a cut turn)."""
        return self.cut_turns > 0 or self.stop_reason in TOKEN_LIMITS

    @property
    def responses(self) -> list[str]:
        """The model's turns (the assistant turns after the opening)."""
        return [m["content"] for m in self.messages[self.opening :] if m["role"] == "assistant"]

    @property
    def valid_action_rate(self) -> float:
        return self.valid_actions / self.turns if self.turns else 0.0

    def add(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None = None) -> None:
        self.completion_ids.extend(ids)
        self.env_mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def stats(self) -> dict[str, Any]:
        """A small picklable record for metrics (gathered across ranks)."""
        return {
            "env_id": self.env_id,
            "reward": self.reward,
            "success": float(self.success),
            "turns": self.turns,
            "valid_actions": self.valid_actions,
            "cut_turns": self.cut_turns,
            "token_truncated": self.token_truncated,
            "stop_reason": self.stop_reason,
            "model_tokens": sum(self.env_mask),
            "completion_tokens": len(self.completion_ids),
        }


@dataclass
class RolloutResult:
    trajectories: list[Trajectory]
    generation_s: float = 0.0
    env_s: float = 0.0
    total_s: float = 0.0
    turns_played: int = 0

    @property
    def outside_model_s(self) -> float:
        """Everything but generation: env steps, chat templates, tokenisation, Python."""
        return max(self.total_s - self.generation_s, 0.0)

    def to_trl(self) -> dict[str, list]:
        """The dict TRL's ``rollout_func`` contract asks for, plus per-trajectory outcome fields."""
        ts = self.trajectories
        return {
            "prompt_ids": [t.prompt_ids for t in ts],
            "completion_ids": [t.completion_ids for t in ts],
            "logprobs": [t.logprobs for t in ts],
            "env_mask": [t.env_mask for t in ts],
            "env_reward": [t.reward for t in ts],
            "env_success": [t.success for t in ts],
            "env_turns": [t.turns for t in ts],
            "env_stop_reason": [t.stop_reason for t in ts],
        }


class EnvPool:
    """Env instances kept per env id across rollouts, so a run makes each env a few times, not per episode.

    ``max_episode_steps`` overrides the registered ``TimeLimit`` (the task's evaluation cap), so the
    curriculum's budget, enforced by the rollout, is the limit that counts.
    """

    def __init__(self, max_episode_steps: int | None = None, **make_kwargs: Any):
        self.max_episode_steps = max_episode_steps
        self.make_kwargs = make_kwargs
        self._free: dict[str, list[gym.Env]] = defaultdict(list)
        self._lock = threading.Lock()

    def acquire(self, env_id: str) -> gym.Env:
        with self._lock:
            if self._free[env_id]:
                return self._free[env_id].pop()
        kwargs = dict(self.make_kwargs)
        if self.max_episode_steps is not None:
            kwargs["max_episode_steps"] = self.max_episode_steps
        return gym.make(env_id, **kwargs)

    def release(self, env_id: str, env: gym.Env) -> None:
        with self._lock:
            self._free[env_id].append(env)

    def discard(self, env: gym.Env) -> None:
        close_quietly(env)

    def close(self) -> None:
        with self._lock:
            envs = [env for envs in self._free.values() for env in envs]
            self._free.clear()
        for env in envs:
            self.discard(env)


def validate_rollout_output(output: Mapping[str, Sequence], expected: int) -> None:
    """Check the lengths TRL does not check (a wrong ``env_mask`` length silently misaligns the loss)."""
    for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask"):
        if len(output[key]) != expected:
            raise ValueError(f"rollout returned {len(output[key])} {key} for {expected} rows")
    for index, (ids, lps, mask) in enumerate(zip(output["completion_ids"], output["logprobs"], output["env_mask"])):
        if not (len(ids) == len(lps) == len(mask)):
            raise ValueError(
                f"trajectory {index}: {len(ids)} completion ids, {len(lps)} logprobs and {len(mask)} env_mask values"
            )
        if any(m not in (0, 1) for m in mask):
            raise ValueError(f"trajectory {index}: env_mask must hold only 0 and 1")
        if not output["prompt_ids"][index]:
            raise ValueError(f"trajectory {index}: empty prompt")


def run_rollout(
    rows: Sequence[Mapping[str, Any]],
    generator: Generator,
    encoder: ChatEncoder,
    env_pool: EnvPool,
    *,
    max_turns: int | Sequence[int],
    max_turn_tokens: int,
    max_context_tokens: int,
    executor: Executor | None = None,
    truncated_turn: str = "end",
    mask_truncated_turns: bool = False,
    merged_first_turn: bool = False,
) -> RolloutResult:
    """Play one episode per row (``{"env_id": ..., "item_id": ...}``) and return their tokens and outcomes.

    Each episode opens as in AgentGym (instruction, acknowledgement, first observation) or, with
    ``merged_first_turn``, with one user turn holding the instruction and the first observation.

    ``truncated_turn``: what happens after a turn cut by ``max_turn_tokens``: ``"end"`` ends the
    episode there; ``"step"`` sends the cut text to the env anyway (it usually answers that the
    action is invalid) and plays on.
    """
    if truncated_turn not in ("end", "step"):
        raise ValueError(f"truncated_turn must be 'end' or 'step', got {truncated_turn!r}")
    if max_turn_tokens < 1 or max_context_tokens <= max_turn_tokens:
        raise ValueError(
            f"need 1 <= max_turn_tokens < max_context_tokens, got {max_turn_tokens} and {max_context_tokens}"
        )
    budgets = [int(max_turns)] * len(rows) if isinstance(max_turns, int) else [int(b) for b in max_turns]
    if len(budgets) != len(rows) or any(b < 1 for b in budgets):
        raise ValueError(f"max_turns must be a positive int or one per row, got {max_turns!r}")
    own_executor = executor is None
    executor = executor or ThreadPoolExecutor(max_workers=min(32, max(1, len(rows))))
    started = time.perf_counter()
    result = RolloutResult([Trajectory(str(r["env_id"]), int(r["item_id"])) for r in rows])
    trajectories = result.trajectories
    envs: list[gym.Env | None] = [None] * len(rows)

    def timed(call):
        def run(*args):
            begin = time.perf_counter()
            try:
                return call(*args), None, time.perf_counter() - begin
            except Exception as error:  # an env must not take the batch down; its episode ends
                return None, error, time.perf_counter() - begin

        return run

    def reset(index: int):
        row = rows[index]
        env = env_pool.acquire(trajectories[index].env_id)
        envs[index] = env
        seed = int(row.get("seed", row["item_id"]))
        return env.reset(seed=seed, options={"item_id": int(row["item_id"])})

    def step(index: int, text: str):
        return envs[index].step(text)

    try:
        begin = time.perf_counter()
        resets = list(executor.map(timed(reset), range(len(rows))))
        result.env_s += time.perf_counter() - begin
        for index, ((observation_info, error, _), t) in enumerate(zip(resets, trajectories)):
            if error is not None:
                if envs[index] is not None:
                    env_pool.discard(envs[index])
                    envs[index] = None
                raise RuntimeError(f"reset of {t.env_id} item {t.item_id} failed: {error}") from error
            observation, info = observation_info
            t.messages = first_messages(info, observation, agentgym_order=not merged_first_turn)
            t.opening = len(t.messages)
            t.prompt_ids, t.rendered = encoder.start(t.messages)
            if len(t.prompt_ids) + 1 >= max_context_tokens:
                raise ValueError(
                    f"the first prompt of {t.env_id} item {t.item_id} has {len(t.prompt_ids)} tokens, which leaves no "
                    f"room under max_context_tokens={max_context_tokens}; raise max_context_tokens"
                )

        with generator.session():
            turn = 0
            while True:
                active = [i for i, t in enumerate(trajectories) if not t.done]
                if not generator.any_active(len(active)):
                    break
                turn += 1
                contexts = [trajectories[i].prompt_ids + trajectories[i].completion_ids for i in active]
                limits = [min(max_turn_tokens, max_context_tokens - 1 - len(c)) for c in contexts]
                begin = time.perf_counter()
                outputs = generator.generate(contexts, limits)
                result.generation_s += time.perf_counter() - begin
                result.turns_played = max(result.turns_played, turn)

                to_step: list[tuple[int, str]] = []
                for index, context, limit, out in zip(active, contexts, limits, outputs, strict=True):
                    t = trajectories[index]
                    t.turns += 1
                    t.add(out.ids, 1, out.logprobs)
                    text = encoder.decode(out.ids)
                    t.messages.append({"role": "assistant", "content": text})
                    if not out.stopped:
                        t.cut_turns += 1
                        if mask_truncated_turns:
                            del t.env_mask[-len(out.ids) :]
                            t.env_mask.extend([0] * len(out.ids))
                        hit_context = limit < max_turn_tokens
                        if hit_context or truncated_turn == "end":
                            t.stop_reason = CONTEXT if hit_context else TURN_TOKENS
                    if not out.ids or out.ids[-1] != encoder.closer_id:
                        t.add([encoder.closer_id], 0)  # close the turn like the template does
                    if not t.done:
                        to_step.append((index, text))

                begin = time.perf_counter()
                steps = list(executor.map(lambda pair: timed(step)(*pair), to_step))
                result.env_s += time.perf_counter() - begin
                for (index, _), (outcome, error, _) in zip(to_step, steps, strict=True):
                    t = trajectories[index]
                    if error is not None:
                        logger.warning(
                            "%s item %s raised during step; the episode ends: %r", t.env_id, t.item_id, error
                        )
                        t.stop_reason = ENV_ERROR
                        env_pool.discard(envs[index])
                        envs[index] = None
                        continue
                    observation, reward, terminated, truncated, info = outcome
                    t.reward += float(reward)
                    t.success = bool(info.get("success", t.success))
                    t.valid_actions += int(bool(info.get("valid_action", True)))
                    if terminated:
                        t.stop_reason = TERMINATED
                    elif truncated:
                        t.stop_reason = ENV_TRUNCATED
                    elif t.turns >= budgets[index]:
                        t.stop_reason = MAX_TURNS
                    else:
                        bridge, t.rendered, prefix_ok = encoder.observation_ids(t.messages, t.rendered, observation)
                        t.template_fallbacks += int(not prefix_ok)
                        # room for the observation plus at least one model token
                        if len(t.prompt_ids) + len(t.completion_ids) + len(bridge) + 1 >= max_context_tokens:
                            t.stop_reason = CONTEXT
                        else:
                            t.messages.append({"role": "user", "content": observation})
                            t.add(bridge, 0)
    finally:
        for index, env in enumerate(envs):
            if env is not None:
                env_pool.release(trajectories[index].env_id, env)
        if own_executor:
            executor.shutdown(wait=True)
    result.total_s = time.perf_counter() - started
    return result
