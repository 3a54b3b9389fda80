"""How AgentGym's WebArena server departs from the common protocol (``core/agentgym_protocol.py``).

WebArena: its client names envs by ``env_idx`` (which the common protocol accepts) and the episode by ``idx``.
"""

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol

PROTOCOL = AgentGymProtocol(episode_keys=("idx",))
