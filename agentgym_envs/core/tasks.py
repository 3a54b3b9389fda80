"""The task table: one ``TaskSpec`` per registered id, plus the train/test item splits.

Families declare their specs in a light ``tasks.py`` (no engine imports), so ``import
agentgym_envs`` stays fast and ``agentgym list`` can describe every id without starting a JVM or a
browser. Splits are JSON package data: ``<family>/splits.json`` maps each sub-task to
``{"train": [item ids], "test": [item ids]}``. Item ids are unique within a family, so the
family-wide id (``AgentGym/TextCraft-v0``) can draw from all sub-tasks at once.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

NAMESPACE = "AgentGym"
SPLITS = ("train", "test")


@dataclass(frozen=True)
class TaskSpec:
    """What the registry, the CLI and the trainer need to know about one env id."""

    env_id: str
    family: str
    scenario: str
    subtask: str | None
    entry_point: str
    max_turns: int
    extra: str
    requires: tuple[str, ...] = ()
    description: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def subtasks(self) -> tuple[str, ...]:
        """The sub-tasks this id draws items from (all of the family's for a family-wide id).

        A family with a single id and no sub-task ids draws from every key of its ``splits.json``.
        """
        if self.subtask is not None:
            return (self.subtask,)
        named = tuple(spec.subtask for spec in family_specs(self.family) if spec.subtask is not None)
        return named or tuple(load_splits(self.family))

    def split(self, name: str) -> list[int]:
        """Item ids of a split, in a fixed order (``split(...)[index]`` is what ``options={"index": ...}`` picks)."""
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; choose one of {SPLITS}")
        table = load_splits(self.family)
        return [item for sub in self.subtasks for item in table.get(sub, {}).get(name, [])]

    def first_items(self, name: str, limit: int | None) -> list[int]:
        """``limit`` items of a split spread evenly over the sub-tasks (all of them for ``None``), in split order.

        Each sub-task gives its first items in turn, so ``--limit 10`` of a family-wide id evaluates
        every sub-task rather than the first one only; a single-sub-task id gives its first ``limit``.
        """
        items = self.split(name)
        if limit is None:
            return items
        table = load_splits(self.family)
        per_subtask = [table.get(sub, {}).get(name, []) for sub in self.subtasks]
        chosen: set[int] = set()
        for rank in range(max(map(len, per_subtask), default=0)):  # each sub-task's first, then second, ...
            for subtask_items in per_subtask:
                if rank < len(subtask_items) and len(chosen) < limit:
                    chosen.add(subtask_items[rank])
        return [item for item in items if item in chosen]

    def named_items(self, name: str, items: Sequence[int]) -> list[int]:
        """``items`` as ints, in their order, after checking each is an item of split ``name`` (a held-out part of
        the train split, say); ``ValueError`` names the ones that are not."""
        known = set(self.split(name))
        chosen = [int(item) for item in items]
        outside = [item for item in chosen if item not in known]
        if outside:
            raise ValueError(f"{self.env_id}: items {outside[:10]} are not in its {name!r} split")
        return chosen

    def extra_installed(self) -> bool:
        return all(importlib.util.find_spec(module) is not None for module in self.requires)

    @property
    def install_hint(self) -> str:
        return f"pip install 'agentgym-rl[{self.extra}]'"


def family_tasks(
    name: str,
    family: str,
    scenario: str,
    env_class: str,
    max_turns: int,
    *,
    description: str,
    subtasks: Mapping[str, str] | None = None,
    extra: str | None = None,
    requires: tuple[str, ...] = (),
    spec_class: type[TaskSpec] = TaskSpec,
    **fields: Any,
) -> list[TaskSpec]:
    """The specs of one family: ``AgentGym/<name>-v0`` over every sub-task, then ``AgentGym/<name>-<sub>-v0``
    per entry of ``subtasks`` (sub-task name -> description).

    What every spec of a family shares is said once here, so a family's ``tasks.py`` only says what
    differs: the entry point is ``agentgym_envs.<family>.env:<env_class>``, the extra defaults to the
    family's name, ``fields`` (e.g. ``kwargs``) go to every spec and ``spec_class`` makes them
    (``BrowserTaskSpec`` for browser envs).
    """
    shared = dict(family=family, scenario=scenario, entry_point=f"agentgym_envs.{family}.env:{env_class}",
                  max_turns=max_turns, extra=extra or family, requires=requires, **fields)
    return [
        spec_class(env_id=f"{NAMESPACE}/{name}-v0", subtask=None, description=description, **shared),
        *(
            spec_class(env_id=f"{NAMESPACE}/{name}-{subtask}-v0", subtask=subtask, description=text, **shared)
            for subtask, text in (subtasks or {}).items()
        ),
    ]


_TASKS: dict[str, TaskSpec] = {}


def add_task(spec: TaskSpec) -> None:
    """Put a spec in the table; ids must be unique."""
    if spec.env_id in _TASKS and _TASKS[spec.env_id] != spec:
        raise ValueError(f"{spec.env_id} is already in the task table with another spec")
    _TASKS[spec.env_id] = spec


def get_task(env_id: str) -> TaskSpec:
    """The spec of an id; accepts ``agentgym_envs:AgentGym/X-v0`` as ``gym.make`` does."""
    key = env_id.split(":", 1)[-1]
    try:
        return _TASKS[key]
    except KeyError:
        close = [k for k in _TASKS if key.lower().split("/")[-1][:6] in k.lower()]
        hint = f" Did you mean one of {close[:5]}?" if close else ""
        raise KeyError(f"unknown env id {env_id!r}; `agentgym list` shows the registered ids.{hint}") from None


def list_tasks(family: str | None = None) -> list[TaskSpec]:
    """Every spec, family-wide ids first within each family, in registration order."""
    return [spec for spec in _TASKS.values() if family is None or spec.family == family]


def family_specs(family: str) -> list[TaskSpec]:
    return list_tasks(family)


def write_splits(module_file: str, table: dict[str, dict[str, list[int]]], compact: bool = False) -> Path:
    """Write a family's ``splits.json`` beside its ``build_splits.py`` (``module_file``), as ``load_splits``
    reads it; ``compact`` drops the indentation (for tables of many thousand ids)."""
    path = Path(module_file).with_name("splits.json")
    text = json.dumps(table, separators=(",", ":")) if compact else json.dumps(table, indent=1)
    path.write_text(text + "\n")
    return path


@lru_cache(maxsize=None)
def load_splits(family: str) -> dict[str, dict[str, list[int]]]:
    """The family's ``splits.json`` (cached; read-only)."""
    path = resources.files(f"agentgym_envs.{family}").joinpath("splits.json")
    with path.open("r", encoding="utf-8") as handle:
        return json.load(handle)
