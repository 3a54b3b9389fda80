"""MAZE id: one family-wide id; the sub-tasks (``splits.json`` keys) are AgentGym's maze and the generated sizes."""

from agentgym_envs.core.tasks import family_tasks

#: LMRL-Gym's 50 moves (AgentGym's server answers a 51st action with "Failure").
MAX_TURNS = 50

TASKS = family_tasks("Maze", "maze", "digital game", "MazeEnv", MAX_TURNS,
                     description="reach the goal of AgentGym's hidden double-T maze from the walls next to you "
                                 "(train: generated mazes)",
                     protocol="agentgym_envs.maze.protocol:PROTOCOL")
