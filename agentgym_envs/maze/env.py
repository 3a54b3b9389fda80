"""MAZE as a text Gymnasium env (``AgentGym/Maze-v0``).

As in AgentGym's MAZE (from LMRL-Gym), the agent never sees the map: each observation gives its
position, the goal's position and which of the four neighbouring squares are walls. Actions are
``move up``, ``move down``, ``move left`` and ``move right``. Walking into a wall is rejected
(``valid_action=False``) and the agent stays where it is. Reward 1 when the goal is reached.
"""

from __future__ import annotations

import re

import numpy as np

from agentgym_envs.core import Outcome, Start, TextEnv, normalize_command
from agentgym_envs.maze.mazes import MOVES, SIZES, Maze, item_size, make_maze, next_move

INSTRUCTION = """You are in a maze and must reach the goal square in as few moves as possible. You cannot see the maze: after each move you are told your position, the goal's position and which of the four squares next to you are walls.

Positions are given as (row, column). Row 0 is the top row and column 0 the leftmost column: moving down increases the row by 1, moving right increases the column by 1.

Actions (exactly one per turn):
- move up
- move down
- move left
- move right

Moving into a wall does nothing. Every turn, answer in this format:
Thought:
<your reasoning>

Action:
<the action>"""

_DIRECTION_WORDS = {"north": "up", "south": "down", "west": "left", "east": "right"}
_MOVE = re.compile(r"^(?:(?:move|go|step|walk)\s+)?(up|down|left|right|north|south|east|west)$")
_WHERE = {"up": "above you", "down": "below you", "left": "to your left", "right": "to your right"}


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


class MazeEnv(TextEnv):
    family = "maze"

    def __init__(self, task_id: str, render_mode: str | None = None):
        super().__init__(task_id, render_mode=render_mode)
        self.maze: Maze | None = None
        self.position: tuple[int, int] = (0, 0)

    # ---- episode ------------------------------------------------------------------------------
    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        self.maze = make_maze(item_id)
        self.position = self.maze.start
        side = self.maze.side
        intro = f"The maze is a {side} by {side} grid (rows and columns 0 to {side - 1}, the outer ring is wall).\n" + self._surroundings()
        return Start(INSTRUCTION, intro, {"size": self.maze.size_name, "goal": self.maze.goal, "start": self.maze.start})

    def _act(self, action: str) -> Outcome:
        assert self.maze is not None
        move = self._move_of(action)
        if move is None:
            return Outcome(
                f"'{action[:100]}' is not a valid action. Valid actions: move up, move down, move left, move right.\n"
                + self._surroundings(),
                valid=False,
            )
        target = self.maze.step(self.position, move)
        if target is None:
            return Outcome(f"There is a wall {_WHERE[move]}; you did not move.\n" + self._surroundings(), valid=False)
        self.position = target
        if target == self.maze.goal:
            row, col = target
            return Outcome(f"You moved {move} and reached the goal at ({row}, {col}). You solved the maze!",
                           progress=1.0, score=1.0, done=True, success=True)
        return Outcome(f"You moved {move}.\n" + self._surroundings())

    def _surroundings(self) -> str:
        assert self.maze is not None
        walls = [_WHERE[m] for m in MOVES if self.maze.step(self.position, m) is None]
        open_ = [_WHERE[m] for m in MOVES if self.maze.step(self.position, m) is not None]
        lines = [f"You are at ({self.position[0]}, {self.position[1]}). The goal is at ({self.maze.goal[0]}, {self.maze.goal[1]})."]
        if walls:
            lines.append(f"There is a wall {_join(walls)}.")
        if open_:
            lines.append(f"The way is open {_join(open_)}.")
        return "\n".join(lines)

    @staticmethod
    def _move_of(action: str) -> str | None:
        match = _MOVE.match(normalize_command(action))
        if match is None:
            return None
        word = match.group(1)
        return _DIRECTION_WORDS.get(word, word)

    # ---- helpers for agents -------------------------------------------------------------------
    def available_actions(self) -> list[str]:
        return [f"move {m}" for m in MOVES]

    def oracle_action(self) -> str:
        assert self.maze is not None, "call reset() first"
        if self.position == self.maze.goal:
            return "Thought:\nI am on the goal.\n\nAction:\nmove up"
        move = next_move(self.maze, self.position)
        return f"Thought:\nA shortest path to the goal starts by going {move}.\n\nAction:\nmove {move}"

    def render(self) -> str | None:
        text = super().render()
        if text is None or self.maze is None:
            return text
        return text + self.maze.render(self.position) + "\n"

    def accepts_item(self, item_id: int) -> bool:
        return item_size(item_id) is not None and item_size(item_id) in SIZES
