"""Registers every implemented task with Gymnasium under the ``AgentGym/`` namespace.

A family is one package: a light ``tasks.py`` lists its ids (a ``TASKS`` list of ``TaskSpec``, entry
points as strings, so no engine is imported until an env is made) and declares what other rooms
need to know of it (server weight, foreign action, AgentGym-protocol hook). The built-in families
are the one line ``FAMILIES``; any other package registers with ``register_family("my_package")``.
"""

from __future__ import annotations

import importlib

import gymnasium as gym

from agentgym_envs.core.env import TURN_BUDGET_WRAPPER
from agentgym_envs.core.tasks import TaskSpec, add_task

FAMILIES: tuple[str, ...] = ("textcraft", "babyai", "tools", "search", "webshop", "maze", "wordle", "sciworld",
                              "alfworld", "webarena")

#: A served env used locally (``agentgym_envs/server/client.py``); a proxy, not a task, so it is in
#: Gymnasium's registry but not in the task table (``agentgym list`` and the registry tests skip it).
REMOTE_ENV_ID = "AgentGym/Remote-v0"


def register_task(spec: TaskSpec) -> None:
    """Give Gymnasium the spec's declared ``EnvSpec`` (unless the id is registered) and add the spec to the
    task table (idempotent)."""
    if spec.env_id not in gym.registry:
        if spec.registration is None:
            raise ValueError(f"{spec.env_id} declares no entry point: make its spec with TaskSpec.declare")
        declared = spec.registration
        gym.register(id=spec.env_id, entry_point=declared.entry_point, max_episode_steps=declared.max_episode_steps,
                     kwargs=dict(declared.kwargs), additional_wrappers=(TURN_BUDGET_WRAPPER,))
    add_task(spec)


def register_family(package: str) -> list[TaskSpec]:
    """Register the family in ``package`` (any importable package with a ``tasks.py``; idempotent).

    Args:
        package: the family's package, e.g. ``"agentgym_envs.textcraft"`` or ``"my_envs.chess"``; its
            ``tasks.TASKS`` lists the family's specs.

    Returns:
        The family's specs, as ``list_tasks`` now lists them.
    """
    specs = list(importlib.import_module(f"{package}.tasks").TASKS)
    for spec in specs:
        register_task(spec)
    return specs


def register_envs() -> None:
    """Register every built-in family and the remote proxy (idempotent)."""
    for family in FAMILIES:
        register_family(f"agentgym_envs.{family}")
    if REMOTE_ENV_ID not in gym.registry:
        gym.register(id=REMOTE_ENV_ID, entry_point="agentgym_envs.server.client:make_remote_env")
