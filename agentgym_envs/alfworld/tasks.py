"""ALFWorld id: one family-wide id; the sub-tasks (``splits.json`` keys) are ALFWorld's six task types."""

from agentgym_envs.core.tasks import NAMESPACE, TaskSpec

MAX_TURNS = 30

TASKS = [
    TaskSpec(
        env_id=f"{NAMESPACE}/ALFWorld-v0",
        family="alfworld",
        scenario="embodied household",
        subtask=None,
        entry_point="agentgym_envs.alfworld.env:ALFWorldEnv",
        max_turns=MAX_TURNS,
        extra="alfworld",
        requires=("textworld", "fast_downward", "alfworld"),
        description="ALFWorld household tasks (pick, look, clean, heat, cool, pick two) on TextWorld's PDDL engine",
    )
]
