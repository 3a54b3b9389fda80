"""How AgentGym's SearchQA server differs from the common protocol (see ``core/agentgym_protocol.py``).

SearchQA: its client sends ``{"id": 0}`` to ``/create`` and reads the bare env number back (it names
envs by ``env_idx`` and episodes by ``id``, which the common protocol already accepts).
"""

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol

PROTOCOL = AgentGymProtocol(bare_create=True)
