"""A key/value cache that appends in place: transformers' ``DynamicCache`` with room reserved for a turn.

``DynamicLayer.update`` concatenates each step's new states onto the layer's cache, so every decode step copies
every layer's whole cache: at the rollout-speed shape (16 episodes, a context of about a thousand tokens, 30
layers) that ``torch.cat`` took 22.5 of 56 s of a 4-turn rollout on 2 CPU cores. A ``ReservedLayer`` keeps its
states in buffers sized for the turn (the prompt plus the most tokens it may sample) and writes each step's
position into them; its ``keys`` / ``values`` are views of the filled part, so everything that reads a
``DynamicLayer`` (masks, ``get_seq_length``, cropping, the HF engine's kept prefixes) reads it unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose states live in buffers with room for ``capacity`` positions.

    A write that would not fit (a longer turn than reserved), or a cache whose tensors were replaced by another
    operation (a beam search's reordering), moves the states into new buffers of at least twice the old room,
    so the layer never fails where ``DynamicLayer`` works: it only copies less.
    """

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = max(int(capacity), 1)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new states after the kept ones and return the layer's whole keys and values (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.keys.shape[-2] if self.keys.dim() == key_states.dim() else 0
        end = length + key_states.shape[-2]
        if not self._fits(key_states, value_states, end):
            self._move_to_new_buffers(key_states, value_states, length, end)
        assert self._key_buffer is not None and self._value_buffer is not None
        self._key_buffer[..., length:end, :] = key_states
        self._value_buffer[..., length:end, :] = value_states
        self.keys = self._key_buffer[..., :end, :]
        self.values = self._value_buffer[..., :end, :]
        return self.keys, self.values

    def _fits(self, key_states: torch.Tensor, value_states: torch.Tensor, end: int) -> bool:
        """Whether the buffers hold the current states at their start and have room up to ``end``."""
        keys, values = self._key_buffer, self._value_buffer
        if keys is None or values is None or end > keys.shape[-2]:
            return False
        if keys.shape[:-2] != key_states.shape[:-2] or keys.shape[-1] != key_states.shape[-1]:
            return False
        if values.shape[:-2] != value_states.shape[:-2] or values.shape[-1] != value_states.shape[-1]:
            return False
        empty = self.keys.dim() != key_states.dim()
        return empty or (self.keys.data_ptr() == keys.data_ptr() and self.values.data_ptr() == values.data_ptr())

    def _move_to_new_buffers(self, key_states: torch.Tensor, value_states: torch.Tensor, length: int, end: int
                             ) -> None:
        """Allocate buffers with room for ``end`` positions (at least double the old room) holding the kept states."""
        old_room = self._key_buffer.shape[-2] if self._key_buffer is not None else 0
        room = max(self.capacity, end, 2 * old_room)
        key_buffer = key_states.new_empty((*key_states.shape[:-2], room, key_states.shape[-1]))
        value_buffer = value_states.new_empty((*value_states.shape[:-2], room, value_states.shape[-1]))
        if length:
            key_buffer[..., :length, :] = self.keys
            value_buffer[..., :length, :] = self.values
        self._key_buffer, self._value_buffer = key_buffer, value_buffer

    def reset(self) -> None:
        """Drop the states and their buffers."""
        self._key_buffer = self._value_buffer = None
        super().reset()


def reserved_cache(config: Any, capacity: int) -> DynamicCache:
    """A ``DynamicCache`` for ``config``'s model whose full-attention layers reserve ``capacity`` positions (sliding
    and other layer kinds stay as transformers makes them)."""
    cache = DynamicCache(config=config)
    cache.layers = [ReservedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
