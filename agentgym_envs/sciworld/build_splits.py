"""Regenerate ``splits.json`` and ``gold.json``: ``python -m agentgym_envs.sciworld.build_splits``.

* Train items: every variation ScienceWorld puts in its train set, for each covered task type.
* Test items: 53/83/44/5/15 per sub-task like the paper, drawn with a fixed seed from
  ScienceWorld's test variations and spread evenly over the sub-task's task types. The draw is
  unfiltered, as AgentGym evaluates: long variations stay in, including those whose gold path
  needs more turns than the 30-turn cap.
* ``gold.json``: the gold action sequence of every test item, so the oracle needs no planning at
  reset. A gold path longer than the cap is first pruned of look-only commands ("look around",
  "examine X", ...) while the replay still succeeds; the items still too long are reported.
  Other items get their gold path on demand (reproducible, see ``jvm.py``).

Takes a few minutes: one JVM plans (and for long paths prunes) the gold path of each test item.
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


def gold_path(jvm: ScienceWorldJvm, task: TaskType, variation: int) -> list[str]:
    """The gold path of a variation, pruned of look-only commands when longer than the cap."""
    jvm.load(task.name, variation, "", gold=True)
    gold = jvm.gold_actions()
    if MAX_TURNS < len(gold) <= PRUNE_LIMIT and succeeds(jvm, task, variation, gold):
        gold = prune(jvm, task, variation, gold)
    return gold


def spread(test_size: int, available: dict[str, int]) -> dict[str, int]:
    """Test items per task type: as even as the task types' test variation counts allow."""
    quota = {name: 0 for name in available}
    while sum(quota.values()) < test_size:
        open_types = [name for name in available if quota[name] < available[name]]
        if not open_types:
            raise RuntimeError(f"only {sum(available.values())} test variations for {test_size} slots")
        quota[min(open_types, key=lambda name: (quota[name], list(available).index(name)))] += 1
    return quota


def build() -> tuple[dict[str, dict[str, list[int]]], dict[str, list[str]], dict[str, dict[str, int]]]:
    """Draw each sub-task's test items uniformly (seeded) from its task types' test variations."""
    rng = np.random.default_rng(SEED)
    jvm = ScienceWorldJvm()
    splits: dict[str, dict[str, list[int]]] = {}
    golds: dict[str, list[str]] = {}
    report: dict[str, dict[str, int]] = {}
    try:
        for subtask, test_size in TEST_SIZES.items():
            types = task_types(subtask)
            sets = {task.name: jvm.variations(task.name) for task in types}
            quota = spread(test_size, {task.name: len(sets[task.name]["test"]) for task in types})
            train: list[int] = []
            test: list[int] = []
            for task in tqdm(types, desc=subtask):
                train += [item_id(task, v) for v in sets[task.name]["train"]]
                drawn = sorted(int(v) for v in
                               rng.choice(sets[task.name]["test"], size=quota[task.name], replace=False))
                over_cap = 0
                for variation in drawn:
                    gold = gold_path(jvm, task, variation)
                    golds[str(item_id(task, variation))] = gold
                    over_cap += len(gold) > MAX_TURNS
                    test.append(item_id(task, variation))
                report[task.name] = {"train": len(sets[task.name]["train"]), "test": len(drawn),
                                     "gold_over_cap": over_cap}
            splits[subtask] = {"train": sorted(train), "test": sorted(test)}
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
