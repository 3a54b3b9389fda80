"""Shortest paths over agent poses (cell, heading) with MiniGrid's primitive moves (no engine import).

A high-level action is compiled into primitives by a search over *poses*, not cells, because
turning costs a step in MiniGrid just like moving does. Cells carry an entry cost:

* ``0``: impassable (wall, object, unseen cell, locked door without its key);
* ``1``: free floor or an open door;
* ``2``: a closed door the agent must toggle before stepping in (toggle + forward);
* larger values: used by the oracle's privileged map to price "move a blocker" or "fetch a key".

Poses are flat indices ``(y * width + x) * 4 + direction`` so the search runs on plain lists.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

# MiniGrid's headings and primitive action indices (minigrid.core.actions.Actions)
DIRECTION_VECTORS: tuple[tuple[int, int], ...] = ((1, 0), (0, 1), (-1, 0), (0, -1))
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE, DONE = range(7)

UNREACHABLE = 10**9

# how a pose was entered during a search
_BY_LEFT, _BY_RIGHT, _BY_FORWARD, _BY_TOGGLE_FORWARD = range(4)
_MOVES = {_BY_LEFT: (LEFT,), _BY_RIGHT: (RIGHT,), _BY_FORWARD: (FORWARD,), _BY_TOGGLE_FORWARD: (TOGGLE, FORWARD)}


class Pose(NamedTuple):
    """Where the agent stands and which way it looks (0 east, 1 south, 2 west, 3 north)."""

    x: int
    y: int
    direction: int

    @property
    def front(self) -> tuple[int, int]:
        """The cell the agent faces."""
        dx, dy = DIRECTION_VECTORS[self.direction]
        return self.x + dx, self.y + dy


def pose_index(width: int, x: int, y: int, direction: int) -> int:
    """The flat index of a pose (cell and direction) in a grid of the given width."""
    return (y * width + x) * 4 + direction


def index_pose(width: int, index: int) -> Pose:
    """The pose of a flat index (the inverse of ``pose_index``)."""
    cell, direction = divmod(index, 4)
    y, x = divmod(cell, width)
    return Pose(x, y, direction)


class Routes:
    """Every pose reachable from a start pose, with its cost and the primitives leading there."""

    def __init__(self, width: int, height: int, costs: Sequence[int], start: Pose):
        self.width, self.height = width, height
        self.start = start
        size = width * height * 4
        self.dist = [UNREACHABLE] * size
        self._parent = [-1] * size
        self._how = [0] * size
        self._search(costs, pose_index(width, start.x, start.y, start.direction))

    def _search(self, costs: Sequence[int], source: int) -> None:
        width, height = self.width, self.height
        dist, parent, how = self.dist, self._parent, self._how
        dist[source] = 0
        heap = [(0, source)]
        for d, pose, cell, direction in _settled(heap, dist):
            base = cell * 4
            for new_pose, kind in ((base + (direction - 1) % 4, _BY_LEFT), (base + (direction + 1) % 4, _BY_RIGHT)):
                if d + 1 < dist[new_pose]:
                    dist[new_pose], parent[new_pose], how[new_pose] = d + 1, pose, kind
                    heapq.heappush(heap, (d + 1, new_pose))
            y, x = divmod(cell, width)
            dx, dy = DIRECTION_VECTORS[direction]
            nx, ny = x + dx, y + dy
            if 0 <= nx < width and 0 <= ny < height:
                cost = costs[ny * width + nx]
                if cost:
                    new_pose = (ny * width + nx) * 4 + direction
                    if d + cost < dist[new_pose]:
                        dist[new_pose], parent[new_pose] = d + cost, pose
                        how[new_pose] = _BY_FORWARD if cost == 1 else _BY_TOGGLE_FORWARD
                        heapq.heappush(heap, (d + cost, new_pose))

    def facing(self, cells: Iterable[tuple[int, int]]) -> Pose | None:
        """The cheapest reachable pose whose front cell is one of ``cells`` (ties: lowest pose index)."""
        best: tuple[int, int] | None = None
        for tx, ty in cells:
            for direction, (dx, dy) in enumerate(DIRECTION_VECTORS):
                x, y = tx - dx, ty - dy
                if not (0 <= x < self.width and 0 <= y < self.height):
                    continue
                index = pose_index(self.width, x, y, direction)
                if self.dist[index] < UNREACHABLE and (best is None or (self.dist[index], index) < best):
                    best = (self.dist[index], index)
        return None if best is None else index_pose(self.width, best[1])

    def cost(self, pose: Pose) -> int:
        """The cost of the cheapest route from the start pose to ``pose`` (``UNREACHABLE`` when there is none)."""
        return self.dist[pose_index(self.width, pose.x, pose.y, pose.direction)]

    def primitives_to(self, pose: Pose) -> list[int]:
        """The primitive actions from the start pose to ``pose`` (which must be reachable)."""
        index = pose_index(self.width, pose.x, pose.y, pose.direction)
        if self.dist[index] >= UNREACHABLE:
            raise ValueError(f"{pose} is not reachable")
        moves: list[int] = []
        while self._parent[index] != -1:
            moves.extend(reversed(_MOVES[self._how[index]]))
            index = self._parent[index]
        moves.reverse()
        return moves


def _settled(heap: list[tuple[int, int]], dist: list[int]) -> Iterator[tuple[int, int, int, int]]:
    """Dijkstra's pops in cost order, stale entries skipped, as (cost, pose, its cell, its heading).

    Both searches (forward from the start, backward from the goals) share this loop; the caller
    pushes onto ``heap`` while it iterates.
    """
    while heap:
        d, pose = heapq.heappop(heap)
        if d > dist[pose]:
            continue
        cell, direction = divmod(pose, 4)
        yield d, pose, cell, direction


def costs_to_go(width: int, height: int, costs: Sequence[int], goals: Iterable[int]) -> list[int]:
    """Cost from every pose to the nearest goal pose (a search on reversed moves, for the oracle)."""
    dist = [UNREACHABLE] * (width * height * 4)
    heap = []
    for goal in goals:
        if dist[goal]:
            dist[goal] = 0
            heap.append((0, goal))
    heapq.heapify(heap)
    for d, pose, cell, direction in _settled(heap, dist):
        base = cell * 4
        # turning left from direction+1 (or right from direction-1) lands on this pose
        for previous in (base + (direction + 1) % 4, base + (direction - 1) % 4):
            if d + 1 < dist[previous]:
                dist[previous] = d + 1
                heapq.heappush(heap, (d + 1, previous))
        cost = costs[cell]
        if not cost:
            continue
        y, x = divmod(cell, width)
        dx, dy = DIRECTION_VECTORS[direction]
        px, py = x - dx, y - dy
        if 0 <= px < width and 0 <= py < height and costs[py * width + px]:
            previous = (py * width + px) * 4 + direction
            if d + cost < dist[previous]:
                dist[previous] = d + cost
                heapq.heappush(heap, (d + cost, previous))
    return dist


def facing_poses(width: int, height: int, costs: Sequence[int], cells: Iterable[tuple[int, int]]) -> list[int]:
    """Pose indices standing on a passable cell and looking at one of ``cells``."""
    poses = []
    for tx, ty in cells:
        for direction, (dx, dy) in enumerate(DIRECTION_VECTORS):
            x, y = tx - dx, ty - dy
            if 0 <= x < width and 0 <= y < height and costs[y * width + x]:
                poses.append(pose_index(width, x, y, direction))
    return poses
