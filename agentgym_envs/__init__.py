"""AgentGym environments as text Gymnasium envs.

``import agentgym_envs`` registers every id (``gym.make("AgentGym/TextCraft-Depth1-v0")``);
``gym.make("agentgym_envs:AgentGym/...")`` works without the import. A family in another package
registers with ``agentgym_envs.register_family("my_package")``.
"""

from agentgym_envs.core import MissingExtraError, TaskSpec, TextEnv, TextSpace, get_task, list_tasks
from agentgym_envs.registration import register_envs, register_family

register_envs()

__version__ = "0.1.0"
__all__ = ["MissingExtraError", "TaskSpec", "TextEnv", "TextSpace", "get_task", "list_tasks", "register_envs",
           "register_family"]
