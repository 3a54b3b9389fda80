"""Regenerate ``splits.json``: ``python -m agentgym_envs.alfworld.build_splits``.

Item ``i`` is the generated game of task type ``TASK_TYPES[i % 6]``. Items 0-199 are the test
split (200 games, like AgentGym's ALFWorld evaluation set, about 33 per task type); items
200-3199 are the train split. Games are generated (and cached) on first use, not here.
"""

from __future__ import annotations

from agentgym_envs.alfworld.generator import SUBTASK_OF_TYPE, TASK_TYPES
from agentgym_envs.core.tasks import write_splits

TEST_ITEMS = 200
TRAIN_ITEMS = 3000


def build() -> dict[str, dict[str, list[int]]]:
    """The ALFWorld splits: the first ``TEST_ITEMS`` ids as test and the next ``TRAIN_ITEMS`` as train, dealt to the
    sub-tasks by task type in turn.
    """
    splits: dict[str, dict[str, list[int]]] = {}
    for index, task_type in enumerate(TASK_TYPES):
        name = SUBTASK_OF_TYPE[task_type]
        splits[name] = {
            "train": [i for i in range(TEST_ITEMS, TEST_ITEMS + TRAIN_ITEMS) if i % len(TASK_TYPES) == index],
            "test": [i for i in range(TEST_ITEMS) if i % len(TASK_TYPES) == index],
        }
    return splits


if __name__ == "__main__":
    print(f"wrote {write_splits(__file__, build())}")
