"""The estimators' side of a scored batch: from TRL's output and the batch's episodes to the advantages that replace
TRL's group advantages (``advantage_estimator`` / ``turn_credit`` other than plain GRPO).

``ScoringBatch`` is the one per-batch object the trainer carries between TRL's calls; ``AdvantageAdapter`` reads
it with TRL's scored output and the trainer's services (gathers across processes, the critic, the metrics log) and
dispatches to the estimator's declaration in ``estimators.py``: per episode (with turn-level credit) or per token.
It holds no TRL internals, so the trainer stays a thin subclass and the estimators stay pure tensor functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import gather_object

from agentgym_trl import advantages as adv
from agentgym_trl.credit import episode_turns, turn_table
from agentgym_trl.estimators import EPISODE, Estimator, TokenBatch, episode_level_advantages
from agentgym_trl.fast_training import action_mask
from agentgym_trl.metrics import ADVANTAGE_ABS_MEAN, GREEDY_REWARD
from agentgym_trl.rollout import RolloutResult


@dataclass
class ScoringBatch:
    """What one ``_generate_and_score_completions`` call carries between TRL's calls into the trainer.

    Opened (and closed) by ``AgentGRPOTrainer._scoring`` with TRL's rows; ``rollout_func`` adds the
    episodes and ReMax's greedy returns, ``_calculate_rewards`` TRL's rewards.
    """

    rows: list[dict[str, Any]]
    rollout: RolloutResult | None = None
    rewards_per_func: torch.Tensor | None = None  # TRL's rewards of every process's rows: estimators need groups
    greedy_returns: list[float] | None = None  # remax: each local row's greedy episode return


@dataclass
class AdvantageAdapter:
    """The configured estimator's advantages for a scored batch, in place of TRL's.

    Args:
        estimator: the declaration of ``args.advantage_estimator``.
        args: the trainer's ``AgentGRPOConfig`` (turn rewards, penalties, discounts).
        accelerator: the trainer's ``Accelerator`` (gathers, reductions, this process's index).
        num_generations: the group size.
        scale_rewards: TRL's reward scaling ('group', 'batch' or 'none').
        beta: the KL coefficient.
        reward_weights: TRL's weights of the reward functions (the env's reward first).
        log: appends a training metric.
        critic_values: the critic's ``(B, T)`` estimates of a scored output (gae: the critic feature sets it).
    """

    estimator: Estimator
    args: Any
    accelerator: Any
    num_generations: int
    scale_rewards: str
    beta: float
    reward_weights: torch.Tensor
    log: Callable[[str, float], None]
    critic_values: Callable[[dict[str, Any]], torch.Tensor] | None = None

    def replace(self, output: dict[str, Any], batch: ScoringBatch) -> torch.Tensor:
        """Swap TRL's group advantages in ``output`` for the estimator's: ``(B,)`` per episode or ``(B, T)`` per
        token (plus the estimator's extra fields, e.g. gae's value targets). Returns the per-row advantages logged
        in the completions table."""
        mask = action_mask(output).detach().float().cpu()
        turn_ends = [t.turn_ends for t in batch.rollout.trajectories]
        rewards, turn_mask, states = self.global_turn_table(batch)
        if self.estimator.level == EPISODE:
            advantages = self.local_rows(self._episode_advantages(batch, rewards, turn_mask, states), batch)
            if advantages.dim() == 2:
                advantages = adv.spread_over_turns(advantages, turn_ends, mask)
        else:
            token_rewards = adv.place_on_last_action_token(self.local_rows(rewards, batch), turn_ends, mask)
            advantages, fields = self.estimator.token_advantages(self._token_batch(output, token_rewards, mask))
            for name, value in fields.items():
                output[name] = value.to(output["completion_mask"].device)
        output["advantages"] = advantages.to(output["completion_mask"].device)
        return self._logged_advantages(advantages, mask)

    def greedy_returns(self, result: RolloutResult) -> list[float]:
        """ReMax's baseline: the discounted turn returns of greedy episodes (one per distinct item), logged as
        ``remax/greedy_reward``."""
        args = self.args
        weight = self.reward_weights[0].cpu()
        episodes = [episode_turns(t, args.turn_reward, args.invalid_action_penalty) for t in result.trajectories]
        outcome = torch.tensor([t.reward for t in result.trajectories]) * weight
        bonus = outcome if args.turn_reward == "outcome" else torch.zeros_like(outcome)
        rewards, mask, _ = turn_table(episodes, bonus, weight.expand(len(episodes)))
        self.log(GREEDY_REWARD, float(outcome.mean()) if len(outcome) else 0.0)
        return adv.discounted_returns(rewards, mask, args.turn_gamma)[:, 0].tolist()

    def global_turn_table(self, batch: ScoringBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every process's episodes as padded turn rewards, turn mask and state ids (in TRL's global row order)."""
        args = self.args
        local = [episode_turns(t, args.turn_reward, args.invalid_action_penalty) for t in batch.rollout.trajectories]
        episodes = gather_object(local)
        per_func = batch.rewards_per_func.detach().cpu()
        weights = self.reward_weights.detach().cpu()
        total = (per_func * weights).nansum(dim=1)
        env_part = per_func[:, 0].nan_to_num() * weights[0]
        # the outcome on the last turn; with per-step env rewards, only what extra reward functions add
        bonus = total if args.turn_reward == "outcome" else total - env_part
        return turn_table(episodes, bonus, weights[0].expand(len(episodes)))

    def local_rows(self, values: torch.Tensor, batch: ScoringBatch) -> torch.Tensor:
        """This process's rows of a tensor over every process's rows."""
        count = len(batch.rollout.trajectories)
        start = self.accelerator.process_index * count
        return values[start : start + count]

    def global_moments(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``masked_moments`` of this process's values summed over every process (the whole batch's moments)."""
        return self.accelerator.reduce(adv.masked_moments(values, mask).to(self.accelerator.device), reduction="sum")

    def _episode_advantages(self, batch: ScoringBatch, rewards: torch.Tensor, turn_mask: torch.Tensor,
                            states: torch.Tensor) -> torch.Tensor:
        """The whole batch's episode-level advantages, ``(N,)`` or per turn ``(N, K)``."""
        args = self.args
        greedy = None
        if self.estimator.needs_greedy_rollout:
            greedy = torch.tensor(gather_object(list(batch.greedy_returns or [])), dtype=torch.float32)
        groups = torch.arange(rewards.shape[0]) // self.num_generations
        return episode_level_advantages(rewards, turn_mask, states, groups, estimator=self.estimator,
                                        credit=args.turn_credit, turn_gamma=args.turn_gamma, scale=self.scale_rewards,
                                        step_weight=args.step_advantage_weight, greedy_returns=greedy)

    def _token_batch(self, output: dict[str, Any], token_rewards: torch.Tensor, mask: torch.Tensor) -> TokenBatch:
        """This process's rows as a token-level estimator sees them, with the services it may call."""
        return TokenBatch(
            output=output, token_rewards=token_rewards, mask=mask, beta=self.beta, gamma=self.args.gamma,
            gae_lambda=self.args.gae_lambda, moments=lambda values: self.global_moments(values, mask),
            critic_values=lambda: self.critic_values(output), log=self.log,
        )

    def _logged_advantages(self, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Log ``advantage/abs_mean`` over action tokens; return every process's per-row advantages (the completions
        table's column)."""
        per_token = advantages if advantages.dim() == 2 else advantages[:, None] * mask
        self.log(ADVANTAGE_ABS_MEAN, adv.moments_mean(self.global_moments(per_token.abs(), mask)))
        per_row = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return self.accelerator.gather(per_row.to(self.accelerator.device))


def distinct_items(rows: Sequence[dict[str, Any]]) -> tuple[list[tuple], list[dict[str, Any]]]:
    """Each row's (env id, item id, seed) key, and one episode start per distinct key (ReMax's greedy episodes)."""
    keys = [(str(r["env_id"]), int(r["item_id"]), r.get("seed")) for r in rows]
    unique = list(dict.fromkeys(keys))
    starts = [{"env_id": env_id, "item_id": item_id, **({"seed": seed} if seed is not None else {})}
              for env_id, item_id, seed in unique]
    return keys, starts


def replace_newest(logged: Any, values: list[float]) -> None:
    """Put ``values`` in place of the newest ``len(values)`` entries of a log deque: TRL logs its own group
    advantages of a batch inline, with no hook to log the estimator's instead."""
    for _ in range(min(len(values), len(logged))):
        logged.pop()
    logged.extend(values)
