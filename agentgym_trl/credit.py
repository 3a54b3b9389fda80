"""From episodes to the per-turn data the estimators take (``estimators.py``, ``advantages.py``).

The trainer gathers one small ``EpisodeTurns`` per episode from every process (per-turn rewards and
a hash of the state each turn answered: no text, no tokens) and lays the whole batch out as padded
turn tables here; the estimators turn those into advantages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentgym_envs.core.episode import Trajectory


@dataclass(frozen=True)
class EpisodeTurns:
    """One episode's per-turn rewards (from the env, before extra reward functions) and state hashes."""

    rewards: tuple[float, ...]
    states: tuple[int, ...]


def state_hash(text: str) -> int:
    """A 63-bit id of an observation text: equal texts, equal ids (GiGPO's anchor states)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


def answered_observations(t: Trajectory) -> list[str]:
    """The observation each turn answered: the message before each of the agent's responses."""
    messages = t.messages
    return [messages[i - 1]["content"] for i in range(max(t.prompt_messages, 1), len(messages))
            if messages[i]["role"] == "assistant"]


def turn_rewards_of(t: Trajectory, turn_reward: str, invalid_action_penalty: float = 0.0) -> list[float]:
    """Per-turn rewards of one episode: ``outcome`` (zeros; the trainer adds the outcome to the last turn),
    ``env`` (the env's step rewards), ``score_delta`` (the change of the native score), minus the penalty
    of invalid turns. A turn the env never answered (the episode ended on it) earns 0."""
    turns = t.turns
    stepped = min(len(t.rewards), turns)
    if turn_reward == "outcome":
        rewards = [0.0] * turns
    elif turn_reward == "env":
        rewards = [float(r) for r in t.rewards[:stepped]] + [0.0] * (turns - stepped)
    elif turn_reward == "score_delta":
        scores = [0.0, *t.scores[:stepped]]
        rewards = [scores[k + 1] - scores[k] for k in range(stepped)] + [0.0] * (turns - stepped)
    else:
        raise ValueError(f"unknown turn_reward {turn_reward!r}")
    for k, valid in enumerate(t.valid[:stepped]):
        rewards[k] -= 0.0 if valid else invalid_action_penalty
    return rewards


def episode_turns(t: Trajectory, turn_reward: str, invalid_action_penalty: float = 0.0) -> EpisodeTurns:
    """One episode's ``EpisodeTurns``: what the turn-level estimators need of it, small enough to gather from
    every process (no text, no tokens).

    Args:
        t: the played trajectory.
        turn_reward: ``outcome``, ``env`` or ``score_delta`` (see ``turn_rewards_of``).
        invalid_action_penalty: subtracted from the reward of each invalid turn.

    Returns:
        The per-turn rewards and, per turn, the hash of the observation it answered (-1 where the record keeps no
        messages).
    """
    states = [state_hash(text) for text in answered_observations(t)]
    rewards = turn_rewards_of(t, turn_reward, invalid_action_penalty)
    states = (states + [-1] * len(rewards))[: len(rewards)]  # one per turn (a record without messages: none)
    return EpisodeTurns(tuple(rewards), tuple(states))


def turn_table(episodes: Sequence[EpisodeTurns], last_turn_bonus: torch.Tensor,
               reward_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded ``(N, K)`` turn rewards, turn mask and state ids.

    Each episode's rewards are multiplied by ``reward_scale[i]`` (the env reward's weight) and its last
    turn gets ``last_turn_bonus[i]`` (the outcome, or what extra reward functions add).
    """
    width = max([len(e.rewards) for e in episodes] + [1])
    rewards = torch.zeros(len(episodes), width)
    mask = torch.zeros(len(episodes), width)
    states = torch.full((len(episodes), width), -1, dtype=torch.long)
    for row, episode in enumerate(episodes):
        turns = len(episode.rewards)
        if not turns:
            continue
        rewards[row, :turns] = torch.tensor(episode.rewards) * reward_scale[row]
        rewards[row, turns - 1] += last_turn_bonus[row]
        mask[row, :turns] = 1.0
        states[row, :turns] = torch.tensor(episode.states, dtype=torch.long)
    return rewards, mask, states
