"""ALFWorld id: one family-wide id; the sub-tasks (``splits.json`` keys) are ALFWorld's six task types."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 30

TASKS = family_tasks(
    "ALFWorld",
    family="alfworld",
    scenario="embodied household",
    entry_point="agentgym_envs.alfworld.env:ALFWorldEnv",
    max_turns=MAX_TURNS,
    extra="alfworld",
    requires=("textworld", "fast_downward", "alfworld"),
    description="ALFWorld household tasks (pick, look, clean, heat, cool, pick two) on TextWorld's PDDL engine",
)
