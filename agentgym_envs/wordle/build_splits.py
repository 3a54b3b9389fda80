"""Regenerate ``splits.json``: ``python -m agentgym_envs.wordle.build_splits``.

1,668 items (one per word of our answer list): 25 test items (the size of AgentGym's Wordle evaluation
set) drawn with a fixed seed, every other item a train item. By default an item id is the ``seed`` of
AgentGym's Wordle ``/reset`` (``random.Random(seed)`` draws the hidden word afresh at every guess from
LMRL-Gym's 40 words): AgentGym's server has no split of its own, any seed is a game, and train and test
items differ in their seeds (their draws), not in their words, which all 40 share. With
``vocabulary="ours"`` item ``i`` is the word ``answers()[i]``, so the test words are not train words.
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
