"""Suite-wide fixtures."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def keep_torch_threads() -> Iterator[None]:
    """A trainer or an example run gives torch every core (its default); the next test gets back what it had."""
    torch = sys.modules.get("torch")  # never imported here: env-only tests stay light
    threads = torch.get_num_threads() if torch is not None else None
    yield
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
