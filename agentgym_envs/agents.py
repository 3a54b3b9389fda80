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
#: The acknowledgement used when an env's reset info names none (AgentGym's usual one).
ACKNOWLEDGEMENT = "OK. I'll follow your instructions and try my best to solve the task."


def first_messages(info: dict[str, Any], observation: str, agentgym_order: bool = True) -> list[dict[str, str]]:
    """The conversation before the model's first response.

    In AgentGym's order (the default) the task instruction is a user turn, the assistant
    acknowledges it (``info["acknowledgement"]``, e.g. "Ok." for SearchQA and WebArena), then the
    first observation is a user turn: a model trained with AgentGym sees the same turns here, and
    the other way round. ``agentgym_order=False`` gives the merged layout (instruction and first
    observation in one user turn; ``merged_first_turn`` in ``agentgym_trl``'s rollout, collection
    and SFT); see docs/fidelity.md. An env without an instruction starts with the observation alone.
    """
    instruction = info.get("instruction")
    if not instruction:
        return [{"role": "user", "content": observation}]
    if not agentgym_order:
        return [{"role": "user", "content": first_user_message(instruction, observation)}]
    return [
        {"role": "user", "content": instruction},
        {"role": "assistant", "content": info.get("acknowledgement") or ACKNOWLEDGEMENT},
        {"role": "user", "content": observation},
    ]


def first_user_message(instruction: str | None, observation: str) -> str:
    """The instruction and the first observation merged into one user turn (the merged layout)."""
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
                on_step: Callable[[str, str, float, dict[str, Any]], None] | None = None,
                agentgym_order: bool = True) -> dict[str, Any]:
    """Play one episode; returns its item, return, success, score, turns and the conversation.

    ``messages`` is the episode as a chat model sees it: ``first_messages`` (by default
    instruction, acknowledgement, first observation; ``agentgym_order`` as there), then each action as an assistant turn and each
    observation as a user turn, up to the last action; the env's answer to that one is
    ``final_observation``. ``prompt_messages`` is how many leading messages are the opening (the
    prompt of the first action, never trained on).
    """
    observation, info = env.reset(seed=seed, options=options)
    split = str(info.get("split", ""))
    messages = first_messages(info, observation, agentgym_order)
    opening = len(messages)
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
        "turns": int(info.get("turn", (len(messages) - opening + 1) // 2)),
        "truncated": bool(truncated),
        "messages": messages,
        "prompt_messages": opening,
        "final_observation": observation,
    }
