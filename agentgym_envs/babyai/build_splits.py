"""Regenerate ``splits.json``: ``python -m agentgym_envs.babyai.build_splits``.

Test: the first solvable seeds of every level of a sub-task (5 per GoTo level, 3 per Pickup
level, 5 for the single-level sub-tasks: 55/15/5/5/5/5 = 90 items like the paper). Train: the
first ``TRAIN_SEEDS_PER_LEVEL`` solvable seeds from ``TRAIN_FIRST_SEED`` on, so the two splits never
share an episode.

"Solvable" is a property of the generated level, not of any agent: MiniGrid sometimes places the
only key of a locked door inside the room that door locks (``GoToImpUnlock`` compares room indices
with ``is``), and a strict level (``PickupDistDebug``: picking up a wrong object fails) may wall
its target in with other objects. No agent can finish those; such seeds are skipped, nothing else
is filtered.
"""

from __future__ import annotations

import contextlib
import io
from collections import deque
from typing import Any

from tqdm import tqdm

from agentgym_envs.babyai.levels import (
    SUBTASK_LEVELS,
    TEST_SEEDS_PER_LEVEL,
    TRAIN_FIRST_SEED,
    TRAIN_SEEDS_PER_LEVEL,
    item_id,
)
from agentgym_envs.core.tasks import write_splits


def _clauses(instr: Any) -> list[Any]:
    from minigrid.envs.babyai.core.verifier import SeqInstr

    if isinstance(instr, SeqInstr):
        return _clauses(instr.instr_a) + _clauses(instr.instr_b)
    return [instr]


def _reachable_cells(level_env: Any, movable_objects: bool) -> set[tuple[int, int]]:
    """Cells the agent can reach if it opens every door whose key it can reach (and may move objects)."""
    grid = level_env.grid
    keys: set[str] = set()
    while True:
        start = tuple(int(v) for v in level_env.agent_pos)
        seen, queue = {start}, deque([start])
        while queue:
            x, y = queue.popleft()
            for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                if not (0 <= nx < grid.width and 0 <= ny < grid.height) or (nx, ny) in seen:
                    continue
                cell = grid.get(nx, ny)
                if cell is not None and (cell.type == "wall" or (not movable_objects and cell.type != "door")):
                    continue
                if cell is not None and cell.type == "door" and cell.is_locked and cell.color not in keys:
                    continue
                seen.add((nx, ny))
                queue.append((nx, ny))
        found = {grid.get(x, y).color for x, y in seen if grid.get(x, y) is not None and grid.get(x, y).type == "key"}
        if found <= keys:
            return seen
        keys |= found


def is_solvable(level_env: Any) -> bool:
    """Whether every clause of the freshly reset level names at least one object the agent can stand next to."""
    clauses = _clauses(level_env.instrs)
    # in a strict level picking up a wrong object fails the episode, so blockers cannot be moved
    reachable = _reachable_cells(level_env, movable_objects=not any(getattr(c, "strict", False) for c in clauses))
    for clause in clauses:
        descs = [getattr(clause, name) for name in ("desc", "desc_move", "desc_fixed") if hasattr(clause, name)]
        for desc in descs:
            if not any(
                neighbour in reachable
                for x, y in ((int(a), int(b)) for a, b in desc.obj_poss)
                for neighbour in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1))
            ):
                return False
    return True


def solvable_seeds(level: str, first: int, count: int) -> list[int]:
    """The first ``count`` seeds from ``first`` on whose episode of ``level`` the oracle succeeds.

    Args:
        level: the BabyAI level's name.
        first: the seed to start from.
        count: how many seeds to find.

    Returns:
        The seeds, in order.
    """
    from agentgym_envs.babyai.env import _make_level

    engine = _make_level(level)
    seeds, seed = [], first
    while len(seeds) < count:
        with contextlib.redirect_stdout(io.StringIO()):
            engine.reset(seed=seed)
        if is_solvable(engine):
            seeds.append(seed)
        seed += 1
    engine.close()
    return seeds


def build() -> tuple[dict[str, dict[str, list[int]]], dict[str, int]]:
    """The splits, and how many seeds were skipped as unsolvable per level."""
    splits, skipped = {}, {}
    for subtask, levels in tqdm(SUBTASK_LEVELS.items(), desc="sub-tasks"):
        test, train = [], []
        for level in levels:
            test_seeds = solvable_seeds(level, 0, TEST_SEEDS_PER_LEVEL[subtask])
            train_seeds = solvable_seeds(level, TRAIN_FIRST_SEED, TRAIN_SEEDS_PER_LEVEL)
            assert test_seeds[-1] < TRAIN_FIRST_SEED
            tried = test_seeds[-1] + 1 + train_seeds[-1] + 1 - TRAIN_FIRST_SEED
            skipped[level] = tried - len(test_seeds) - len(train_seeds)
            test += [item_id(level, seed) for seed in test_seeds]
            train += [item_id(level, seed) for seed in train_seeds]
        splits[subtask] = {"train": sorted(train), "test": sorted(test)}
    return splits, skipped


if __name__ == "__main__":
    table, skipped = build()
    path = write_splits(__file__, table, compact=True)
    print(f"wrote {path}; unsolvable seeds skipped: {({k: v for k, v in skipped.items() if v})}")
