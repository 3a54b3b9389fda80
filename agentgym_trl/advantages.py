"""Advantage estimators as pure functions: tensors in, tensors out, nothing about models or envs.

The trainer (``AgentGRPOTrainer``) gathers what a group needs, calls these, and hands TRL either one
advantage per episode (shape ``(B,)``) or one per completion token (``(B, T)``). Notation: episode
``i`` of group ``g(i)`` (the K samples of one item) played turns ``k = 0..n_i-1`` with turn rewards
``r_{i,k}``; a completion token ``t`` is an *action token* when ``env_mask`` is 1 (sampled by the
model, each turn's end-of-turn token included) and an observation / template token otherwise.

Episode-level estimators (one baseline per episode, from the episode returns ``R_i = G_{i,0}``):

* ``grpo``:  ``A_i = (R_i - mean_{g(i)} R) / (std_{g(i)} R + eps)`` (``scale="batch"``: the batch's std,
  ``"none"``: no division);
* ``rloo``:  ``A_i = R_i - 1/(K-1) sum_{j in g(i), j != i} R_j`` (0 for a group of one);
* ``remax``: ``A_i = R_i - R^greedy_{g(i)}`` (the return of the greedy episode of the same item).

Turn-level credit (for those three): ``G_{i,k} = sum_{j>=k} gamma_turn^(j-k) r_{i,j}``; ``per_turn``
gives turn ``k`` the advantage ``(G_{i,k} - b_i) / s_i`` with the estimator's baseline ``b_i`` and
scale ``s_i``; ``step_level`` (GiGPO) adds ``omega * (G_{i,k} - mean_S G) / (std_S G + eps)``, where
``S`` is the step group: every turn, across the group's episodes, that answered the same state
(identical observation text); a state seen once gets no step term.

Token-level estimators (a reward per action token, the turn's reward on its last action token):

* ``reinforce_pp`` (REINFORCE++): ``r_t = -beta * KL_t`` on every action token plus the turn rewards,
  ``G_t = sum_{s>=t} gamma^(s-t) r_s`` over action tokens, whitened over the whole batch:
  ``A_t = (G_t - mean G) / (std G + eps)``;
* ``gae``: ``delta_t = r_t + gamma V_{t+1} - V_t``, ``A_t = sum_l (gamma lambda)^l delta_{t+l}`` and the
  value target ``G_t = A_t + V_t``, over action tokens (``V`` after the last one is 0).

Observation tokens are not time steps: the recursions skip them (their advantage is 0 and they
never hold a reward), so a reward is never dropped for sitting on an observation. Every episode end
(termination, turn budget, token limit) is terminal: the turn budget is part of the task, its
outcome final, so nothing is bootstrapped.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

EPS = 1e-4  # TRL's: a group whose rewards are all equal gets advantage 0, not 0/0
GROUP_SCALES = ("group", "batch", "none")


def group_index(keys: Sequence[Hashable]) -> torch.Tensor:
    """Consecutive group ids (0, 1, ...) for per-row keys, in order of first appearance."""
    ids: dict[Hashable, int] = {}
    return torch.tensor([ids.setdefault(key, len(ids)) for key in keys], dtype=torch.long)


def _group_sums(values: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element sum and count of its group."""
    count = torch.zeros(int(groups.max()) + 1 if groups.numel() else 0, dtype=values.dtype)
    total = torch.zeros_like(count)
    count.index_add_(0, groups, torch.ones_like(values))
    total.index_add_(0, groups, values)
    return total[groups], count[groups]


def group_mean_std(values: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element mean and (unbiased, as TRL's) standard deviation of its group; std 0 for a group of one."""
    values = values.double()
    total, count = _group_sums(values, groups)
    mean = total / count
    squares, _ = _group_sums((values - mean) ** 2, groups)
    std = torch.where(count > 1, (squares / (count - 1).clamp(min=1)).sqrt(), torch.zeros_like(mean))
    return mean.float(), std.float()


def group_normalized(rewards: torch.Tensor, groups: torch.Tensor, scale: str = "group") -> torch.Tensor:
    """GRPO's advantage: reward minus its group's mean, divided by the group's (or batch's) std."""
    baseline, scaling = grpo_baseline(rewards, groups, scale)
    return (rewards - baseline) / scaling


def grpo_baseline(rewards: torch.Tensor, groups: torch.Tensor, scale: str = "group") -> tuple[torch.Tensor,
                                                                                               torch.Tensor]:
    """GRPO's per-episode baseline (the group mean) and divisor (std + eps, or 1 with ``scale="none"``)."""
    if scale not in GROUP_SCALES:
        raise ValueError(f"scale must be one of {GROUP_SCALES}, got {scale!r}")
    mean, std = group_mean_std(rewards, groups)
    if scale == "batch":
        std = rewards.float().std().expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(mean)
    divisor = torch.ones_like(mean) if scale == "none" else std + EPS
    return mean, divisor


def leave_one_out_baseline(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """RLOO's baseline: the mean reward of the *other* episodes of the group (the episode's own reward alone)."""
    values = rewards.double()
    total, count = _group_sums(values, groups)
    others = torch.where(count > 1, (total - values) / (count - 1).clamp(min=1), values)
    return others.float()


def leave_one_out(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """RLOO's advantage; a group of one has no other episode, so its advantage is 0."""
    return rewards - leave_one_out_baseline(rewards, groups)


def remax(rewards: torch.Tensor, greedy_rewards: torch.Tensor) -> torch.Tensor:
    """ReMax's advantage: the sampled episode's reward minus the greedy episode's reward of the same item."""
    return rewards - greedy_rewards


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Returns-to-go along the last dim over the positions where ``mask`` is 1 (the others are skipped, 0).

    Works for turns (``mask`` = the turn was played) and for tokens (``mask`` = action token).
    """
    mask = mask.to(rewards.dtype)
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[..., 0])
    for t in range(rewards.shape[-1] - 1, -1, -1):
        step = mask[..., t]
        running = step * (rewards[..., t] + gamma * running) + (1 - step) * running
        returns[..., t] = step * running
    return returns


def masked_moments(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[sum, sum of squares, count]`` over masked positions: summed across processes, they whiten globally."""
    mask = mask.to(values.dtype)
    return torch.stack([(values * mask).sum(), (values**2 * mask).sum(), mask.sum()]).double()


def moments_mean(moments: torch.Tensor) -> float:
    """The mean that ``masked_moments`` (summed across processes) describe; 0 when no position was masked in."""
    return float(moments[0] / moments[2].clamp(min=1.0))


def whiten(values: torch.Tensor, mask: torch.Tensor, moments: torch.Tensor | None = None) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over masked positions (of the whole batch, given its ``moments``); 0 elsewhere."""
    total, squares, count = (masked_moments(values, mask) if moments is None else moments).tolist()
    if count < 1:
        return torch.zeros_like(values)
    mean = total / count
    variance = max(squares / count - mean**2, 0.0) * (count / (count - 1) if count > 1 else 0.0)
    return (values - mean) / (variance**0.5 + EPS) * mask.to(values.dtype)


def reinforce_pp_returns(token_rewards: torch.Tensor, kl: torch.Tensor | None, mask: torch.Tensor,
                         kl_coef: float, gamma: float = 1.0) -> torch.Tensor:
    """REINFORCE++'s unnormalised returns: the KL penalty joins the reward on every action token.

    Whiten the result over the whole batch (``whiten`` with the processes' summed ``masked_moments``).
    """
    rewards = token_rewards if kl is None or kl_coef == 0 else token_rewards - kl_coef * kl
    return discounted_returns(rewards * mask.to(rewards.dtype), mask, gamma)


def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over action tokens; returns (advantages, value targets).

    ``values[t]`` is the critic's value of the state before action token ``t``; the value after the
    last action token is 0 (every episode end is terminal).
    """
    mask = mask.to(token_rewards.dtype)
    advantages = torch.zeros_like(token_rewards)
    running = torch.zeros_like(token_rewards[..., 0])
    next_value = torch.zeros_like(running)
    for t in range(token_rewards.shape[-1] - 1, -1, -1):
        step = mask[..., t]
        delta = token_rewards[..., t] + gamma * next_value - values[..., t]
        running = step * (delta + gamma * lam * running) + (1 - step) * running
        next_value = step * values[..., t] + (1 - step) * next_value
        advantages[..., t] = step * running
    return advantages, (advantages + values) * mask


def step_level(turn_returns: torch.Tensor, turn_mask: torch.Tensor, state_ids: torch.Tensor,
               groups: torch.Tensor, scale: bool = True) -> torch.Tensor:
    """GiGPO's step advantage: a turn's return against the returns of the group's turns from the same state.

    ``state_ids[i, k]``: an id of the state turn ``k`` of episode ``i`` answered (equal ids = identical
    state); ``groups[i]``: the episode's group. A state seen once in its group gets 0.
    """
    played = turn_mask.bool()
    rows, turns = torch.nonzero(played, as_tuple=True)
    if rows.numel() == 0:
        return torch.zeros_like(turn_returns)
    keys = list(zip(groups[rows].tolist(), state_ids[rows, turns].tolist()))
    anchors = group_index(keys)
    mean, std = group_mean_std(turn_returns[rows, turns], anchors)
    divisor = std + EPS if scale else torch.ones_like(std)
    out = torch.zeros_like(turn_returns)
    out[rows, turns] = (turn_returns[rows, turns] - mean) / divisor
    return out


def last_action_positions(turn_ends: Sequence[int], action_mask: Sequence[int]) -> list[int]:
    """For each turn, the completion index of its last action token (where its reward goes), or -1.

    ``turn_ends[k]``: the index just past turn ``k``'s tokens. A turn with no action token (a cut turn
    masked out of the loss) hands its reward to the nearest earlier action token, else the next one.
    """
    action_indices = [j for j, m in enumerate(action_mask) if m]
    positions = []
    for end in turn_ends:
        before = [j for j in action_indices if j < end]
        after = [j for j in action_indices if j >= end]
        positions.append(before[-1] if before else (after[0] if after else -1))
    return positions


def place_on_last_action_token(turn_rewards: torch.Tensor, turn_ends: Sequence[Sequence[int]],
                               action_mask: torch.Tensor) -> torch.Tensor:
    """Token rewards ``(B, T)``: each turn's reward on its last action token, never on an observation token."""
    token_rewards = torch.zeros(action_mask.shape, dtype=turn_rewards.dtype)
    for row, ends in enumerate(turn_ends):
        for turn, position in enumerate(last_action_positions(ends, action_mask[row].tolist())):
            if position >= 0:
                token_rewards[row, position] += turn_rewards[row, turn]
    return token_rewards


def spread_over_turns(turn_values: torch.Tensor, turn_ends: Sequence[Sequence[int]],
                      action_mask: torch.Tensor) -> torch.Tensor:
    """Per-token ``(B, T)``: every action token of turn ``k`` gets ``turn_values[:, k]``; the rest 0."""
    out = torch.zeros(action_mask.shape, dtype=turn_values.dtype)
    for row, ends in enumerate(turn_ends):
        start = 0
        for turn, end in enumerate(ends):
            out[row, start:end] = turn_values[row, turn]
            start = end
    return out * action_mask.to(out.dtype)
