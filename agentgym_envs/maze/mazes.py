"""Seeded maze generation and shortest paths.

A maze is a square grid of wall (``#``) and floor (``.``) squares with an outer wall. It is carved
as a spanning tree of rooms (randomised depth-first search) and then a few extra walls are opened
so that some mazes have loops. The agent moves one square per action. Start and goal are drawn so
the shortest path fits well inside the turn cap: an oracle always succeeds, a wanderer rarely does.

Item ids encode the size: ``item_id = size_index * ITEMS_PER_SIZE + n``; the maze is a pure
function of the item id.

AgentGym's maze (``agentgym_maze``): LMRL-Gym's ``double_t_maze`` (``llm_rl_scripts/maze/env/mazes.py``,
https://github.com/abdulhaim/LMRL-Gym, MIT license, Copyright (c) 2022 Charlie Snell), its goal (8, 6), and the
start squares of AgentGym's ``agentenv-lmrlgym`` server (``maze/environment.py``, game ``k`` starts at the
``k``-th; its 26th entry is the goal itself, which the server refuses). The layout and the squares are
data, written out below.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: Sub-task name -> side of the square grid (outer walls included).
SIZES: dict[str, int] = {"Small": 7, "Medium": 9, "Large": 11, "Huge": 13}
SIZE_NAMES: tuple[str, ...] = tuple(SIZES)
ITEMS_PER_SIZE = 100_000
#: Shortest start-goal distance, per size (min) and for all (max: the turn cap is 15).
MIN_DISTANCE: dict[str, int] = {"Small": 4, "Medium": 6, "Large": 7, "Huge": 8}
MAX_DISTANCE = 12
#: Share of the remaining inner walls between two rooms that are knocked down to make loops.
LOOP_SHARE = 0.12

MOVES: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


#: LMRL-Gym's double-T maze, 10 rows x 13 columns (``#`` wall, ``.`` floor).
DOUBLE_T_MAZE: tuple[str, ...] = (
    "#############",
    "#.....#.....#",
    "###.#####.###",
    "###.#####.###",
    "###.#####.###",
    "###.......###",
    "######.######",
    "######.######",
    "######.######",
    "#############",
)
DOUBLE_T_GOAL = (8, 6)
#: AgentGym's start squares (row, column): game ``k`` of its server starts at the ``k``-th.
AGENTGYM_STARTS: tuple[tuple[int, int], ...] = (
    (1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (1, 7), (1, 8), (1, 9), (1, 10), (1, 11), (2, 3), (3, 3), (4, 3),
    (5, 3), (5, 4), (5, 5), (5, 6), (6, 6), (7, 6), (5, 7), (5, 8), (5, 9), (4, 9), (3, 9), (2, 9),
)


@dataclass(frozen=True)
class Maze:
    """A grid (tuple of strings of ``#`` and ``.``), a start and a goal square (row, column)."""

    rows: tuple[str, ...]
    start: tuple[int, int]
    goal: tuple[int, int]
    size_name: str

    @property
    def side(self) -> int:
        """The number of rows (and columns) of the square maze, its wall ring included."""
        return len(self.rows)

    def is_open(self, position: tuple[int, int]) -> bool:
        """Whether ``position`` (row, column) is inside the maze and not a wall."""
        row, col = position
        return 0 <= row < self.side and 0 <= col < len(self.rows[0]) and self.rows[row][col] == "."

    def step(self, position: tuple[int, int], move: str) -> tuple[int, int] | None:
        """The square reached by ``move`` from ``position``, or ``None`` when a wall is in the way."""
        d_row, d_col = MOVES[move]
        target = (position[0] + d_row, position[1] + d_col)
        return target if self.is_open(target) else None

    def distances_to_goal(self) -> dict[tuple[int, int], int]:
        """The number of moves from every reachable cell to the goal (breadth-first)."""
        return _bfs(self.rows, self.goal)

    def render(self, position: tuple[int, int]) -> str:
        """The full map with the agent (``A``) and goal (``G``): for humans, never shown to the agent."""
        lines = []
        for r, line in enumerate(self.rows):
            chars = list(line)
            if r == self.goal[0]:
                chars[self.goal[1]] = "G"
            if r == position[0]:
                chars[position[1]] = "A"
            lines.append("".join(chars))
        return "\n".join(lines)


def _bfs(rows: tuple[str, ...], source: tuple[int, int]) -> dict[tuple[int, int], int]:
    height, width = len(rows), len(rows[0])
    distance = {source: 0}
    queue = deque([source])
    while queue:
        row, col = queue.popleft()
        for d_row, d_col in MOVES.values():
            nxt = (row + d_row, col + d_col)
            if 0 <= nxt[0] < height and 0 <= nxt[1] < width and rows[nxt[0]][nxt[1]] == "." and nxt not in distance:
                distance[nxt] = distance[(row, col)] + 1
                queue.append(nxt)
    return distance


def agentgym_maze(game: int) -> Maze:
    """Game ``game`` (0-24) of AgentGym's maze server: the double-T maze from its ``game``-th start square."""
    if not 0 <= game < len(AGENTGYM_STARTS):
        raise ValueError(f"AgentGym's maze games are 0 <= game < {len(AGENTGYM_STARTS)}, got {game}")
    return Maze(DOUBLE_T_MAZE, AGENTGYM_STARTS[game], DOUBLE_T_GOAL, "DoubleT")


def item_size(item_id: int) -> str | None:
    """The size name of an item id, or ``None`` if the id is out of range."""
    if item_id < 0:
        return None
    index = item_id // ITEMS_PER_SIZE
    return SIZE_NAMES[index] if index < len(SIZE_NAMES) else None


@lru_cache(maxsize=4096)
def make_maze(item_id: int) -> Maze:
    """The maze of ``item_id`` (deterministic; cached because episodes restart the same item often)."""
    size_name = item_size(item_id)
    if size_name is None:
        raise ValueError(f"maze item ids are 0 <= id < {len(SIZES) * ITEMS_PER_SIZE}, got {item_id}")
    side = SIZES[size_name]
    rng = np.random.default_rng([7, item_id])
    while True:
        rows = _carve(side, rng)
        open_squares = [(r, c) for r in range(side) for c in range(side) if rows[r][c] == "."]
        goal = open_squares[int(rng.integers(len(open_squares)))]
        distance = _bfs(rows, goal)
        candidates = sorted(p for p, d in distance.items() if MIN_DISTANCE[size_name] <= d <= MAX_DISTANCE)
        if candidates:
            start = candidates[int(rng.integers(len(candidates)))]
            return Maze(rows, start, goal, size_name)


def _carve(side: int, rng: np.random.Generator) -> tuple[str, ...]:
    rooms = (side - 1) // 2
    grid = [["#"] * side for _ in range(side)]
    visited = np.zeros((rooms, rooms), dtype=bool)
    stack = [(int(rng.integers(rooms)), int(rng.integers(rooms)))]
    visited[stack[0]] = True
    grid[2 * stack[0][0] + 1][2 * stack[0][1] + 1] = "."
    while stack:
        row, col = stack[-1]
        options = [
            (row + dr, col + dc)
            for dr, dc in MOVES.values()
            if 0 <= row + dr < rooms and 0 <= col + dc < rooms and not visited[row + dr, col + dc]
        ]
        if not options:
            stack.pop()
            continue
        nxt = options[int(rng.integers(len(options)))]
        visited[nxt] = True
        grid[row + nxt[0] + 1][col + nxt[1] + 1] = "."  # the wall between the two rooms
        grid[2 * nxt[0] + 1][2 * nxt[1] + 1] = "."
        stack.append(nxt)
    inner_walls = [
        (r, c)
        for r in range(1, side - 1)
        for c in range(1, side - 1)
        if grid[r][c] == "#" and (r % 2) != (c % 2)  # walls between two rooms, not pillars
    ]
    for r, c in inner_walls:
        if rng.random() < LOOP_SHARE:
            grid[r][c] = "."
    return tuple("".join(line) for line in grid)


def next_move(maze: Maze, position: tuple[int, int]) -> str:
    """A first move of a shortest path from ``position`` to the goal (ties broken in ``MOVES`` order)."""
    distance = maze.distances_to_goal()
    here = distance[position]
    for move in MOVES:
        target = maze.step(position, move)
        if target is not None and distance.get(target, here) < here:
            return move
    raise ValueError("already at the goal")
