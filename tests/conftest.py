"""Suite-wide fixtures: torch's thread count kept per test; ``make_env`` (envs closed after the test) and, for a
module that sets ``ENV_ID``, ``env`` (AgentGym's wording) and ``ours`` (``extra_feedback=True``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def keep_torch_threads() -> Iterator[None]:
    """A trainer or an example run gives torch every core (its default); the next test gets back what it had."""
    torch = sys.modules.get("torch")  # never imported here: env-only tests stay light
    threads = torch.get_num_threads() if torch is not None else None
    yield
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture
def make_env() -> Iterator[Callable[..., Any]]:
    """``gym.make`` for one test: every env made through it is closed when the test ends, passed or failed."""
    import gymnasium as gym

    made: list[Any] = []

    def make(env_id: str, **kwargs: Any) -> Any:
        env = gym.make(env_id, **kwargs)
        made.append(env)
        return env

    yield make
    for env in reversed(made):
        env.close()


@pytest.fixture
def env(request: pytest.FixtureRequest, make_env: Callable[..., Any]) -> Any:
    """The test module's ``ENV_ID`` as AgentGym has it: its instruction and feedback, the default."""
    return make_env(request.module.ENV_ID)


@pytest.fixture
def ours(request: pytest.FixtureRequest, make_env: Callable[..., Any]) -> Any:
    """The test module's ``ENV_ID`` with our instruction and explanations (``extra_feedback=True``)."""
    return make_env(request.module.ENV_ID, extra_feedback=True)
