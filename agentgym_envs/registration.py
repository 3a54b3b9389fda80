"""Registers every implemented task with Gymnasium under the ``AgentGym/`` namespace.

Each family lists its ids in a light ``<family>/tasks.py`` (a ``TASKS`` list of ``TaskSpec``);
adding a family means adding its module name to ``FAMILIES``. Entry points are strings, so no
engine is imported until an env is made.
"""

from __future__ import annotations

import importlib

import gymnasium as gym

from agentgym_envs.core.tasks import add_task

FAMILIES: tuple[str, ...] = ("textcraft", "babyai", "tools", "search", "webshop", "maze", "wordle", "sciworld", "alfworld", "webarena")

#: A served env used locally (``agentgym_envs/server/client.py``); a proxy, not a task, so it is in
#: Gymnasium's registry but not in the task table (``agentgym list`` and the registry tests skip it).
REMOTE_ENV_ID = "AgentGym/Remote-v0"


def register_envs() -> None:
    """Add every family's specs to the task table and to Gymnasium's registry (idempotent)."""
    for family in FAMILIES:
        module = importlib.import_module(f"agentgym_envs.{family}.tasks")
        for spec in module.TASKS:
            add_task(spec)
            if spec.env_id not in gym.registry:
                gym.register(
                    id=spec.env_id,
                    entry_point=spec.entry_point,
                    max_episode_steps=spec.max_turns,
                    kwargs={"task_id": spec.env_id, **spec.kwargs},
                )
    if REMOTE_ENV_ID not in gym.registry:
        gym.register(id=REMOTE_ENV_ID, entry_point="agentgym_envs.server.client:RemoteEnv")
