"""Regenerate ``splits.json``: ``python -m agentgym_envs.textcraft.build_splits``.

The test split has 31/41/25/3 goals at depths 1/2/3/4, like the paper's 100 test items, drawn
with a fixed seed; every other goal is a train item. Goals whose oracle plan under AgentGym's
rules (one recipe unit per craft) would not fit in the turn cap are left out of both splits.
"""

from __future__ import annotations

import numpy as np

from agentgym_envs.core.tasks import write_splits
from agentgym_envs.textcraft.engine import make_game
from agentgym_envs.textcraft.env import goals
from agentgym_envs.textcraft.recipes import recipe_book
from agentgym_envs.textcraft.tasks import MAX_TURNS

TEST_SIZES = {1: 31, 2: 41, 3: 25, 4: 3}
SEED = 2509


def build() -> dict[str, dict[str, list[int]]]:
    """The TextCraft splits per depth, over the goals whose one-unit-per-craft plan fits the turn cap: a seeded draw
    of the paper's number of test goals, the rest train.
    """
    book = recipe_book()
    rng = np.random.default_rng(SEED)
    splits = {}
    for depth, test_size in TEST_SIZES.items():
        items = [
            item_id
            for item_id, (goal, d) in enumerate(goals())
            if d == depth
            and len(make_game(book, goal, np.random.default_rng(item_id)).plan_actions(unit_crafts=True)) < MAX_TURNS
        ]
        test = sorted(rng.choice(items, size=test_size, replace=False).tolist())
        splits[f"Depth{depth}"] = {"train": [i for i in items if i not in test], "test": test}
    return splits


if __name__ == "__main__":
    print(f"wrote {write_splits(__file__, build())}")
