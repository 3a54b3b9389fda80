"""The oracle-prefix reverse curriculum (R³; ``reverse_curriculum.py``): training episodes start after the oracle's
first k actions, k set each step by ``OraclePrefixCurriculum`` (a TrainerCallback) and moved by measured success.
On with ``oracle_prefix_schedule``; its state is saved as ``oracle_prefix.json``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accelerate.utils import gather_object
from transformers import TrainerCallback

from agentgym_envs.core.episode import Trajectory
from agentgym_envs.core.oracle_prefix import env_step_budgets
from agentgym_trl.features.base import Feature, TrainingFeature, TrainStep, register_feature
from agentgym_trl.metrics import episode_stats
from agentgym_trl.reverse_curriculum import OraclePrefixCurriculum


class OraclePrefix(TrainingFeature):
    """Training episodes start after ``curriculum.k`` oracle actions; k and success per k are logged each step."""

    def __init__(self, curriculum: OraclePrefixCurriculum):
        super().__init__()
        self.curriculum = curriculum
        self._played: list[dict[str, Any]] = []  # this step's episodes, refills too: the success per k

    def callbacks(self) -> list[TrainerCallback]:
        return [self.curriculum]

    def env_budgets(self, budget: int) -> set[int]:
        return env_step_budgets(budget, self.curriculum.k)

    def play_options(self, training: bool) -> dict[str, Any]:
        """Training batches (the greedy baseline's too) start after k oracle actions; evaluations at the reset."""
        return {"oracle_prefix": self.curriculum.k} if training else {}

    def observe(self, trajectories: Sequence[Trajectory]) -> None:
        self._played.extend(episode_stats(t) for t in trajectories)

    def step_metrics(self, step: TrainStep) -> dict[str, float]:
        """k and success per k over every process's episodes; may move k by success (alike on every process)."""
        played, self._played = self._played, []
        return self.curriculum.observe(gather_object(played))

    def save(self, folder: str) -> None:
        self.curriculum.save(folder)  # the stage measured success moved to

    def load(self, folder: str) -> None:
        self.curriculum.load(folder)


def build(args: Any, train_dataset: Any) -> OraclePrefix:
    curriculum = OraclePrefixCurriculum.from_config(args)
    assert curriculum is not None  # (on only with a schedule)
    return OraclePrefix(curriculum)


register_feature(Feature(name="oracle_prefix", summary="episodes start after the oracle's first k actions (R3)",
                         is_on=lambda args: bool(args.oracle_prefix_schedule), build=build))
