"""How AgentGym's ALFWorld server differs from the common protocol (see ``core/agentgym_protocol.py``).

Its client reads ``available_actions`` (a field every reply carries where the env lists them) and
appends them to the first observation itself, so ``/reset`` answers without the list.
"""

from __future__ import annotations

from typing import Any

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol

_ACTIONS_HEADER = "\nAVAILABLE ACTIONS: "


def _without_action_list(fields: dict[str, Any], observation: str, info: dict[str, Any]) -> dict[str, Any]:
    if _ACTIONS_HEADER not in observation:
        return fields
    return {**fields, "observation": observation.rsplit(_ACTIONS_HEADER, 1)[0]}


PROTOCOL = AgentGymProtocol(shape_reset=_without_action_list, episode_keys=("game",), extracted_action=True)
