"""Which ScienceWorld task types each sub-task covers, and how item ids name (task, variation) pairs.

Pure data, no engine import. An item id is ``1000 * code + variation`` where ``code`` is
ScienceWorld's own task number without the dash ("2-2" -> 22), so ``22327`` reads as task 2-2
(measuring the melting point of a known substance), variation 327. Variations never reach 1000.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

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
        """The task type's number as an integer (``1-2`` -> 12), the high part of its item ids."""
        topic, sub = self.number.split("-")
        return 10 * int(topic) + int(sub)


def _load_task_types() -> tuple[TaskType, ...]:
    with resources.files(__package__).joinpath("task_types.json").open("r", encoding="utf-8") as handle:
        return tuple(TaskType(*row) for row in json.load(handle))


#: The task types of the five sub-tasks, ``task_types.json``: [number, simulator name, sub-task, variations].
TASK_TYPES: tuple[TaskType, ...] = _load_task_types()

#: Test items per sub-task, as in the paper's 200-item ScienceWorld evaluation set.
TEST_SIZES: dict[str, int] = {"Measure": 53, "TestConductivity": 83, "Find": 44, "ChemMix": 5, "Lifespan": 15}

_BY_CODE = {task.code: task for task in TASK_TYPES}


def task_types(subtask: str | None = None) -> tuple[TaskType, ...]:
    """The task types of one sub-task, or all of them."""
    return tuple(task for task in TASK_TYPES if subtask is None or task.subtask == subtask)


def item_id(task: TaskType, variation: int) -> int:
    """The item id of a task type's variation (``code * ITEM_STRIDE + variation``)."""
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


#: AgentGym's ScienceWorld server numbers its items (``data_idx``) through these task types in this
#: order (ScienceWorld's task list without 5-1, 5-2, 9-1..9-3, 10-1, 10-2), every variation of each.
AGENTGYM_TASK_ORDER: tuple[tuple[str, int], ...] = (
    ("1-1", 30), ("1-2", 30), ("1-3", 30), ("1-4", 30), ("2-1", 540), ("2-2", 436), ("2-3", 300), ("3-1", 20),
    ("3-2", 20), ("3-3", 900), ("3-4", 600), ("4-1", 300), ("4-2", 300), ("4-3", 300), ("4-4", 300), ("6-1", 32),
    ("6-2", 36), ("6-3", 36), ("7-1", 125), ("7-2", 125), ("7-3", 125), ("8-1", 14), ("8-2", 10),
)


def _agentgym_offsets() -> dict[str, int]:
    offsets, total = {}, 0
    for number, count in AGENTGYM_TASK_ORDER:
        offsets[number] = total
        total += count
    return offsets


_AGENTGYM_OFFSET = _agentgym_offsets()


def agentgym_data_idx(item: int) -> int:
    """The ``data_idx`` AgentGym's ScienceWorld server uses for our item id."""
    task, variation = decode(item)
    return _AGENTGYM_OFFSET[task.number] + variation


def from_agentgym_data_idx(data_idx: int) -> int:
    """Our item id of AgentGym's ``data_idx``; ``KeyError`` for task types this family does not cover."""
    for number, count in AGENTGYM_TASK_ORDER:
        offset = _AGENTGYM_OFFSET[number]
        if offset <= data_idx < offset + count:
            task = next((t for t in TASK_TYPES if t.number == number), None)
            if task is None:
                raise KeyError(f"AgentGym's data_idx {data_idx} is task {number}, "
                               f"which the paper's SciWorld ids do not use")
            return item_id(task, data_idx - offset)
    raise KeyError(f"AgentGym's data_idx {data_idx} is beyond its {sum(c for _, c in AGENTGYM_TASK_ORDER)} items")

