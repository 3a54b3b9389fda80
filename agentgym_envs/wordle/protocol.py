"""How LMRL-Gym's Wordle server differs from the common protocol (see ``core/agentgym_protocol.py``).

Its client reads the vocabulary from ``GET /filtered_vocab?id=`` and writes the rules itself.
"""

from __future__ import annotations

from typing import Any

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol


def _vocabulary(env: Any) -> list[str]:
    return list(env.vocabulary_words())


PROTOCOL = AgentGymProtocol(vocabulary=_vocabulary, episode_keys=("seed",))
