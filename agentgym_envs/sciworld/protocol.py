"""How AgentGym's SciWorld server differs from the common protocol (see ``core/agentgym_protocol.py``).

Its ``data_idx`` counts through AgentGym's own list of (task, variation) pairs, mapped to our item
ids; its ``/reset`` returns the task description and the first "look around" separately
(``task_description``, ``observation``; the client joins them with a newline), plus ``task_name``
and ``var_num``.
"""

from __future__ import annotations

from typing import Any

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol
from agentgym_envs.sciworld.catalog import from_agentgym_data_idx


def _split_first_observation(fields: dict[str, Any], observation: str, info: dict[str, Any]) -> dict[str, Any]:
    if "task_description" not in info:
        return fields
    return {
        **fields,
        "observation": info["first_look"],
        "task_description": info["task_description"],
        "task_name": info.get("sciworld_task"),
        "var_num": info.get("variation"),
    }


PROTOCOL = AgentGymProtocol(item_of=from_agentgym_data_idx, shape_reset=_split_first_observation,
                            extracted_action=True)
