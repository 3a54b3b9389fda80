"""Regenerate ``splits.json``: ``python -m agentgym_envs.wordle.build_splits``.

25 test words (the size of AgentGym's Wordle evaluation set) drawn with a fixed seed from the
answer list; every other answer is a train item.
"""

from __future__ import annotations

import numpy as np

from agentgym_envs.core.tasks import write_splits
from agentgym_envs.wordle.words import answers

TEST_SIZE = 25
SEED = 2406


def build() -> dict[str, dict[str, list[int]]]:
    """The Wordle split: a seeded draw of ``TEST_SIZE`` answers as test, the other answers as train."""
    count = len(answers())
    test = sorted(np.random.default_rng(SEED).choice(count, size=TEST_SIZE, replace=False).tolist())
    chosen = set(test)
    return {"Wordle": {"train": [i for i in range(count) if i not in chosen], "test": test}}


if __name__ == "__main__":
    print(f"wrote {write_splits(__file__, build())}")
