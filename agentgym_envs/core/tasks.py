"""The task table: one ``TaskSpec`` per registered id, plus the train/test item splits.

Families declare their specs in a light ``tasks.py`` (no engine imports), so ``import
agentgym_envs`` stays fast and ``agentgym list`` can describe every id without starting a JVM or a
browser. Splits are JSON package data: ``<family>/splits.json`` maps each sub-task to
``{"train": [item ids], "test": [item ids]}``. Item ids are unique within a family, so the
family-wide id (``AgentGym/TextCraft-v0``) can draw from all sub-tasks at once.

Gymnasium's registry is the one record of an id's entry point, turn cap and keyword arguments: a
family declares them with its spec (``TaskSpec.declare``), registration hands them to
``gym.register``, and the table keeps only what ``EnvSpec`` lacks (``TaskSpec.entry_point``,
``max_turns`` and ``kwargs`` read ``gym.spec(env_id)``). A family may live in any package
(``TaskSpec.package``); its entry points and ``splits.json`` are found there.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from agentgym_envs.core.agentgym_protocol import AgentGymProtocol, load_protocol

NAMESPACE = "AgentGym"
SPLITS = ("train", "test")


@dataclass(frozen=True)
class TaskSpec:
    """What the registry, the CLI, the server and the trainer need to know about one env id, beyond its ``EnvSpec``.

    ``package`` is the family's package (``agentgym_envs.<family>`` when empty); ``weight`` what one
    env costs a server, in light in-process envs (a JVM or a browser: 8); ``foreign_action`` a
    typical action of the family, which every other family's env must reject (the conformance
    checks try it); ``protocol`` the lazy reference to the family's ``AgentGymProtocol`` (empty: the
    common shape); ``registration`` the declared ``EnvSpec``, handed to Gymnasium at registration
    and not kept in the table.
    """

    env_id: str
    family: str
    scenario: str
    subtask: str | None
    extra: str
    requires: tuple[str, ...] = ()
    description: str = ""
    package: str = ""
    weight: int = 1
    foreign_action: str = ""
    protocol: str = ""
    registration: EnvSpec | None = field(default=None, repr=False)

    @classmethod
    def declare(cls, env_id: str, entry_point: str, max_turns: int, kwargs: Mapping[str, Any] | None = None,
                **fields: Any) -> TaskSpec:
        """A spec with the ``EnvSpec`` registration will give Gymnasium (entry point, turn cap, env kwargs)."""
        declared = EnvSpec(id=env_id, entry_point=entry_point, max_episode_steps=max_turns,
                           kwargs={"task_id": env_id, **(kwargs or {})})
        return cls(env_id=env_id, registration=declared, **fields)

    @property
    def family_package(self) -> str:
        """The package that holds the family's modules and its ``splits.json``."""
        return self.package or f"agentgym_envs.{self.family}"

    @property
    def env_spec(self) -> EnvSpec:
        """Gymnasium's spec of this id: the one record of its entry point, turn cap and kwargs."""
        return gym.spec(self.env_id)

    @property
    def entry_point(self) -> Any:
        """Gymnasium's entry point of this id (``module:Class``): the env class ``gym.make`` builds."""
        return self.env_spec.entry_point

    @property
    def max_turns(self) -> int:
        """The turn cap (Gymnasium's ``max_episode_steps``, the ``TimeLimit`` of ``gym.make``)."""
        return self.env_spec.max_episode_steps

    @property
    def kwargs(self) -> dict[str, Any]:
        """The env keyword arguments the id fixes, beyond ``task_id``."""
        return {key: value for key, value in self.env_spec.kwargs.items() if key != "task_id"}

    def agentgym_protocol(self) -> AgentGymProtocol:
        """The family's departures from AgentGym's common protocol (imports its protocol module on first use)."""
        return load_protocol(self.protocol)

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
        """Whether the modules the id's optional extra provides (``requires``) are installed, found with ``find_spec``
        without importing them, so listing the envs stays fast.
        """
        return all(importlib.util.find_spec(module) is not None for module in self.requires)

    @property
    def install_hint(self) -> str:
        """The pip command that installs the extra this id needs, for error messages and ``agentgym list``."""
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
    package: str = "",
    **fields: Any,
) -> list[TaskSpec]:
    """The specs of one family: ``AgentGym/<name>-v0`` over every sub-task, then ``AgentGym/<name>-<sub>-v0``
    per entry of ``subtasks`` (sub-task name -> description).

    What every spec of a family shares is said once here, so a family's ``tasks.py`` only says what
    differs: the entry point is ``<package>.env:<env_class>`` (``package`` defaults to
    ``agentgym_envs.<family>``; a family outside this package passes its ``__package__``), the extra
    defaults to the family's name, ``fields`` (e.g. ``kwargs``, ``weight``, ``foreign_action``,
    ``protocol``) go to every spec and ``spec_class`` makes them (``BrowserTaskSpec`` for browser envs).
    """
    entry_point = f"{package or f'agentgym_envs.{family}'}.env:{env_class}"
    shared = dict(family=family, scenario=scenario, entry_point=entry_point, max_turns=max_turns,
                  extra=extra or family, requires=requires, package=package, **fields)
    return [
        spec_class.declare(env_id=f"{NAMESPACE}/{name}-v0", subtask=None, description=description, **shared),
        *(
            spec_class.declare(env_id=f"{NAMESPACE}/{name}-{subtask}-v0", subtask=subtask, description=text,
                               **shared)
            for subtask, text in (subtasks or {}).items()
        ),
    ]


_TASKS: dict[str, TaskSpec] = {}
#: family name -> its package, for ``load_splits`` (families outside ``agentgym_envs`` included).
_FAMILY_PACKAGES: dict[str, str] = {}


def add_task(spec: TaskSpec) -> None:
    """Put a spec in the table, without its declared ``EnvSpec`` (Gymnasium's registry holds that); ids must
    be unique."""
    kept = replace(spec, registration=None)
    if spec.env_id in _TASKS and _TASKS[spec.env_id] != kept:
        raise ValueError(f"{spec.env_id} is already in the task table with another spec")
    known = _FAMILY_PACKAGES.setdefault(spec.family, spec.family_package)
    if known != spec.family_package:
        raise ValueError(f"{spec.env_id}: family {spec.family!r} is already registered from {known}")
    _TASKS[spec.env_id] = kept


def get_task(env_id: str) -> TaskSpec:
    """The spec of an id; accepts ``agentgym_envs:AgentGym/X-v0`` as ``gym.make`` does."""
    key = env_id.split(":", 1)[-1]
    try:
        return _TASKS[key]
    except KeyError:
        close = [k for k in _TASKS if key.lower().split("/")[-1][:6] in k.lower()]
        hint = f" Did you mean one of {close[:5]}?" if close else ""
        raise KeyError(f"unknown env id {env_id!r}; `agentgym list` shows the registered ids.{hint}") from None


def import_env_module(env_id: str) -> str:
    """Gymnasium's ``module:EnvId`` form, as ``gym.make`` reads it: imports ``module`` (which registers the id; the
    current folder is searched first, as ``python -m`` does) and returns ``EnvId``; a plain id is returned as is.

    Raises:
        ValueError: the module cannot be imported (the message names it and the id).
    """
    module, colon, name = env_id.partition(":")
    if not colon or "/" in module:  # "AgentGym/X-v0" has no module part; a URL is not one either
        return env_id
    import importlib
    import os
    import sys

    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise ValueError(f"{env_id}: cannot import {module!r} to register {name!r} ({error})") from None
    return name


def list_tasks(family: str | None = None) -> list[TaskSpec]:
    """Every spec, family-wide ids first within each family, in registration order."""
    return [spec for spec in _TASKS.values() if family is None or spec.family == family]


def family_specs(family: str) -> list[TaskSpec]:
    """The specs of one family, in registration order.

    Args:
        family: the family name.

    Returns:
        Its specs, the family-wide id first.
    """
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
    """The family's ``splits.json``, from its package (cached; read-only)."""
    path = resources.files(_FAMILY_PACKAGES.get(family, f"agentgym_envs.{family}")).joinpath("splits.json")
    with path.open("r", encoding="utf-8") as handle:
        return json.load(handle)
