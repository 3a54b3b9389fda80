"""Episodes that start part-way through the oracle's solution (reverse curriculum from demonstrations, R³).

R³ (Xi et al. 2024, "Training Large Language Models for Reasoning through Reverse Curriculum Reinforcement
Learning") starts RL episodes from states of a demonstration, late states first, then earlier ones, so a
policy that cannot yet solve a task from its start gets reward from the end of it and learns the task back to
front. Here the demonstration is the env's oracle (``oracle_action()``, which every family with an expert has):
an ``EpisodeStart`` with ``prefix=k`` is reset, then the oracle's first ``k`` actions are played on the env
before the agent's first turn. The replayed turns are the conversation so far: each oracle response is an
assistant turn, each observation a user turn, all of it prompt (``Trajectory.prompt_messages``), so a model
agent renders them with its chat template like its own turns and they are never trained on.

Rules (what ``play_batch`` does with a start whose ``prefix`` is above 0):

* **At least one action remains.** A ``k`` that would replay the oracle's whole solution is clamped to its
  length minus one: the oracle is played once per (env id, item, seed, k) on an env of the episode's kind, and
  if it ends the episode at its ``j``-th action (``j <= k``), the start gets ``prefix = j - 1``. The answer is
  cached on the ``EnvPool``, so a group of G samples of one item probes once.
* **The replayed turns are not part of the turn budget.** The agent still gets ``max_turns`` turns after the
  prefix: the env is made with ``max_episode_steps = max_turns + prefix`` (its ``TimeLimit`` and the budget it
  is told), so nothing counts turns twice and an env that scores at its budget scores at the real end.
* **The outcome is the episode's.** Rewards the replayed steps earned are kept apart
  (``Trajectory.prefix_rewards``); ``Trajectory.reward`` (the return) includes them, so it is still the outcome
  of the whole episode. ``Trajectory.rewards`` / ``turns`` / ``valid`` cover the agent's turns
  only, so every per-turn reader (turn-level credit, metrics) sees the agent's own turns.
* **No oracle, no prefix.** An env whose ``oracle_action`` raises ``NotImplementedError`` plays from its start
  (prefix 0), with one warning per env id.

Replaying is deterministic: the same item and seed give the same episode bit for bit, and the oracle is a
function of the state, so a replayed prefix reaches the state that playing the oracle reaches
(``tests/test_oracle_prefix.py`` checks it for TextCraft and BabyAI).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym

logger = logging.getLogger(__name__)

_warned_no_oracle: set[str] = set()


def env_step_budget(max_turns: int, prefix: int = 0) -> int:
    """The one place the env's step budget is computed: the agent's turn budget plus the oracle actions replayed
    before its first turn, which the env steps too but the agent did not play. The loop makes each env with it
    (``EpisodeStart.env_steps``), the clamp probes on an env of that budget, the trainer keeps those envs."""
    return max_turns + prefix


def env_step_budgets(max_turns: int, prefix: int) -> set[int]:
    """Every step budget an episode of ``max_turns`` turns started after up to ``prefix`` oracle actions may be
    played at: the clamp may lower an item's prefix to any ``j <= prefix`` (``clamp_prefixes``)."""
    return {env_step_budget(max_turns, j) for j in range(prefix + 1)}


@dataclass(frozen=True)
class PrefixStep:
    """One replayed oracle turn: the response sent, and what the env answered."""

    action: str
    observation: str
    reward: float
    info: dict[str, Any]
    ended: bool  # the env terminated or truncated the episode at this step


def oracle_steps(env: gym.Env, k: int) -> list[PrefixStep]:
    """Play up to ``k`` oracle actions on a freshly reset env; stops early when the episode ends (the last step is
    then marked ``ended``)."""
    steps: list[PrefixStep] = []
    for _ in range(k):
        action = env.unwrapped.oracle_action()
        observation, reward, terminated, truncated, info = env.step(action)
        steps.append(PrefixStep(action, observation, float(reward), dict(info), bool(terminated or truncated)))
        if steps[-1].ended:
            break
    return steps


def replay_prefix(env: gym.Env, k: int) -> list[PrefixStep]:
    """The oracle's first ``k`` actions on a freshly reset env, as the episode's history.

    Raises:
        RuntimeError: the oracle ended the episode within ``k`` actions (the start was not clamped).
    """
    steps = oracle_steps(env, k)
    if len(steps) < k or (steps and steps[-1].ended):
        raise RuntimeError(f"the oracle ended the episode after {len(steps)} of the {k} actions of its prefix; "
                           "clamp the start first (clamp_prefixes)")
    return steps


def clamp_prefixes(starts: Sequence[Any], acquire: Callable[[str, int], gym.Env],
                   release: Callable[[str, int, gym.Env], None], cache: dict[tuple, int]) -> list[Any]:
    """The starts with every ``prefix`` clamped so that at least one action of the oracle's solution remains, and
    set to 0 for envs without an oracle.

    ``acquire(env_id, max_episode_steps)`` / ``release(env_id, max_episode_steps, env)``: the pool's. ``cache``
    holds the answer per (env id, item, reset seed, k).
    """
    clamped = []
    for start in starts:
        if start.prefix <= 0:
            clamped.append(start)
            continue
        key = (start.env_id, start.item_id, start.reset_seed, start.prefix)
        prefix = cache[key] if key in cache else _probe(start, acquire, release)
        if start.item_id is not None:  # a plain reset's item is the env's choice: not an answer to keep
            cache[key] = prefix
        clamped.append(replace(start, prefix=prefix) if prefix != start.prefix else start)
    return clamped


def _probe(start: Any, acquire: Callable[[str, int], gym.Env], release: Callable[[str, int, gym.Env], None]) -> int:
    """How many of the oracle's first ``start.prefix`` actions can be replayed with one action left."""
    steps_cap = env_step_budget(start.max_turns, start.prefix)
    env = acquire(start.env_id, steps_cap)
    try:
        options = None if start.item_id is None else {"item_id": int(start.item_id)}
        env.reset(seed=start.reset_seed, options=options)
        steps = oracle_steps(env, start.prefix)
    except NotImplementedError:  # the env has no oracle (before any step: the env is as reset)
        release(start.env_id, steps_cap, env)
        if start.env_id not in _warned_no_oracle:
            _warned_no_oracle.add(start.env_id)
            logger.warning("%s has no oracle: its episodes start from the beginning (oracle prefix 0)", start.env_id)
        return 0
    except Exception:
        env.close()
        raise
    release(start.env_id, steps_cap, env)
    if steps and steps[-1].ended:
        return len(steps) - 1
    return start.prefix
