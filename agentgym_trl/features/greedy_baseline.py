"""ReMax's greedy baseline: after each training rollout, one greedy episode per distinct item among this process's
rows (never trained on); their returns are the estimator's baseline. On when the estimator needs a greedy rollout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym_trl.engines import Generator
from agentgym_trl.estimators import ESTIMATORS
from agentgym_trl.features.base import Feature, Row, TrainingFeature, register_feature
from agentgym_trl.scoring import ScoringBatch, distinct_items


class GreedyBaseline(TrainingFeature):
    """The greedy generator (``generator``, once attached) and the greedy returns it gives each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.generator: Generator | None = None

    def attach(self, trainer: Any) -> None:
        super().attach(trainer)
        self.generator = trainer._make_generator(greedy=True)

    def after_rollout(self, batch: ScoringBatch, budget: int) -> None:
        batch.greedy_returns = self.rollout(batch.rows, budget)

    def rollout(self, rows: Sequence[Row], budget: int) -> list[float]:
        """Each row's greedy return: one greedy episode per distinct (env id, item, seed), at the step's budget."""
        keys, starts = distinct_items(rows)
        result = self.trainer._play(starts, self.generator, budget)
        by_key = dict(zip(dict.fromkeys(keys), self.trainer.advantage_adapter.greedy_returns(result)))
        return [by_key[key] for key in keys]


register_feature(Feature(name="greedy_baseline", summary="ReMax's greedy episode per item, its return the baseline",
                         is_on=lambda args: ESTIMATORS[args.advantage_estimator].needs_greedy_rollout,
                         build=lambda args, train_dataset: GreedyBaseline()))
