"""Regenerate ``splits.json``: ``python -m agentgym_envs.maze.build_splits``.

25 test mazes like AgentGym's MAZE evaluation set (7 small, 6 of each larger size) and 1000
train mazes per size. A train item that happens to be the same episode (same walls, start and
goal) as a test item is left out, so no test episode is ever trained on.
"""

from __future__ import annotations

from agentgym_envs.core.tasks import write_splits
from agentgym_envs.maze.mazes import ITEMS_PER_SIZE, SIZE_NAMES, make_maze

TEST_SIZES = {"Small": 7, "Medium": 6, "Large": 6, "Huge": 6}
TRAIN_PER_SIZE = 1000
TRAIN_OFFSET = 1000  # train items are n = 1000.. within each size block


def build() -> dict[str, dict[str, list[int]]]:
    """The maze splits per size: the first items as test, train items whose maze is none of the test mazes."""
    splits = {}
    for index, size in enumerate(SIZE_NAMES):
        base = index * ITEMS_PER_SIZE
        test = [base + n for n in range(TEST_SIZES[size])]
        test_episodes = {make_maze(item) for item in test}
        train = [base + TRAIN_OFFSET + n for n in range(TRAIN_PER_SIZE)]
        train = [item for item in train if make_maze(item) not in test_episodes]
        splits[size] = {"train": train, "test": test}
    return splits


if __name__ == "__main__":
    print(f"wrote {write_splits(__file__, build())}")
