"""DAPO's dynamic sampling (``dynamic_sampling.py``): groups whose rewards are all equal are replaced by groups of
freshly drawn items (the item-draws feature's ``TrainStep.draw_items``). On with ``dynamic_sampling``."""

from __future__ import annotations

from typing import Any

from agentgym_trl.dynamic_sampling import RefillStats, fill_informative_groups
from agentgym_trl.features.base import Feature, TrainingFeature, TrainStep, register_feature
from agentgym_trl.rollout import RolloutResult


class DynamicSampling(TrainingFeature):
    """Refills the step's equal-reward groups, up to ``max_batches`` batches' worth of groups in all."""

    def __init__(self, max_batches: int):
        super().__init__()
        self.max_batches = max_batches
        self._stats: RefillStats | None = None

    def refill(self, step: TrainStep, result: RolloutResult) -> RolloutResult:
        if step.draw_items is None:
            raise RuntimeError("dynamic sampling needs the item-draws feature's draws (TrainStep.draw_items)")
        group = self.trainer.num_generations
        self._stats = fill_informative_groups(
            step.rows, result, group, play=step.play, draw_items=step.draw_items,
            max_groups=len(step.rows) // group * self.max_batches,
            more=self.trainer.generator.any_active,  # under ZeRO-3 / FSDP every rank plays as many refill batches
            item_rows=step.item_rows,
        )
        return result

    def step_metrics(self, step: TrainStep) -> dict[str, float]:
        stats, self._stats = self._stats, None
        return stats.metrics() if stats is not None else {}


def build(args: Any, train_dataset: Any) -> DynamicSampling:
    return DynamicSampling(args.dynamic_sampling_max_batches)


register_feature(Feature(name="dynamic_sampling", summary="equal-reward groups replaced by fresh ones (DAPO)",
                         is_on=lambda args: bool(args.dynamic_sampling), build=build))
