"""How LMRL-Gym's Wordle server differs from the common protocol (see ``core/agentgym_protocol.py``).

Its client reads the vocabulary from ``GET /filtered_vocab?id=`` and writes the rules itself.
"""

from __future__ import annotations

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol
from agentgym_envs.wordle.words import answers


def _vocabulary() -> list[str]:
    return list(answers())


PROTOCOL = AgentGymProtocol(vocabulary=_vocabulary, episode_keys=("seed",))
