"""How LMRL-Gym's Maze server differs from the common protocol (see ``core/agentgym_protocol.py``).

Its client puts its own copy of the rules before the server's first observation, so ``/reset``
answers it with the position description alone.
"""

from __future__ import annotations

from typing import Any

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol
from agentgym_envs.maze.env import FIRST_OBSERVATION


def _without_rules(fields: dict[str, Any], observation: str, info: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "observation": observation.removeprefix(FIRST_OBSERVATION + "\n")}


PROTOCOL = AgentGymProtocol(shape_reset=_without_rules, episode_keys=("game",))
