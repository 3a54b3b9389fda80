"""A toy training feature, added as any feature is: this one module and one ``register_feature``.

``EpisodeCounter`` counts the training episodes the run has played (refills included), logs the count every
step as ``toy/episodes_seen`` and keeps it in its checkpoints (``toy_counter.json``), so a resumed run counts on.
Its option is a field of a config subclass (``ToyConfig.count_episodes``), as a project adds options to TRL's.
Nothing in ``agentgym_trl`` names it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_trl import AgentGRPOConfig
from agentgym_trl.features import FEATURES, Feature, TrainingFeature, TrainStep, register_feature

NAME = "toy_counter"
METRIC = "toy/episodes_seen"
STATE_FILE = "toy_counter.json"


@dataclass
class ToyConfig(AgentGRPOConfig):
    count_episodes: bool = field(default=False, metadata={"help": "Count the training episodes (a toy feature)."})


class EpisodeCounter(TrainingFeature):
    def __init__(self) -> None:
        super().__init__()
        self.seen = 0
        self.loaded_from: str | None = None

    def observe(self, trajectories: Sequence[Any]) -> None:
        self.seen += len(trajectories)

    def step_metrics(self, step: TrainStep) -> dict[str, float]:
        return {METRIC: float(self.seen)}

    def save(self, folder: str) -> None:
        with open(os.path.join(folder, STATE_FILE), "w", encoding="utf-8") as handle:
            json.dump({"seen": self.seen}, handle)

    def load(self, folder: str) -> None:
        with open(os.path.join(folder, STATE_FILE), encoding="utf-8") as handle:
            self.seen = json.load(handle)["seen"]
        self.loaded_from = folder


if NAME not in FEATURES:  # imported by several test modules in one process: registered once
    register_feature(Feature(name=NAME, summary="counts the training episodes (tests)",
                             is_on=lambda args: bool(getattr(args, "count_episodes", False)),
                             build=lambda args, train_dataset: EpisodeCounter()))
