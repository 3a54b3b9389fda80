"""``OptimizerStepGuard``: the rules the trainer checks before every optimizer step (idle steps, non-finite
gradients), a TrainerCallback beside it."""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import TrainerCallback

from agentgym_trl.metrics import IDLE_STEP, NONFINITE_GRAD_STEP

logger = logging.getLogger(__name__)


class OptimizerStepGuard(TrainerCallback):
    """Two rules checked before every optimizer step, so a step never moves the weights for nothing or into NaN.

    * Idle steps (with ``skip_zero_advantage``): when no row on any process has a non-zero advantage, the
      gradients are zero, but Adam's momentum would still move every weight.
    * Non-finite gradients (a bf16 kernel's NaN, an overflow): applied, they would turn every weight into NaN and
      the next rollout would crash.

    Either way the gradients are set to None: the optimizer skips every parameter and its state is untouched. The
    learning-rate scheduler still advances one step. Logged as ``train/idle_step`` and ``train/nonfinite_grad_step``.
    """

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.rows_that_teach = 0
        self.counted = False

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start counting this step's rows that teach afresh."""
        self.rows_that_teach = 0
        self.counted = False

    def count(self, rows: int) -> None:
        """Add rows with a non-zero advantage from one micro-batch of this step.

        Args:
            rows: how many rows of the micro-batch teach (0 when none does).
        """
        self.rows_that_teach += rows
        self.counted = True

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Drop the gradients (the step then leaves the weights and the optimizer state alone) when no process had
        a row that teaches or a gradient is non-finite; log both.
        """
        trainer = self.trainer
        metrics = trainer._metrics["train"]
        parameters = [p for group in trainer.optimizer.param_groups for p in group["params"]]
        idle = False
        if self.counted:  # else the loss ran whole (skip_zero_advantage off or not applicable): nothing to say
            device = trainer.accelerator.device
            taught = trainer.accelerator.reduce(torch.tensor(float(self.rows_that_teach), device=device), "sum")
            idle = taught.item() == 0
            metrics[IDLE_STEP].append(float(idle))
        grads = [p.grad for p in parameters if p.grad is not None]  # all-reduced already: every process agrees
        nonfinite = bool(grads) and not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())
        metrics[NONFINITE_GRAD_STEP].append(float(nonfinite))
        if nonfinite:
            logger.warning("step %d: non-finite gradients; the step is skipped (the weights and the optimizer state "
                           "stay as they were)", state.global_step + 1)
        if idle or nonfinite:
            for parameter in parameters:
                parameter.grad = None
