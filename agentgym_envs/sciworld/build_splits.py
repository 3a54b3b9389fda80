"""Regenerate ``splits.json`` and ``gold.json``: ``python -m agentgym_envs.sciworld.build_splits``.

* Train items: every variation ScienceWorld puts in its train set, for each covered task type.
* Test items: 53/83/44/5/15 per sub-task like the paper, drawn with a fixed seed from
  ScienceWorld's test variations, spread evenly over the sub-task's task types. Only variations
  whose gold path (the simulator's own planner) succeeds within the 30-turn cap are eligible, so
  every test item can be completed within the budget the paper evaluates with. A gold path a
  few steps too long is first pruned of look-only commands ("look around", "examine X", ...) one
  at a time, keeping each removal only if the replay still succeeds.
* ``gold.json``: the gold action sequence of every test item, so the oracle needs no planning at
  reset. Other items get their gold path on demand (reproducible, see ``jvm.py``).

Takes a few minutes: one JVM plans and replays the gold path of each variation it scans.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from agentgym_envs.sciworld.catalog import TEST_SIZES, TaskType, item_id, task_types
from agentgym_envs.sciworld.jvm import ScienceWorldJvm
from agentgym_envs.sciworld.tasks import MAX_TURNS

SEED = 2509
HERE = Path(__file__).resolve().parent


#: Commands that only show something; the gold agent uses them liberally.
LOOK_ONLY = ("look around", "look at ", "look in ", "examine ", "inventory", "task")
#: Gold paths longer than this are not worth pruning (a dozen look-only steps are rarely there).
PRUNE_LIMIT = MAX_TURNS + 12


def succeeds(jvm: ScienceWorldJvm, task: TaskType, variation: int, actions: list[str]) -> bool:
    """Whether replaying ``actions`` from a fresh load completes the task with full score."""
    jvm.load(task.name, variation)
    result = None
    for action in actions:
        result = jvm.step(action)
    return result is not None and result.completed and result.score >= 1.0


def prune(jvm: ScienceWorldJvm, task: TaskType, variation: int, gold: list[str]) -> list[str]:
    """Drop look-only commands while the replay still succeeds: all at once if that works, else one at a time."""
    looks = [i for i, action in enumerate(gold) if action.startswith(LOOK_ONLY)]
    skipped = set(looks)
    without_all = [action for i, action in enumerate(gold) if i not in skipped]
    if looks and succeeds(jvm, task, variation, without_all):
        return without_all
    actions = list(gold)
    for index in reversed(looks):
        if len(actions) <= MAX_TURNS:
            break
        candidate = actions[:index] + actions[index + 1 :]
        if succeeds(jvm, task, variation, candidate):
            actions = candidate
    return actions


def gold_within_cap(jvm: ScienceWorldJvm, task: TaskType, variation: int) -> list[str] | None:
    """A verified gold path of at most ``MAX_TURNS`` actions (pruned if needed), or ``None``."""
    jvm.load(task.name, variation, "", gold=True)
    gold = jvm.gold_actions()
    if not gold or len(gold) > PRUNE_LIMIT:
        return None
    if len(gold) > MAX_TURNS:
        gold = prune(jvm, task, variation, gold)
        if len(gold) > MAX_TURNS:
            return None
    return gold if succeeds(jvm, task, variation, gold) else None


def build() -> tuple[dict[str, dict[str, list[int]]], dict[str, list[str]], dict[str, dict[str, int]]]:
    """Scan each task type's test variations in a seeded random order, always extending the task
    type with the fewest items so far, until the sub-task has its test size: a uniform draw among
    eligible variations, spread evenly over task types, without planning all ~900 of them."""
    rng = np.random.default_rng(SEED)
    jvm = ScienceWorldJvm()
    splits: dict[str, dict[str, list[int]]] = {}
    golds: dict[str, list[str]] = {}
    report: dict[str, dict[str, int]] = {}
    try:
        for subtask, test_size in TEST_SIZES.items():
            types = task_types(subtask)
            train: list[int] = []
            queue: dict[str, list[int]] = {}
            for task in types:
                sets = jvm.variations(task.name)
                train += [item_id(task, v) for v in sets["train"]]
                queue[task.name] = [int(v) for v in rng.permutation(sets["test"])]
                report[task.name] = {
                    "train": len(sets["train"]), "test_variations": len(sets["test"]), "scanned": 0, "test": 0,
                }
            chosen: dict[str, list[int]] = {task.name: [] for task in types}
            progress = tqdm(total=test_size, desc=subtask)
            while sum(len(items) for items in chosen.values()) < test_size:
                open_types = [task for task in types if queue[task.name]]
                if not open_types:
                    found = sum(map(len, chosen.values()))
                    raise RuntimeError(f"{subtask}: only {found} eligible test items for {test_size} slots")
                task = min(open_types, key=lambda t: (len(chosen[t.name]), types.index(t)))
                variation = queue[task.name].pop(0)
                report[task.name]["scanned"] += 1
                gold = gold_within_cap(jvm, task, variation)
                if gold is not None:
                    chosen[task.name].append(item_id(task, variation))
                    golds[str(item_id(task, variation))] = gold
                    report[task.name]["test"] += 1
                    progress.update(1)
            progress.close()
            splits[subtask] = {"train": sorted(train), "test": sorted(i for items in chosen.values() for i in items)}
            print(subtask, {task.name: report[task.name] for task in types}, flush=True)
    finally:
        jvm.close()
    return splits, golds, report


if __name__ == "__main__":
    splits, golds, report = build()
    (HERE / "splits.json").write_text(json.dumps(splits, indent=1) + "\n")
    ordered = sorted(golds.items(), key=lambda kv: int(kv[0]))
    lines = [f"{json.dumps(item)}: {json.dumps(actions)}" for item, actions in ordered]
    (HERE / "gold.json").write_text("{\n" + ",\n".join(lines) + "\n}\n")  # one item per line
    print(json.dumps(report, indent=1))
    print(f"wrote {HERE / 'splits.json'} and {HERE / 'gold.json'}")
