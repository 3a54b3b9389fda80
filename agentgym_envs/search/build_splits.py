"""Regenerate ``splits.json``: ``python -m agentgym_envs.search.build_splits``.

Each sub-task's generated question list is ordered test first: its first ``TEST_SIZES[s]``
questions (50; Musique 100, like the paper) are the test split and the next ``TRAIN_SIZE`` the
train split. Item ids are ``ITEM_BLOCK * position of the sub-task + index``, so they are unique
across the family.
"""

from __future__ import annotations

from agentgym_envs.core.tasks import write_splits
from agentgym_envs.search.tasks import ITEM_BLOCK, SUBTASKS, TEST_SIZES, TRAIN_SIZE


def build() -> dict[str, dict[str, list[int]]]:
    """The Search splits: per sub-task, its block's first ids as test and the following ``TRAIN_SIZE`` as train."""
    splits = {}
    for position, subtask in enumerate(SUBTASKS):
        base = ITEM_BLOCK * position
        test = TEST_SIZES[subtask]
        splits[subtask] = {
            "train": list(range(base + test, base + test + TRAIN_SIZE)),
            "test": list(range(base, base + test)),
        }
    return splits


if __name__ == "__main__":
    print(f"wrote {write_splits(__file__, build(), compact=True)}")
