"""Which train items a step plays (``item_draws.py``): learnability-aware draws, or uniform draws for refills.

On with ``item_draws='learnability'`` (the rows' items are redrawn by what they can teach, every episode played
updates the estimates, saved as ``item_estimates.json``) or with ``dynamic_sampling`` alone (uniform draws offered to
its refills). Either way the drawer is offered to the other features as ``TrainStep.draw_items``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from accelerate.utils import gather_object

from agentgym_envs.core.episode import Trajectory
from agentgym_trl.features.base import Feature, TrainingFeature, TrainStep, register_feature
from agentgym_trl.item_draws import ItemDrawer, ItemKey, LearnabilityDrawer, assign_items, item_rows
from agentgym_trl.metrics import ITEMS_DRAWN_TEACH, ITEMS_ESTIMATE_SPREAD, ITEMS_PLAYED_FRAC

logger = logging.getLogger(__name__)


class ItemDraws(TrainingFeature):
    """The step's item drawer (``drawer``), offered to refills; with learnability, the rows' own draw too."""

    def __init__(self, drawer: ItemDrawer):
        super().__init__()
        self.drawer = drawer
        self.learnability = isinstance(drawer, LearnabilityDrawer)
        self._outcomes: list[tuple[str, int, bool]] = []  # this step's episodes (env id, item id, success)

    def before_play(self, step: TrainStep) -> None:
        """Offer this process's draws for the step; with learnability, draw the global batch's groups (alike on
        every process: a group may span processes) and move this process's rows to its share of them."""
        self._outcomes = []
        draw = self.drawer.for_step(step.step, self.trainer.accelerator.process_index)

        def draw_items(count: int) -> list[ItemKey]:
            items = draw(count)
            step.drawn.extend(items)
            return items

        step.draw_items, step.item_rows = draw_items, self.drawer.rows
        if self.learnability:
            self._draw_rows(step)

    def _draw_rows(self, step: TrainStep) -> None:
        group = self.trainer.num_generations
        here, ranks, rank = len(step.rows), self.trainer.accelerator.num_processes, \
            self.trainer.accelerator.process_index
        items = self.drawer.for_step(step.step, process=None)(-(-here * ranks // group))
        assign_items(step.rows, items, group, offset=rank * here, table=self.drawer.rows)
        step.drawn.extend(items[rank * here // group:-(-(rank + 1) * here // group)])

    def observe(self, trajectories: Sequence[Trajectory]) -> None:
        if self.learnability:
            self._outcomes.extend((t.env_id, t.item_id, bool(t.success)) for t in trajectories)

    def step_metrics(self, step: TrainStep) -> dict[str, float]:
        """Learnability: the estimates' state and the drawn items' teaching probability, then every process's
        episodes counted by every process (so all keep the same estimates)."""
        if not self.learnability:
            return {}
        summary = self.drawer.summary(step.drawn)
        self.drawer.observe(gather_object(self._outcomes))
        return {ITEMS_ESTIMATE_SPREAD: summary["spread"], ITEMS_PLAYED_FRAC: summary["played"],
                ITEMS_DRAWN_TEACH: summary["drawn_teach"]}

    def save(self, folder: str) -> None:
        if self.learnability:  # a resumed run draws from what this one learned of the items
            self.drawer.save(folder)

    def load(self, folder: str) -> None:
        if self.learnability and not self.drawer.load(folder):
            logger.warning("%s holds no item estimates: learnability draws start from the prior", folder)


def make_item_drawer(args: Any, items: list[ItemKey]) -> ItemDrawer:
    """The drawer of train items: learnability-aware, or uniform (dynamic sampling's refills)."""
    if args.item_draws == "learnability":
        return LearnabilityDrawer(items, args.seed, args.num_generations, args.learnability_prior,
                                  args.learnability_floor)
    return ItemDrawer(items, args.seed)


def build(args: Any, train_dataset: Any) -> ItemDraws:
    drawer = make_item_drawer(args, list(zip(train_dataset["env_id"], train_dataset["item_id"])))
    drawer.rows = item_rows(train_dataset)  # draws move rows: a moved row takes its new item's whole row
    return ItemDraws(drawer)


register_feature(Feature(
    name="item_draws", summary="learnability-aware item draws; uniform draws for dynamic sampling's refills",
    is_on=lambda args: args.item_draws == "learnability" or bool(args.dynamic_sampling), build=build))
