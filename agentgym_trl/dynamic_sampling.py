"""Dynamic sampling (DAPO, arXiv 2503.14476): a training batch made only of groups that teach.

A GRPO group whose episodes all scored the same has zero advantage: it costs a rollout and teaches
nothing. With ``dynamic_sampling`` the trainer replaces such groups with groups of freshly drawn
train items until the batch holds as many groups with unequal rewards as it asked for, or until it
has drawn ``dynamic_sampling_max_batches`` batches' worth of groups (the cap: then the step trains
on what it has, and the remaining equal-reward groups keep their zero advantage).

The batch keeps its size and its group layout, so TRL's advantage, loss and logging code sees an
ordinary batch. Groups are judged on the env's reward (the rollout's ``env_reward``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_trl.item_draws import group_rows, replace_row
from agentgym_trl.metrics import (
    DYNAMIC_CAP_HIT,
    DYNAMIC_DRAWN_EPISODES,
    DYNAMIC_DRAWN_SUCCESS,
    DYNAMIC_GROUPS_DRAWN,
    DYNAMIC_GROUPS_KEPT,
    DYNAMIC_GROUPS_TEACHING,
)
from agentgym_trl.rollout import RolloutResult


@dataclass
class RefillStats:
    """What one batch's refilling did (logged as ``dynamic/*``)."""

    groups_wanted: int
    groups_drawn: int
    groups_kept: int  # groups with unequal rewards in the final batch
    drawn_episodes: int
    drawn_successes: int
    groups_teaching: int = 0  # groups played whose rewards differed, those beyond the batch's need included

    @property
    def cap_hit(self) -> bool:
        """True when ``max_groups`` ran out before every equal-reward group was replaced (the batch still holds
        groups that teach nothing).
        """
        return self.groups_kept < self.groups_wanted

    def metrics(self) -> dict[str, float]:
        """The refill's ``dynamic/*`` log entries: groups drawn and kept, whether the cap was hit, and the success
        rate over every episode played for the step.
        """
        return {
            DYNAMIC_GROUPS_DRAWN: float(self.groups_drawn),
            DYNAMIC_GROUPS_KEPT: float(self.groups_kept),
            DYNAMIC_CAP_HIT: float(self.cap_hit),
            # the success of every episode played for this step: the batch itself holds only groups that teach
            DYNAMIC_DRAWN_SUCCESS: self.drawn_successes / max(self.drawn_episodes, 1),
            DYNAMIC_DRAWN_EPISODES: float(self.drawn_episodes),
            DYNAMIC_GROUPS_TEACHING: float(self.groups_teaching),
        }


def group_varies(rewards: Sequence[float]) -> bool:
    """A group teaches (non-zero GRPO advantage) when its rewards are not all equal."""
    return max(rewards) - min(rewards) > 1e-9


def fill_informative_groups(
    rows: list[dict[str, Any]],
    result: RolloutResult,
    group_size: int,
    play: Callable[[list[dict[str, Any]]], RolloutResult],
    draw_items: Callable[[int], list[tuple[str, int]]],
    max_groups: int,
    more: Callable[[int], bool] | None = None,
    item_rows: dict[tuple[str, int], dict[str, Any]] | None = None,
) -> RefillStats:
    """Replace, in place, the equal-reward groups of ``rows``/``result`` with groups that teach.

    ``rows`` are consecutive groups of ``group_size`` copies of one item (TRL's layout); ``play`` plays
    rows and returns their rollout; ``draw_items(n)`` draws ``n`` (env id, item id) pairs; at most
    ``max_groups`` groups are played in all (the first batch's included). Each row dict is updated to
    the item its new episode played, so TRL's reward kwargs and logs name the right item.

    ``more(wants)`` (the generator's ``any_active``) decides whether to refill again from whether this process
    ``wants`` to: where generation runs in step across ranks (ZeRO-3 / FSDP) it asks them all, and a process with
    nothing left to refill plays empty batches while another still refills, so each rank plays as many batches.
    ``item_rows`` holds each item's whole training row (``item_draws.item_rows``), which a replaced row takes.
    """
    if len(rows) % group_size or len(result.trajectories) != len(rows):
        raise ValueError(f"{len(rows)} rows do not form whole groups of {group_size} (or differ from the rollout)")
    starts = range(0, len(rows), group_size)
    rewards = [t.reward for t in result.trajectories]
    empty = [s for s in starts if not group_varies(rewards[s:s + group_size])]
    wanted = len(rows) // group_size
    drawn = wanted
    teaching = wanted - len(empty)
    episodes, successes = len(rows), sum(bool(t.success) for t in result.trajectories)
    while True:
        wants = bool(empty) and drawn < max_groups
        if not (more(int(wants)) if more is not None else wants):
            break
        if not wants:  # another rank still refills: join its generation with no episodes of this rank's own
            _add_time(result, play([]))
            continue
        kept_rate = (wanted - len(empty) + 1) / (drawn + 1)  # +1: a smoothed rate, never zero
        count = min(max_groups - drawn, math.ceil(len(empty) / max(kept_rate, 0.25)))
        items = draw_items(count)
        new_rows = group_rows(items, group_size, item_rows)
        extra = play(new_rows)
        drawn += len(items)
        episodes += len(new_rows)
        successes += sum(bool(t.success) for t in extra.trajectories)
        _add_time(result, extra)
        for start in range(0, len(new_rows), group_size):
            group = extra.trajectories[start:start + group_size]
            if not group_varies([t.reward for t in group]):
                continue
            teaching += 1
            if empty:
                slot = empty.pop(0)
                for offset in range(group_size):
                    replace_row(rows[slot + offset], new_rows[start + offset])
                    result.trajectories[slot + offset] = group[offset]
    return RefillStats(wanted, drawn, wanted - len(empty), episodes, successes, teaching)


def _add_time(total: RolloutResult, extra: RolloutResult) -> None:
    total.total_s += extra.total_s
    total.agent_s += extra.agent_s
    total.env_s += extra.env_s
    total.turns_played += extra.turns_played
    if total.prefilled_tokens is not None and extra.prefilled_tokens is not None:
        total.prefilled_tokens += extra.prefilled_tokens
