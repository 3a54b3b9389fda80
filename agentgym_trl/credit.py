"""From episodes to the tensors the estimators of ``advantages.py`` take, and back to TRL's advantages.

The trainer gathers one small ``EpisodeTurns`` per episode from every process (per-turn rewards and
a hash of the state each turn answered: no text, no tokens), computes the episode- or turn-level
advantages of the whole batch here, and spreads its own rows' turn advantages over their tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentgym_envs.core.episode import Trajectory
from agentgym_trl import advantages as adv


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


def episode_baseline(estimator: str, returns: torch.Tensor, groups: torch.Tensor, scale: str,
                     greedy_returns: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The estimator's per-episode baseline and divisor of its returns."""
    if estimator == "grpo":
        return adv.grpo_baseline(returns, groups, scale)
    if estimator == "rloo":
        return adv.leave_one_out_baseline(returns, groups), torch.ones_like(returns)
    if estimator == "remax":
        if greedy_returns is None:
            raise ValueError("remax needs the greedy episodes' returns")
        return greedy_returns.to(returns.dtype), torch.ones_like(returns)
    raise ValueError(f"{estimator!r} has no episode baseline")


def episode_level_advantages(turn_rewards: torch.Tensor, turn_mask: torch.Tensor, state_ids: torch.Tensor,
                             groups: torch.Tensor, *, estimator: str, credit: str, turn_gamma: float = 1.0,
                             scale: str = "group", step_weight: float = 1.0,
                             greedy_returns: torch.Tensor | None = None) -> torch.Tensor:
    """grpo / rloo / remax advantages: ``(N,)`` with ``credit="none"``, per turn ``(N, K)`` otherwise."""
    returns = adv.discounted_returns(turn_rewards, turn_mask, turn_gamma)
    episode_return = returns[:, 0]
    baseline, divisor = episode_baseline(estimator, episode_return, groups, scale, greedy_returns)
    if credit == "none":
        return (episode_return - baseline) / divisor
    if credit == "per_turn":
        return (returns - baseline[:, None]) / divisor[:, None] * turn_mask
    if credit == "step_level":
        episode = ((episode_return - baseline) / divisor)[:, None]
        step = adv.step_level(returns, turn_mask, state_ids, groups, scale=scale != "none")
        return (episode + step_weight * step) * turn_mask
    raise ValueError(f"unknown turn credit {credit!r}")
