"""Regenerate ``splits.json``: ``python -m agentgym_envs.maze.build_splits``.

Test: AgentGym's 25 maze games (items 0-24: LMRL-Gym's double-T maze from each of the 25 start squares
of AgentGym's server), its evaluation set. AgentGym's server has no other games: its 215 training
trajectories replay these 25, so upstream has no train/test separation. Our train split is 1000
generated mazes per size (items n = 1000.. of each size block), played by AgentGym's rules, so no test
game is trained on. With ``maze="generated"`` the test items 0-24 are generated 7x7 mazes instead; a
train item that is the same episode (same walls, start and goal) as one of them is left out.
"""

from __future__ import annotations

from agentgym_envs.core.tasks import write_splits
from agentgym_envs.maze.mazes import AGENTGYM_STARTS, ITEMS_PER_SIZE, SIZE_NAMES, make_maze

TRAIN_PER_SIZE = 1000
TRAIN_OFFSET = 1000  # train items are n = 1000.. within each size block


def build() -> dict[str, dict[str, list[int]]]:
    """AgentGym's 25 games as test; generated train mazes per size, none the same episode as a generated test maze."""
    test = list(range(len(AGENTGYM_STARTS)))
    generated_test = {make_maze(item) for item in test}
    splits = {"DoubleT": {"train": [], "test": test}}
    for index, size in enumerate(SIZE_NAMES):
        base = index * ITEMS_PER_SIZE
        train = [base + TRAIN_OFFSET + n for n in range(TRAIN_PER_SIZE)]
        train = [item for item in train if make_maze(item) not in generated_test]
        splits[size] = {"train": train, "test": []}
    return splits


if __name__ == "__main__":
    print(f"wrote {write_splits(__file__, build())}")
