"""The toy family's AgentGym-protocol hook: its (imagined) client reads /create's bare env number."""

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol

PROTOCOL = AgentGymProtocol(bare_create=True)
