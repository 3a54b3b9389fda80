"""MAZE id: one family-wide id; the sub-tasks (``splits.json`` keys) are maze sizes."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 15

TASKS = family_tasks("Maze", "maze", "digital game", "MazeEnv", MAX_TURNS,
                     description="reach the goal of a hidden grid maze (7x7 to 13x13) from the walls next to you",
                     protocol="agentgym_envs.maze.protocol:PROTOCOL")
