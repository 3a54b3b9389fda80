"""MAZE id: one family-wide id; the sub-tasks (``splits.json`` keys) are maze sizes."""

from agentgym_envs.core.tasks import NAMESPACE, TaskSpec

MAX_TURNS = 15

TASKS = [
    TaskSpec(
        env_id=f"{NAMESPACE}/Maze-v0",
        family="maze",
        scenario="digital game",
        subtask=None,
        entry_point="agentgym_envs.maze.env:MazeEnv",
        max_turns=MAX_TURNS,
        extra="maze",
        description="reach the goal of a hidden grid maze (7x7 to 13x13) from the walls next to you",
    )
]
