"""How AgentGym's WebShop server differs from the common protocol (see ``core/agentgym_protocol.py``).

WebShop: its client takes ``/create``'s whole JSON reply as the env number (it reads the text as
``state``, a field every reply carries).
"""

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol

PROTOCOL = AgentGymProtocol(bare_create=True, episode_keys=("session_id",), extracted_action=True)
