"""ALFWorld id: one family-wide id; the sub-tasks (``splits.json`` keys) are ALFWorld's six task types."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 30

TASKS = family_tasks(
    "ALFWorld", "alfworld", "embodied household", "ALFWorldEnv", MAX_TURNS,
    requires=("textworld", "fast_downward", "alfworld"),
    description="ALFWorld household tasks (pick, look, clean, heat, cool, pick two) on TextWorld's PDDL engine",
    weight=2,  # a game engine per env, heavier than a grid world
    protocol="agentgym_envs.alfworld.protocol:PROTOCOL",
)
