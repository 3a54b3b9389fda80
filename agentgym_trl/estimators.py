"""The advantage estimators, one declaration each: what an estimator needs and how it makes advantages.

``ESTIMATORS`` is the registry: ``AgentGRPOConfig`` validates ``advantage_estimator`` and its companions
(``turn_credit``, ``value_head``, ``num_generations``) against it and builds its help from it, and
``AgentGRPOTrainer`` reads it (greedy rollout, critic, where beta goes, which advantage path). The maths
stays in ``advantages.py`` (pure tensor functions); ``credit.py`` turns episodes into turn rewards.
Adding an estimator is one ``Estimator`` entry here and its tests.

Two levels:

* ``"episode"``: one baseline (and divisor) per episode from the episode returns; turn-level credit
  (``per_turn``, ``step_level``) applies, see ``episode_level_advantages``;
* ``"token"``: every action token gets its own advantage from its token rewards (``TokenBatch``),
  whitened over every process's action tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from agentgym_trl import advantages as adv
from agentgym_trl.metrics import KL_IN_REWARD, VALUE_EXPLAINED_VARIANCE, VALUE_MEAN

EPISODE = "episode"
TOKEN = "token"

#: (episode returns, group ids, scale, greedy returns or None) -> (baseline, divisor), each ``(N,)``
Baseline = Callable[[torch.Tensor, torch.Tensor, str, "torch.Tensor | None"], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class TokenBatch:
    """What a token-level estimator sees of this process's rows, and the trainer's services it may call.

    ``moments(values)`` is ``advantages.masked_moments`` over ``mask``, summed across processes;
    ``critic_values()`` runs the critic over the batch; ``log(name, value)`` appends a training metric.
    """

    output: Mapping[str, Any]  # TRL's scored batch (log-probs of the sampler, the policy and the reference)
    token_rewards: torch.Tensor  # (B, T) on CPU: each turn's reward on its last action token
    mask: torch.Tensor  # (B, T) float on CPU: 1 on action tokens
    beta: float
    gamma: float
    gae_lambda: float
    moments: Callable[[torch.Tensor], torch.Tensor]
    critic_values: Callable[[], torch.Tensor]
    log: Callable[[str, float], None]

    def global_mean(self, values: torch.Tensor) -> float:
        """The mean of ``values`` over every process's action tokens."""
        return adv.moments_mean(self.moments(values))

    def whitened(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` whitened over every process's action tokens (0 elsewhere)."""
        return adv.whiten(values, self.mask, self.moments(values).cpu())


#: a token-level estimator: (advantages ``(B, T)``, extra per-row fields for the loss, e.g. ``value_targets``)
TokenAdvantages = Callable[[TokenBatch], tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator: what it needs from the trainer and how it turns rewards into advantages.

    Args:
        name: the ``advantage_estimator`` value.
        summary: its words in the ``--advantage_estimator`` help.
        level: ``"episode"`` (give ``baseline``; turn-level credit applies) or ``"token"`` (give
            ``token_advantages``).
        baseline: episode level: each episode's baseline and divisor of its return.
        token_advantages: token level: the advantages of a ``TokenBatch``.
        needs_critic: a value head (``value_head``) is trained alongside and its values are the input.
        needs_greedy_rollout: one greedy episode per item is played each step (its return is the input).
        kl_in_reward: beta's KL penalty goes into the token rewards (the estimator reads the reference
            log-probs) and TRL's loss runs without its own KL term; False: TRL's KL term in the loss.
        min_group_size: the fewest samples per item (``num_generations``) its baseline needs; TRL asks 2 of all.
        same_as_trl: with outcome rewards and no turn credit, TRL's own group advantages are this
            estimator's, so the trainer keeps them.
    """

    name: str
    summary: str
    level: str
    baseline: Baseline | None = field(default=None, repr=False)
    token_advantages: TokenAdvantages | None = field(default=None, repr=False)
    needs_critic: bool = False
    needs_greedy_rollout: bool = False
    kl_in_reward: bool = False
    min_group_size: int = 2
    same_as_trl: bool = False

    def __post_init__(self) -> None:
        if self.level not in (EPISODE, TOKEN):
            raise ValueError(f"estimator {self.name!r}: level must be {EPISODE!r} or {TOKEN!r}, got {self.level!r}")
        gives = (self.baseline is not None, self.token_advantages is not None)
        if gives != (self.level == EPISODE, self.level == TOKEN):
            raise ValueError(f"estimator {self.name!r}: an episode-level estimator gives a baseline, a token-level "
                             "one token_advantages")

    @property
    def supports_turn_credit(self) -> bool:
        """Turn-level credit replaces an episode's return by each turn's return against the episode baseline."""
        return self.level == EPISODE


def _grpo_baseline(returns: torch.Tensor, groups: torch.Tensor, scale: str,
                   greedy_returns: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return adv.grpo_baseline(returns, groups, scale)


def _leave_one_out_baseline(returns: torch.Tensor, groups: torch.Tensor, scale: str,
                            greedy_returns: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return adv.leave_one_out_baseline(returns, groups), torch.ones_like(returns)


def _no_baseline(returns: torch.Tensor, groups: torch.Tensor, scale: str,
                 greedy_returns: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros_like(returns), torch.ones_like(returns)


def _greedy_baseline(returns: torch.Tensor, groups: torch.Tensor, scale: str,
                     greedy_returns: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    if greedy_returns is None:
        raise ValueError("remax needs the greedy episodes' returns")
    return greedy_returns.to(returns.dtype), torch.ones_like(returns)


def reinforce_pp_advantages(batch: TokenBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REINFORCE++: the KL penalty (k1 = log pi_old - log pi_ref on the sampled tokens) joins the token rewards;
    the returns are whitened over the batch."""
    kl = None
    if batch.beta != 0.0:
        output = batch.output
        old = output.get("old_per_token_logps", output.get("sampling_per_token_logps"))
        kl = (old - output["ref_per_token_logps"]).detach().float().cpu()
        batch.log(KL_IN_REWARD, batch.global_mean(kl))
    raw = adv.reinforce_pp_returns(batch.token_rewards, kl, batch.mask, batch.beta, batch.gamma)
    return batch.whitened(raw), {}


def gae_advantages(batch: TokenBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GAE over action tokens with the critic's values, whitened over the batch; the value targets go to the loss."""
    values = batch.critic_values().cpu()
    raw, targets = adv.gae(batch.token_rewards, values, batch.mask, batch.gamma, batch.gae_lambda)
    batch.log(VALUE_MEAN, batch.global_mean(values))
    batch.log(VALUE_EXPLAINED_VARIANCE, explained_variance(values, targets, batch.global_mean))
    return batch.whitened(raw), {"value_targets": targets}


def explained_variance(values: torch.Tensor, targets: torch.Tensor, mean: Callable[[torch.Tensor], float]) -> float:
    """How much of the value targets' variance the critic explains, ``1 - Var(target - V) / Var(target)`` over the
    batch's action tokens (CleanRL's PPO logs it: near 1 a good critic, at or below 0 one no better than a constant);
    NaN when the targets do not vary.

    Args:
        values: the critic's estimates ``(B, T)``.
        targets: their targets ``(B, T)``.
        mean: the mean over every process's action tokens.

    Returns:
        The explained variance.
    """
    residual = targets - values
    target_variance = mean(targets * targets) - mean(targets) ** 2
    if target_variance <= 1e-12:
        return math.nan
    return 1.0 - (mean(residual * residual) - mean(residual) ** 2) / target_variance


ESTIMATORS: dict[str, Estimator] = {
    estimator.name: estimator
    for estimator in (
        Estimator("grpo", "group-normalised outcome, TRL's own path", EPISODE, baseline=_grpo_baseline,
                  same_as_trl=True),
        Estimator("rloo", "leave-one-out group baseline", EPISODE, baseline=_leave_one_out_baseline),
        Estimator("reinforce_pp", "REINFORCE++: KL penalty in the token rewards, returns whitened over the batch",
                  TOKEN, token_advantages=reinforce_pp_advantages, kl_in_reward=True, min_group_size=1),
        Estimator("remax", "the greedy episode of each item as baseline", EPISODE, baseline=_greedy_baseline,
                  needs_greedy_rollout=True, min_group_size=1),
        Estimator("gae", "PPO's GAE with a value head trained alongside the policy; needs --value_head", TOKEN,
                  token_advantages=gae_advantages, needs_critic=True, min_group_size=1),
        # online rejection-sampling fine-tuning: with 0/1 success rewards a success's tokens get advantage 1 and a
        # failure's 0, so the step clones the model's own successes and nothing pushes failures down
        Estimator("rft", "rejection-sampling fine-tuning: each episode's own return, no baseline (0/1 success "
                  "rewards: clone the successes)", EPISODE, baseline=_no_baseline, min_group_size=1),
    )
}


def estimator_named(name: str | Estimator) -> Estimator:
    """The registered estimator of that name (an ``Estimator`` is returned as it is)."""
    if isinstance(name, Estimator):
        return name
    if name not in ESTIMATORS:
        raise ValueError(f"advantage_estimator must be one of {list(ESTIMATORS)}, got {name!r}")
    return ESTIMATORS[name]


def names_where(test: Callable[[Estimator], bool]) -> list[str]:
    """The registered estimators' names for which ``test`` holds, in registry order."""
    return [name for name, estimator in ESTIMATORS.items() if test(estimator)]


def episode_level_advantages(turn_rewards: torch.Tensor, turn_mask: torch.Tensor, state_ids: torch.Tensor,
                             groups: torch.Tensor, *, estimator: str | Estimator, credit: str, turn_gamma: float = 1.0,
                             scale: str = "group", step_weight: float = 1.0,
                             greedy_returns: torch.Tensor | None = None) -> torch.Tensor:
    """An episode-level estimator's advantages: ``(N,)`` with ``credit="none"``, per turn ``(N, K)`` otherwise.

    Args:
        turn_rewards, turn_mask, state_ids: ``credit.turn_table``'s padded ``(N, K)`` tensors of the whole batch.
        groups: each episode's group (the samples of one item).
        estimator: an episode-level estimator or its name.
        credit: ``"none"``, ``"per_turn"`` or ``"step_level"`` (GiGPO).
        turn_gamma: the discount per turn of the turn returns.
        scale: ``scale_rewards`` (``grpo``'s divisor and the step term's scaling).
        step_weight: the weight of GiGPO's step advantage.
        greedy_returns: the greedy episodes' returns (``remax``).

    Returns:
        The advantages, ``(N,)`` or ``(N, K)`` (0 on turns not played).
    """
    chosen = estimator_named(estimator)
    if chosen.baseline is None:
        raise ValueError(f"{chosen.name!r} has no episode baseline")
    returns = adv.discounted_returns(turn_rewards, turn_mask, turn_gamma)
    episode_return = returns[:, 0]
    baseline, divisor = chosen.baseline(episode_return, groups, scale, greedy_returns)
    if credit == "none":
        return (episode_return - baseline) / divisor
    if credit == "per_turn":
        return (returns - baseline[:, None]) / divisor[:, None] * turn_mask
    if credit == "step_level":
        episode = ((episode_return - baseline) / divisor)[:, None]
        step = adv.step_level(returns, turn_mask, state_ids, groups, scale=scale != "none")
        return (episode + step_weight * step) * turn_mask
    raise ValueError(f"unknown turn credit {credit!r}")
