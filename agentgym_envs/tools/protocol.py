"""How AgentGym's tool and SqlGym servers differ from the common protocol (see ``core/agentgym_protocol.py``).

The tool envs and SqlGym (BIRD): their clients take ``/create``'s whole JSON reply as the env number. The
tool servers reply to ``/step`` with the reward so far (their env's ``reward``), not the step's.
"""

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol

PROTOCOL = AgentGymProtocol(bare_create=True, reward_so_far=True)
#: SqlGym's client (BIRD) names the episode ``item_id``.
SQLGYM_PROTOCOL = AgentGymProtocol(bare_create=True, episode_keys=("item_id",))
