"""A text space for free-form strings.

Gymnasium's ``spaces.Text`` only admits strings over a fixed charset (alphanumerics by default),
but an LLM agent answers with arbitrary Unicode, punctuation and newlines. ``TextSpace`` admits any
``str`` up to ``max_length`` characters and samples printable junk, which is exactly what a
conformance checker should throw at an env.
"""

from __future__ import annotations

import multiprocessing
import string
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium.spaces import Space
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

_SAMPLE_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \n"


class TextSpace(Space[str]):
    """Any Python ``str`` with ``min_length <= len(s) <= max_length``."""

    def __init__(self, max_length: int, min_length: int = 0, seed: int | np.random.Generator | None = None):
        if not 0 <= min_length <= max_length:
            raise ValueError(f"need 0 <= min_length <= max_length, got {min_length} and {max_length}")
        self.max_length = int(max_length)
        self.min_length = int(min_length)
        super().__init__(dtype=str, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random printable string; short by default so samples stay readable."""
        upper = min(self.max_length, max(self.min_length, 64))
        length = int(self.np_random.integers(self.min_length, upper + 1))
        chars = self.np_random.choice(list(_SAMPLE_ALPHABET), size=length)
        return "".join(chars.tolist())

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a string within the space's length bounds (any characters)."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        """False: a text of any characters has no fixed-size numpy form."""
        return False

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TextSpace) and (self.min_length, self.max_length) == (
            other.min_length,
            other.max_length,
        )


# Shared memory for ``gym.make_vec(..., vectorization_mode="async")``, whose default ``shared_memory=True``
# otherwise refuses a space it does not know. A string is stored as its code points + 1 in ``max_length``
# int32 slots (0 ends it), so any Unicode, newlines and NUL included, round-trips; 64k characters are 256 kB.
# The vector env reads the memory once and expects a live view (as a NumPy array is), so ``SharedTexts``
# decodes on access, and a copy of it (what the vector env returns by default) is a plain tuple.
_CODEPOINTS = np.dtype("<u4")


class SharedTexts(Sequence[str]):
    """The strings of ``n`` envs in shared memory, decoded when read."""

    def __init__(self, memory: Any, n: int, max_length: int):
        self._rows = np.frombuffer(memory.get_obj(), dtype=np.int32).reshape((n, max_length))

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        row = self._rows[index]
        ends = np.flatnonzero(row == 0)
        used = row[: ends[0] if ends.size else row.size]
        return (used - 1).astype(_CODEPOINTS).tobytes().decode("utf-32-le", "surrogatepass")

    def __eq__(self, other: Any) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@create_shared_memory.register(TextSpace)
def _create_text_space_memory(space: TextSpace, n: int = 1, ctx: ModuleType = multiprocessing) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * space.max_length)


@read_from_shared_memory.register(TextSpace)
def _read_text_space_memory(space: TextSpace, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(shared_memory, n, space.max_length)


@write_to_shared_memory.register(TextSpace)
def _write_text_space_memory(space: TextSpace, index: int, value: str, shared_memory: Any) -> None:
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype=_CODEPOINTS).astype(np.int32) + 1
    rows = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((-1, space.max_length))
    rows[index, : codes.size] = codes[: space.max_length]
    rows[index, codes.size :] = 0
