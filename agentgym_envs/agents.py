"""Agents that need no model: the env's oracle, a random agent and a human at the terminal.

An agent is any callable ``(env, observation, info) -> response``; the model agents of
``agentgym_trl`` follow the same shape.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import gymnasium as gym
import numpy as np

Agent = Callable[[gym.Env, str, dict[str, Any]], str]

logger = logging.getLogger(__name__)

INSTRUCTION_SEPARATOR = "\n\n"


def first_user_message(instruction: str | None, observation: str) -> str:
    """The first user turn a model sees: the task instruction, a blank line, the first observation.

    Shared by the RL rollout and the expert-trajectory collector, so behaviour cloning trains on
    exactly the prompt the policy is later rolled out with.
    """
    return f"{instruction}{INSTRUCTION_SEPARATOR}{observation}" if instruction else observation


def close_quietly(env: gym.Env) -> None:
    """Close an env that is being dropped, e.g. after its engine crashed (closing it may raise too)."""
    try:
        env.close()
    except Exception:  # noqa: BLE001 (the env is dropped either way; the error is logged, not raised)
        logger.exception("closing %s raised", env)


def oracle_agent(env: gym.Env, observation: str, info: dict[str, Any]) -> str:
    """The env's expert (``oracle_action``): plans from what the env shows."""
    return env.unwrapped.oracle_action()


def make_random_agent(seed: int = 0) -> Agent:
    """A seeded agent that plays the env's plausible random actions."""
    rng = np.random.default_rng(seed)

    def random_agent(env: gym.Env, observation: str, info: dict[str, Any]) -> str:
        return env.unwrapped.random_action(rng)

    return random_agent


def human_agent(env: gym.Env, observation: str, info: dict[str, Any]) -> str:
    """Reads one response from the terminal (an empty line is sent as is)."""
    return input("\naction> ")


def make_agent(name: str, seed: int = 0) -> Agent:
    agents: dict[str, Callable[[], Agent]] = {
        "oracle": lambda: oracle_agent,
        "random": lambda: make_random_agent(seed),
        "human": lambda: human_agent,
    }
    if name not in agents:
        raise ValueError(f"unknown agent {name!r}; choose one of {sorted(agents)}")
    return agents[name]()


def run_episode(env: gym.Env, agent: Agent, options: dict[str, Any] | None = None, seed: int | None = None,
                on_step: Callable[[str, str, float, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Play one episode; returns its item, return, success, score, turns and the conversation.

    ``messages`` is the episode as a chat model sees it: the first user turn (instruction and first
    observation), then each action as an assistant turn and each observation as a user turn, up to
    the last action; the env's answer to that one is ``final_observation``.
    """
    observation, info = env.reset(seed=seed, options=options)
    split = str(info.get("split", ""))
    messages = [{"role": "user", "content": first_user_message(info.get("instruction"), observation)}]
    total = 0.0
    while True:
        action = agent(env, observation, info)
        messages.append({"role": "assistant", "content": action})
        observation, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        if on_step is not None:
            on_step(action, observation, reward, info)
        if terminated or truncated:
            break
        messages.append({"role": "user", "content": observation})
    return {
        "item_id": info.get("item_id"),
        "subtask": info.get("subtask"),
        "split": split,
        "return": total,
        "success": bool(info.get("success", False)),
        "score": info.get("score"),
        "turns": int(info.get("turn", len(messages) // 2)),
        "truncated": bool(truncated),
        "messages": messages,
        "final_observation": observation,
    }
