"""The policy's weights as an engine loads them: one place for what a sync sends, under every wrapper.

LoRA merged into the base weights (``merged_adapters``) and its own tensors left out, FSDP2 / tensor-parallel
shards gathered into whole tensors (``whole_tensor``), the gae value head left out (vLLM knows no such tensor),
under the names a plain HF checkpoint uses (``policy_weights``). ZeRO-3's parameters are gathered by the caller's
``unwrap_model_for_generation`` before this reads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from agentgym_trl.value_head import VALUE_HEAD_ATTRIBUTE

EXCLUDED_PREFIXES = (f"{VALUE_HEAD_ATTRIBUTE}.",)  # gae's critic head lives on the policy; vLLM knows no such tensor


def policy_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's tensors under the names a plain HF checkpoint uses: LoRA merged into the base weights
    (call inside ``merged_adapters``), LoRA's own tensors and the gae value head left out, FSDP2 shards
    gathered into whole tensors (``full_tensor``: a collective, so every rank must consume this iterator to
    the end, in the same order, even one that discards the tensors)."""
    peft_prefix = getattr(model, "prefix", None)  # "lora_" on a PeftModel
    for name, tensor in model.state_dict().items():
        if peft_prefix is not None:
            if peft_prefix in name or "original_module" in name:
                continue
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            name = name.replace("modules_to_save.default.", "")
        if name.startswith(EXCLUDED_PREFIXES):
            continue
        yield name, whole_tensor(tensor)


def whole_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself, or, for an FSDP2 / tensor-parallel ``DTensor``, the whole tensor gathered from every rank
    (a shard's storage cannot be written to a file: safetensors fails on its data pointer). Shards offloaded to
    the CPU are gathered on the mesh's device, as TRL does.

    Args:
        tensor: a state-dict value.

    Returns:
        A plain tensor holding the whole value.
    """
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return tensor
    if not isinstance(tensor, DTensor):
        return tensor
    mesh_device = tensor.device_mesh.device_type
    if tensor.device.type != mesh_device:
        tensor = tensor.to(mesh_device)
    return tensor.full_tensor()


class merged_adapters:
    """Context that merges a PEFT model's adapters for the weight copy and unmerges them after."""

    def __init__(self, model: Any):
        self.model = model
        self.peft = hasattr(model, "merge_adapter") and hasattr(model, "unmerge_adapter")

    def __enter__(self) -> Any:
        if self.peft:
            self.model.merge_adapter()
        return self.model

    def __exit__(self, *exc: Any) -> None:
        if self.peft:
            self.model.unmerge_adapter()
