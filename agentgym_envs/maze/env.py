"""MAZE as a text Gymnasium env (``AgentGym/Maze-v0``).

As in AgentGym's MAZE (LMRL-Gym's maze behind AgentGym's ``agentenv-lmrlgym`` server), the agent
never sees the map: each observation gives the goal's position, its own position and which of the
four neighbouring squares are walls. Actions are ``move up``, ``move down``, ``move left`` and
``move right``. Reward 1 when the goal is reached.

By default the conversation and every observation are AgentGym's: the one-line instruction "You are
an expert maze solver.", the acknowledgement, a first observation made of AgentGym's rules and
example followed by the server's description of the start, then the server's description after
every action, whether the move worked, hit a wall or was not a move at all (LMRL-Gym answers all
three the same way; ``info["valid_action"]`` still tells them apart), and "Success" at the goal.
The maze is AgentGym's: item ``k`` (0-24) is game ``k`` of its server, LMRL-Gym's 10x13 double-T
maze from its ``k``-th start square, goal (8, 6); after 50 moves the next action is answered
"Failure" and ends the episode with reward -1, as LMRL-Gym's ``max_steps=50`` (``nonnegative_reward=True``:
reward 0, score -1). Train items are
generated mazes (7x7 to 13x13) played by the same rules: AgentGym has no train games apart from its
25. ``maze="generated"``: every item is a generated maze (items 0-24 too). ``extra_feedback=True``
gives our instruction and explanations (which way is open, "there is a wall above you; you did not
move", why an action is not valid), accepts spellings such as ``up`` or ``go north`` and has no move
limit.
"""

from __future__ import annotations

import re
from importlib import resources

import numpy as np

from agentgym_envs.core import Outcome, ParsedAction, Start, TextEnv, normalize_command
from agentgym_envs.core.parsers import parse_react
from agentgym_envs.maze.mazes import (AGENTGYM_STARTS, MOVES, SIZES, Maze, agentgym_maze, item_size, make_maze,
                                      next_move)

#: LMRL-Gym's move limit in AgentGym's maze server (``setup_maze_env(max_steps=50)``).
MOVE_LIMIT = 50
#: LMRL-Gym's answer to the action after the move limit.
FAILURE = "Failure\n"
#: Which mazes item ids name: AgentGym's 25 games first (``"agentgym"``) or generated mazes only.
MAZES = ("agentgym", "generated")

#: AgentGym's instruction turn (``MazeEnvClient.conversation_start``).
AGENTGYM_INSTRUCTION = "You are an expert maze solver."

#: AgentGym's rules and example, which its client puts before the server's first description
#: (``MazeEnvClient._fully_first_observation``, kept verbatim in agentgym_first_observation.txt: x is the row, y
#: the column, as here).
FIRST_OBSERVATION = (
    resources.files(__package__).joinpath("agentgym_first_observation.txt").read_text(encoding="utf-8").rstrip("\n")
)

#: LMRL-Gym's observation at the goal.
SUCCESS = "Success\n"

#: Our instruction (``extra_feedback=True``).
INSTRUCTION = """You are in a maze and must reach the goal square in as few moves as possible. You cannot see the \
maze: after each move you are told your position, the goal's position and which of the four squares next to you are \
walls.

Positions are given as (row, column). Row 0 is the top row and column 0 the leftmost column: moving down increases the \
row by 1, moving right increases the column by 1.

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


#: LMRL-Gym's order of the wall directions in a description.
_WALL_ORDER = ("right", "left", "up", "down")


def agentgym_client_action(response: str) -> str:
    """The action AgentGym's LMRL-Gym client sends: the text after the first ``Action:`` (the whole
    response if there is none), stripped; the server then needs it to be exactly an action. (The
    client also cuts five characters off a response ending in "</s>": that action is invalid either
    way.)"""
    parts = response.split("Action:")
    return (parts[1] if len(parts) > 1 else parts[0]).strip()


def describe_walls(walls: list[str]) -> str:
    """LMRL-Gym's wall sentence (``describe_objects("wall", ...)``)."""
    if not walls:
        return "There are no walls near you."
    if len(walls) == 1:
        return f"There is a wall {walls[0]}."
    return f"There are walls {', '.join(walls)}."


class MazeEnv(TextEnv):
    """Find the goal of a maze the agent never sees, from its position and the walls around it.

    Actions:
        ``move up``, ``move down``, ``move left``, ``move right`` (``extra_feedback=True`` also takes ``up``,
        ``go north``, ...).

    Rewards:
        1 when the goal square is reached (the episode ends), else 0; the action after 50 moves (AgentGym's rules
        only) is answered "Failure", rewarded -1 as LMRL-Gym does, and ends the episode.

    Options:
        ``maze="generated"``: generated mazes (7x7 to 13x13) for every item instead of AgentGym's double-T maze.
        ``nonnegative_reward=True``: the failure is rewarded 0.
    """

    family = "maze"

    def __init__(self, task_id: str, render_mode: str | None = None, extra_feedback: bool = False,
                 maze: str = "agentgym", nonnegative_reward: bool = False):
        """``extra_feedback=True``: our instruction and explanations instead of AgentGym's, and
        lenient action spellings (``up``, ``go north``, any case), without the move limit.
        ``nonnegative_reward=True``: the failure after the move limit is rewarded 0, not LMRL-Gym's -1.
        ``maze``: ``"agentgym"`` (items 0-24 are AgentGym's 25 games on LMRL-Gym's double-T maze, other items
        generated mazes) or ``"generated"`` (every item a generated maze)."""
        super().__init__(task_id, render_mode=render_mode)
        if maze not in MAZES:
            raise ValueError(f"maze must be one of {MAZES}, not {maze!r}")
        self.extra_feedback = extra_feedback
        self.min_progress = 0.0 if nonnegative_reward else -1.0
        self.maze_kind = maze
        self.moves = 0
        self.maze: Maze | None = None
        self.position: tuple[int, int] = (0, 0)

    # ---- episode ------------------------------------------------------------------------------
    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        agentgym_game = self.maze_kind == "agentgym" and item_id < len(AGENTGYM_STARTS)
        self.maze = agentgym_maze(item_id) if agentgym_game else make_maze(item_id)
        self.position = self.maze.start
        self.moves = 0
        info = {"size": self.maze.size_name, "goal": self.maze.goal, "start": self.maze.start}
        if not self.extra_feedback:
            return Start(AGENTGYM_INSTRUCTION, FIRST_OBSERVATION + "\n" + self._describe(), info)
        height, width = self.maze.side, len(self.maze.rows[0])
        intro = (f"The maze is a {height} by {width} grid (rows 0 to {height - 1}, columns 0 to {width - 1}, the "
                 "outer ring is wall).\n"
                 + self._surroundings())
        return Start(INSTRUCTION, intro, info)

    def _parse(self, response: str) -> ParsedAction:
        if self.extra_feedback:
            return parse_react(response)
        return ParsedAction(agentgym_client_action(response))

    def _act(self, action: str) -> Outcome:
        assert self.maze is not None
        if not self.extra_feedback:
            return self._act_as_agentgym(action)
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

    def _act_as_agentgym(self, action: str) -> Outcome:
        """LMRL-Gym's step: only the four exact actions move; a wall or anything else leaves the
        agent in place, and the answer is the same description either way. After 50 moves (any action
        counts) the next action gets "Failure" and LMRL-Gym's reward -1 (clipped to 0 under ``nonnegative_reward``)."""
        assert self.maze is not None
        if self.moves >= MOVE_LIMIT:
            return Outcome(FAILURE, progress=-1.0, score=-1.0, done=True)
        self.moves += 1
        move = action[len("move "):] if action.startswith("move ") and action[len("move "):] in MOVES else None
        target = None if move is None else self.maze.step(self.position, move)
        if target is not None:
            self.position = target
            if target == self.maze.goal:
                return Outcome(SUCCESS, progress=1.0, score=1.0, done=True, success=True)
        return Outcome(self._describe(), valid=target is not None)

    def _describe(self) -> str:
        """The AgentGym server's description: goal, position, walls (LMRL-Gym's wording and order)."""
        assert self.maze is not None
        (goal_row, goal_col), (row, col) = self.maze.goal, self.position
        walls = [_WHERE[m] for m in _WALL_ORDER if self.maze.step(self.position, m) is None]
        return (f"The goal is at position {goal_row}, {goal_col}. Your current position is at position {row}, {col}. "
                + describe_walls(walls))

    def _surroundings(self) -> str:
        assert self.maze is not None
        walls = [_WHERE[m] for m in MOVES if self.maze.step(self.position, m) is None]
        open_ = [_WHERE[m] for m in MOVES if self.maze.step(self.position, m) is not None]
        lines = [f"You are at ({self.position[0]}, {self.position[1]}). The goal is at ({self.maze.goal[0]}, "
                 f"{self.maze.goal[1]})."]
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
        """The four moves, always (a move into a wall does nothing)."""
        return [f"move {m}" for m in MOVES]

    def oracle_action(self) -> str:
        """A first move of a shortest path to the goal."""
        assert self.maze is not None, "call reset() first"
        if self.position == self.maze.goal:
            return "Thought:\nI am on the goal.\n\nAction:\nmove up"
        move = next_move(self.maze, self.position)
        return f"Thought:\nA shortest path to the goal starts by going {move}.\n\nAction:\nmove {move}"

    def render(self) -> str | None:
        """With ``render_mode="ansi"``: the last action and observation, then the maze's map."""
        text = super().render()
        if text is None or self.maze is None:
            return text
        return text + self.maze.render(self.position) + "\n"

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` is an item of one of the maze sizes (0-24 are AgentGym's games by default)."""
        if self.maze_kind == "agentgym" and 0 <= item_id < len(AGENTGYM_STARTS):
            return True
        return item_size(item_id) is not None and item_size(item_id) in SIZES
