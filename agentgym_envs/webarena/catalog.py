"""The embedded task set: WebArena-format configs generated from templates over the seeded sites.

Each site module's ``drafts(db)`` returns its templates as iterators of drafts. The test split
takes drafts round-robin over a site's templates (15 Shopping, 15 CMS, 10 Maps, 5 GitLab,
5 Reddit = 50, as in AgentGym-RL); the train split continues the same round-robin, so train and
test use the same templates on different instances. Everything is a pure function of the seeded
databases, so item ids are stable across processes; ``build_splits.py`` writes ``splits.json``.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any, Iterator

from agentgym_envs.webarena.sites import SITES, app_class
from agentgym_envs.webarena.taskgen import Draft

#: site -> (number of test tasks, number of train tasks, first test id, first train id)
LAYOUT = {
    "shopping": (15, 80, 0, 1000),
    "shopping_admin": (15, 80, 15, 2000),
    "map": (10, 60, 30, 3000),
    "gitlab": (5, 60, 40, 4000),
    "reddit": (5, 60, 45, 5000),
}


def _round_robin(templates: Iterator[Iterator[Draft]]) -> Iterator[Draft]:
    active = list(templates)
    seen: set[str] = set()
    while active:
        for iterator in list(active):
            draft = next(iterator, None)
            if draft is None:
                active.remove(iterator)
            elif draft.intent not in seen:
                seen.add(draft.intent)
                yield draft


def _config(task_id: int, site: str, draft: Draft) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "sites": [site],
        "require_login": True,
        "storage_state": None,
        "start_url": SITES[site].placeholder + draft.start_path.rstrip("/"),
        "geolocation": None,
        "intent_template": draft.template,
        "intent": draft.intent,
        "require_reset": any(t == "db_state" or t == "program_html" for t in draft.eval["eval_types"]),
        "eval": draft.eval,
        "solution": draft.solution,
    }


@lru_cache(maxsize=1)
def embedded_tasks() -> dict[int, dict[str, Any]]:
    """item id -> WebArena config (with a ``solution``) for every embedded test and train task."""
    tasks: dict[int, dict[str, Any]] = {}
    for site, (n_test, n_train, first_test, first_train) in LAYOUT.items():
        module = importlib.import_module(f"agentgym_envs.webarena.{SITES[site].app.split(':')[0]}")
        template_db = app_class(site).seeded_template()
        drafts = list(_round_robin(module.drafts(_readonly_copy(template_db))))
        if len(drafts) < n_test + n_train:
            raise RuntimeError(f"{site}: only {len(drafts)} task drafts, need {n_test + n_train}")
        for index, draft in enumerate(drafts[:n_test]):
            tasks[first_test + index] = _config(first_test + index, site, draft)
        for index, draft in enumerate(drafts[n_test: n_test + n_train]):
            tasks[first_train + index] = _config(first_train + index, site, draft)
    return tasks


def _readonly_copy(template):
    import sqlite3

    copy = sqlite3.connect(":memory:")
    template.backup(copy)
    return copy


def splits() -> dict[str, dict[str, list[int]]]:
    """The split table ``splits.json`` holds: sub-task -> {"train": ids, "test": ids}."""
    table = {}
    for site, (n_test, n_train, first_test, first_train) in LAYOUT.items():
        table[SITES[site].subtask] = {"train": list(range(first_train, first_train + n_train)),
                                      "test": list(range(first_test, first_test + n_test))}
    return table
