"""What a training feature is: its hooks (``TrainingFeature``), its declaration (``Feature``) and the registry.

The trainer calls every active feature's hooks in registration order, and each hook does nothing unless the feature
overrides it, so a feature implements only what it uses. Every process calls every hook, in the same order: a hook
may gather across processes (``step_metrics`` does for the learnability estimates and the oracle prefix).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TrainerCallback

from agentgym_envs.core.episode import Trajectory
from agentgym_trl.rollout import RolloutResult
from agentgym_trl.scoring import ScoringBatch

#: a training row: its ``env_id``, ``item_id`` and TRL's columns
Row = dict[str, Any]


@dataclass
class TrainStep:
    """One training rollout as the features see it, shared between their hooks for that rollout.

    Args:
        rows: this process's rows (TRL's groups of ``num_generations``); a feature may move them to other items,
            in place, so TRL's reward kwargs and logs name the items played.
        budget: the step's turn budget.
        step: the global step being rolled out.
        play: plays rows with the policy at ``budget``; every feature ``observe``s the episodes.
        draw_items: ``draw(count)`` of train items for the step (set by the item-draws feature; None without one).
        item_rows: each train item's whole row, which a moved row takes (with ``draw_items``).
        drawn: the items drawn this step, by every draw (the learnability summary reads them).
    """

    rows: list[Row]
    budget: int
    step: int
    play: Callable[[list[Row]], RolloutResult]
    draw_items: Callable[[int], list[tuple[str, int]]] | None = None
    item_rows: dict[tuple[str, int], Row] = field(default_factory=dict)
    drawn: list[tuple[str, int]] = field(default_factory=list)


class TrainingFeature:
    """A per-step training feature. Every hook is a no-op here; ``trainer`` is set by ``attach``."""

    #: True for the feature whose ``loss_parts`` adds a loss of its own to TRL's (the critic); at most one
    adds_loss: bool = False

    def __init__(self) -> None:
        self.trainer: Any = None

    # ---- set-up ---------------------------------------------------------------------------------------------
    def callbacks(self) -> list[TrainerCallback]:
        """TrainerCallbacks to register with TRL's ``Trainer`` (built before it, so its callbacks see them)."""
        return []

    def attach(self, trainer: Any) -> None:
        """Called once TRL has built the trainer (model, accelerator, generators), before the optimizer exists."""
        self.trainer = trainer

    # ---- the rollout ----------------------------------------------------------------------------------------
    def env_budgets(self, budget: int) -> set[int]:
        """Env step budgets this feature's training episodes may use besides ``budget`` (their envs are kept)."""
        return set()

    def play_options(self, training: bool) -> dict[str, Any]:
        """Extra arguments of ``rollout.run_rollout`` for every batch played (training or evaluation)."""
        return {}

    def before_play(self, step: TrainStep) -> None:
        """Before the step's rows are played: draw or move them, offer ``step.draw_items``."""

    def observe(self, trajectories: Sequence[Trajectory]) -> None:
        """Every training episode of this process played this step, refills included, batch by batch."""

    def refill(self, step: TrainStep, result: RolloutResult) -> RolloutResult:
        """After the rows are played: replace episodes (with ``step.play``); returns the step's rollout."""
        return result

    def step_metrics(self, step: TrainStep) -> dict[str, float]:
        """After every refill: this step's metrics (logged under their names)."""
        return {}

    def after_rollout(self, batch: ScoringBatch, budget: int) -> None:
        """After a training rollout, before TRL scores it: add to the batch what the estimator reads."""

    # ---- the loss -------------------------------------------------------------------------------------------
    def loss_parts(self, policy_loss: Callable[[], torch.Tensor],
                   inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """TRL's policy loss (``policy_loss()``) and this feature's own loss (None when none applies)."""
        return policy_loss(), None

    def weighted_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """This feature's loss as it joins the policy loss (its coefficient, gradient accumulation)."""
        return loss

    def loss_metrics(self, loss: torch.Tensor) -> dict[str, float]:
        """The metrics of this feature's loss over the whole batch."""
        return {}

    # ---- checkpoints ----------------------------------------------------------------------------------------
    def model_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The model's weights to save, when this feature changes what they are (None: the Trainer's own)."""
        return None

    def save(self, folder: str) -> None:
        """Write this feature's state into a checkpoint folder (called on the process that saves)."""

    def load(self, folder: str) -> None:
        """Restore what ``save`` wrote into a checkpoint folder (a resumed run)."""


@dataclass(frozen=True)
class Feature:
    """One training feature's declaration.

    Args:
        name: the key in ``FEATURES`` and in ``AgentGRPOTrainer.features``.
        summary: what it does, in a few words.
        is_on: whether a config (``AgentGRPOConfig``) turns it on.
        build: ``(config, train_dataset) -> TrainingFeature``, called before TRL's trainer is built.
    """

    name: str
    summary: str
    is_on: Callable[[Any], bool]
    build: Callable[[Any, Any], TrainingFeature]


#: every registered feature, in the order the trainer calls their hooks
FEATURES: dict[str, Feature] = {}


def register_feature(feature: Feature) -> Feature:
    """Add a feature under its name (a second one of the same name is refused)."""
    if feature.name in FEATURES:
        raise ValueError(f"a training feature named {feature.name!r} is registered already")
    FEATURES[feature.name] = feature
    return feature


def active_features(config: Any, train_dataset: Any) -> dict[str, TrainingFeature]:
    """The features ``config`` turns on, built, by name in registration order."""
    built = {name: feature.build(config, train_dataset) for name, feature in FEATURES.items()
             if feature.is_on(config)}
    losses = [name for name, feature in built.items() if feature.adds_loss]
    if len(losses) > 1:
        raise ValueError(f"only one training feature may add a loss, got {losses}")
    return built
