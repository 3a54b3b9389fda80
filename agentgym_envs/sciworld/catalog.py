"""Which ScienceWorld task types each sub-task covers, and how item ids name (task, variation) pairs.

Pure data, no engine import. An item id is ``1000 * code + variation`` where ``code`` is
ScienceWorld's own task number without the dash ("2-2" -> 22), so ``22327`` reads as task 2-2
(measuring the melting point of a known substance), variation 327. Variations never reach 1000.
"""

from __future__ import annotations

from dataclasses import dataclass

ITEM_STRIDE = 1000


@dataclass(frozen=True)
class TaskType:
    """One ScienceWorld task type: its number ("2-2"), simulator name, sub-task and variation count."""

    number: str
    name: str
    subtask: str
    variations: int

    @property
    def code(self) -> int:
        topic, sub = self.number.split("-")
        return 10 * int(topic) + int(sub)


TASK_TYPES: tuple[TaskType, ...] = (
    TaskType("2-2", "measure-melting-point-known-substance", "Measure", 436),
    TaskType("2-3", "measure-melting-point-unknown-substance", "Measure", 300),
    TaskType("3-3", "test-conductivity", "TestConductivity", 900),
    TaskType("3-4", "test-conductivity-of-unknown-substances", "TestConductivity", 600),
    TaskType("4-1", "find-living-thing", "Find", 300),
    TaskType("4-3", "find-plant", "Find", 300),
    TaskType("4-4", "find-animal", "Find", 300),
    TaskType("6-1", "chemistry-mix", "ChemMix", 32),
    TaskType("6-2", "chemistry-mix-paint-secondary-color", "ChemMix", 36),
    TaskType("6-3", "chemistry-mix-paint-tertiary-color", "ChemMix", 36),
    TaskType("7-1", "lifespan-longest-lived", "Lifespan", 125),
    TaskType("7-2", "lifespan-shortest-lived", "Lifespan", 125),
    TaskType("7-3", "lifespan-longest-lived-then-shortest-lived", "Lifespan", 125),
)

#: Test items per sub-task, as in the paper's 200-item ScienceWorld evaluation set.
TEST_SIZES: dict[str, int] = {"Measure": 53, "TestConductivity": 83, "Find": 44, "ChemMix": 5, "Lifespan": 15}

_BY_CODE = {task.code: task for task in TASK_TYPES}


def task_types(subtask: str | None = None) -> tuple[TaskType, ...]:
    """The task types of one sub-task, or all of them."""
    return tuple(task for task in TASK_TYPES if subtask is None or task.subtask == subtask)


def item_id(task: TaskType, variation: int) -> int:
    if not 0 <= variation < ITEM_STRIDE:
        raise ValueError(f"variation {variation} is outside 0..{ITEM_STRIDE - 1}")
    return task.code * ITEM_STRIDE + variation


def decode(item: int) -> tuple[TaskType, int]:
    """(task type, variation) of an item id; ``KeyError`` if it names no variation of a covered task type."""
    code, variation = divmod(int(item), ITEM_STRIDE)
    task = _BY_CODE.get(code) if item >= 0 else None
    if task is None or variation >= task.variations:
        raise KeyError(f"item id {item} names no ScienceWorld variation of this family")
    return task, variation
