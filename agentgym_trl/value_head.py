"""The critic of ``advantage_estimator="gae"``: a linear value head on the policy's last hidden state,
or on a separate small model's.

TRL scores completions with a fused LM head that never returns hidden states, so the head reads
them from the backbone's output with a forward hook, only while ``capture`` is open (the reference
pass of a LoRA run goes through the same backbone and must not be captured). The head is a
submodule of the causal LM, so DDP syncs its gradients and the Trainer's optimizer steps it; it is
saved beside each checkpoint (``value_head.pt``) because a LoRA checkpoint holds only the adapter.

``shared``: the value loss trains the trunk too (one network, as in PPO with a shared body);
``detached``: the hidden states are detached, so only the head learns and the policy is exactly what
the policy loss makes it; ``separate``: the head sits on its own backbone (``critic_model``, a small
model with the policy's tokenizer) that runs on the same tokens and learns with the head, leaving the
policy's trunk alone. The separate critic is a submodule too (DDP, optimizer, ``value_head.pt``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

VALUE_HEAD_ATTRIBUTE = "agent_value_head"
VALUE_HEAD_FILE = "value_head.pt"


class ValueHead(nn.Module):
    """``V(s_t) = w . h_t + b`` from the hidden state before each completion token.

    Starts near V = 0 with small random ``w`` (not zero: a zero ``w`` passes no gradient to the backbone under it).
    """

    def __init__(self, hidden_size: int, detach: bool, critic: nn.Module | None = None):
        super().__init__()
        self.critic = critic  # a separate backbone, or None: the policy's own hidden states (the hook)
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.normal_(self.linear.weight, std=1e-3)
        nn.init.zeros_(self.linear.bias)
        self.detach = detach
        self._captured: list[torch.Tensor] | None = None
        self._keep = 0

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Values of hidden states, in the head's dtype; detached first with ``detach``, so the value loss then
        trains the head alone, not the backbone under it.

        Args:
            hidden: ``(..., hidden_size)`` states.

        Returns:
            ``(...)`` values.
        """
        hidden = hidden.detach() if self.detach else hidden
        return self.linear(hidden.to(self.linear.weight.dtype)).squeeze(-1)

    def critic_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int) -> torch.Tensor:
        """The separate critic's ``(rows, width)`` values of the states before each of the last ``width`` tokens."""
        hidden = self.critic(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self(hidden[:, -width - 1 : -1])

    def _on_backbone_output(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._captured is None:
            return
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        # the state before completion token j is the position that predicts it: the last keep + 1 but one
        self._captured.append(self(hidden[:, -self._keep - 1 : -1]))

    @contextmanager
    def capture(self, completion_width: int) -> Iterator[list[torch.Tensor]]:
        """Collect the values of every backbone forward inside the block, one ``(rows, width)`` tensor per call."""
        self._captured, self._keep = [], completion_width
        try:
            yield self._captured
        finally:
            self._captured = None


def causal_lm_of(model: Any) -> Any:
    """The causal LM under a PEFT wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def attach_value_head(model: Any, mode: str, critic_model: str | None = None) -> ValueHead:
    """Put a value head on ``model`` (hooked to its backbone's output, or on a separate critic) and return it."""
    causal_lm = causal_lm_of(model)
    existing = getattr(causal_lm, VALUE_HEAD_ATTRIBUTE, None)
    if isinstance(existing, ValueHead):
        return existing
    weight = next(causal_lm.parameters())
    if mode == "separate":
        critic = load_critic(critic_model, causal_lm.config.get_text_config().vocab_size)
        head = ValueHead(critic.config.get_text_config().hidden_size, detach=False, critic=critic)
    else:
        head = ValueHead(causal_lm.config.get_text_config().hidden_size, detach=mode == "detached")
        causal_lm.base_model.register_forward_hook(head._on_backbone_output)
    head.to(device=weight.device)
    setattr(causal_lm, VALUE_HEAD_ATTRIBUTE, head)
    return head


def load_critic(path: str | None, vocab_size: int) -> nn.Module:
    """The separate critic's backbone (no LM head), in fp32; it must read the policy's token ids."""
    from transformers import AutoModel

    from agentgym_trl.models import local_model_folder

    if not path:
        raise ValueError("value_head='separate' needs critic_model")
    critic = AutoModel.from_pretrained(local_model_folder(path), dtype=torch.float32)
    if critic.config.get_text_config().vocab_size != vocab_size:
        raise ValueError(f"the critic {path} has a vocabulary of {critic.config.get_text_config().vocab_size} ids, "
                         f"the policy {vocab_size}: the critic must use the policy's tokenizer")
    return critic


def value_loss(values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Squared error of the values against their targets: a mean over each row's action tokens, then over rows."""
    values, mask = values.float(), mask.float()
    per_row = ((values - targets.float()) ** 2 * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return 0.5 * per_row.mean()
