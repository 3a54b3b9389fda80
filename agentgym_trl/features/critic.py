"""The critic of ``advantage_estimator='gae'`` (``value_head.py``): a value head attached to the policy (or on a
separate small model), its values for the estimator, its value loss beside TRL's policy loss (micro-batches
included), and its weights saved beside the model (``value_head.pt``; the model is saved without them, so it loads
as a plain causal LM). On when the estimator needs a critic (``value_head`` set)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from accelerate.utils import is_peft_model

from agentgym_trl.estimators import ESTIMATORS
from agentgym_trl.fast_training import action_mask
from agentgym_trl.features.base import Feature, TrainingFeature, register_feature
from agentgym_trl.metrics import VALUE_LOSS
from agentgym_trl.value_head import VALUE_HEAD_ATTRIBUTE, VALUE_HEAD_FILE, ValueHead, attach_value_head, value_loss


class Critic(TrainingFeature):
    """The value head (``value_head``, once attached) and its loss."""

    adds_loss = True

    def __init__(self, mode: str, critic_model: str | None, value_coef: float):
        super().__init__()
        self.mode, self.critic_model, self.value_coef = mode, critic_model, value_coef
        self.value_head: ValueHead | None = None

    def attach(self, trainer: Any) -> None:
        """The head joins the model before the optimizer and DDP exist, so both see its parameters; the estimator
        reads its values through the advantage adapter."""
        super().attach(trainer)
        self.value_head = attach_value_head(trainer.model, self.mode, self.critic_model)
        trainer.advantage_adapter.critic_values = self.value_estimates

    def value_estimates(self, output: dict[str, Any]) -> torch.Tensor:
        """The critic's ``(B, T)`` estimates of a scored rollout's states, from one no-grad forward."""
        ids, attention, width = whole_sequences(output)
        trainer = self.trainer
        with torch.no_grad():
            if self.value_head.critic is not None:
                return self.value_head.critic_values(ids, attention, width).detach().float()
            with self.value_head.capture(width) as captured:
                trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, width,
                                                           batch_size=trainer.args.per_device_train_batch_size)
        return torch.cat(captured, dim=0).detach().float()

    def loss_parts(self, policy_loss: Callable[[], torch.Tensor],
                   inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """TRL's policy loss and the value loss, the values read from that very forward (or the separate critic's).
        Evaluation batches carry no value targets: no value loss."""
        if self.value_head.critic is not None:
            loss, values = policy_loss(), self.value_head.critic_values(*whole_sequences(inputs))
        else:
            with self.value_head.capture(inputs["completion_ids"].size(1)) as captured:
                loss = policy_loss()
            values = torch.cat(captured, dim=0)
        if "value_targets" not in inputs:
            return loss, None
        return loss, value_loss(values, inputs["value_targets"], action_mask(inputs))

    def weighted_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return self.value_coef * loss / self.trainer.current_gradient_accumulation_steps

    def loss_metrics(self, loss: torch.Tensor) -> dict[str, float]:
        return {VALUE_LOSS: float(self.trainer.accelerator.gather(loss.detach()).mean())}

    def model_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The model without its value head (a LoRA checkpoint holds only the adapter: nothing to leave out)."""
        if is_peft_model(self.trainer.model):
            return None
        weights = self.trainer.accelerator.unwrap_model(self.trainer.model).state_dict()
        return {name: value for name, value in weights.items() if not name.startswith(f"{VALUE_HEAD_ATTRIBUTE}.")}

    def save(self, folder: str) -> None:
        torch.save(self.value_head.state_dict(), os.path.join(folder, VALUE_HEAD_FILE))

    def load(self, folder: str) -> None:
        path = os.path.join(folder, VALUE_HEAD_FILE)
        if os.path.exists(path):
            self.value_head.load_state_dict(torch.load(path, map_location="cpu"))


def whole_sequences(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Prompt + completion ids, their attention mask, and the completion width (TRL's forward inputs)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return ids, attention, batch["completion_ids"].size(1)


def build(args: Any, train_dataset: Any) -> Critic:
    return Critic(args.value_head, args.critic_model, args.value_coef)


register_feature(Feature(name="critic", summary="gae's value head, its value loss and its checkpoint",
                         is_on=lambda args: ESTIMATORS[args.advantage_estimator].needs_critic, build=build))
