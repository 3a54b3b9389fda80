"""Which train items a training step plays: uniformly, or in proportion to what they can teach.

A GRPO group teaches only when its episodes' rewards differ: a group whose episodes all succeed, or all
fail, has zero advantage and costs its rollout for nothing. Drawn uniformly, about half the groups of the
registered learning experiment taught (``benchmarks/results/learning.json``).

With ``item_draws="learnability"`` the trainer keeps, for every train item, a Beta posterior of the policy's
success on it, updated from every group played (the ones dynamic sampling throws away included), and draws
each group's item in proportion to the posterior predictive probability that a group of ``G`` episodes has
both a success and a failure::

    teach(item) = 1 - E[p^G] - E[(1 - p)^G],   p ~ Beta(k * m + successes, k * (1 - m) + failures)

The prior is centred on the pool: ``m`` is the success rate of every episode played so far (0.5 before any),
``k`` its weight in episodes (``learnability_prior``). Most items of a pool sit near 0 or 1 for a given policy,
so one group that all failed on an item of a pool that mostly fails is strong evidence, and the item sinks at
once; an item never played keeps a middling value and is explored. No weight is below ``floor``, so no item is
forgotten: the policy changes, and an item it could not solve may become one it solves half the time. The
moments are exact: ``E[p^G]`` under ``Beta(a, b)`` is ``prod_{j<G} (a + j) / (a + b + j)``.

Both drawers share one interface, ``for_step(step, process)`` -> ``draw(count)``, reproducible from the seed,
the step and the process alone (a resumed run draws the same items; processes do not draw alike). Within a
step, the learnability drawer draws without replacement while items remain.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_trl.data import placeholder_prompt

ItemKey = tuple[str, int]
ITEM_DRAWS = ("uniform", "learnability")
ESTIMATES_FILE = "item_estimates.json"  # the learnability drawer's counts, saved with each checkpoint


def item_rows(rows: Iterable[dict[str, Any]]) -> dict[ItemKey, dict[str, Any]]:
    """Each item's training row with every column (the first where the dataset repeats an item): a moved row takes
    its new item's whole row, so a reward function reading a column (a judge's reference answer) reads that item's."""
    table: dict[ItemKey, dict[str, Any]] = {}
    for row in rows:
        table.setdefault((str(row["env_id"]), int(row["item_id"])), dict(row))
    return table


def group_rows(items: Sequence[ItemKey], group_size: int,
               rows: dict[ItemKey, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Training rows for ``items``: ``group_size`` consecutive copies of each (TRL's group layout); an item's row
    from ``rows`` (``item_rows`` of the dataset: every column) where it is there, else its ``env_id``, ``item_id``
    and placeholder ``prompt``."""
    def row_of(env_id: str, item_id: int) -> dict[str, Any]:
        known = (rows or {}).get((env_id, item_id))
        return dict(known) if known is not None else {"env_id": env_id, "item_id": item_id,
                                                      "prompt": placeholder_prompt(env_id, item_id)}

    return [row_of(env_id, item_id) for env_id, item_id in items for _ in range(group_size)]


def replace_row(row: dict[str, Any], new: dict[str, Any]) -> None:
    """Make ``row`` play ``new``'s item, in place (TRL's reward kwargs and logs read the same dict): every column
    of ``new`` replaces the row's. A column the row has and ``new`` lacks would keep another item's value for a
    reward function to read, so it is refused (``ValueError``) rather than graded against the wrong item."""
    stale = sorted(set(row) - set(new))
    if stale:
        raise ValueError(f"a training row moved to item {new.get('env_id')} {new.get('item_id')} keeps the columns "
                         f"{stale} of item {row.get('env_id')} {row.get('item_id')}: draws that move rows "
                         "(item_draws='learnability', dynamic_sampling) need each item's whole row "
                         "(item_rows of the train dataset)")
    prompt = row.get("prompt")
    row.update(new)
    if isinstance(prompt, list):  # TRL's own prompt list holds this object (for its logs): change it in place
        prompt[:] = new["prompt"]
        row["prompt"] = prompt


def assign_items(rows: list[dict[str, Any]], items: Sequence[ItemKey], group_size: int, offset: int = 0,
                 table: dict[ItemKey, dict[str, Any]] | None = None) -> None:
    """Give ``rows`` the items of consecutive groups of ``group_size`` rows, in place (each its item's whole row from
    ``table``). ``rows`` start ``offset`` rows into the batch the groups span (a process's share of the global
    batch: a group may span processes)."""
    planned = group_rows(items, group_size, table)[offset:offset + len(rows)]
    if len(planned) != len(rows):
        raise ValueError(f"{len(items)} items in groups of {group_size} do not cover rows {offset}-"
                         f"{offset + len(rows) - 1}")
    for row, new in zip(rows, planned, strict=True):
        replace_row(row, new)


class ItemDrawer:
    """Draws train items uniformly, with replacement (dynamic sampling's refills under ``item_draws="uniform"``)."""

    def __init__(self, items: Sequence[ItemKey], seed: int):
        if not items:
            raise ValueError("drawing items needs train items to draw from")
        self.items = list(items)
        self.seed = seed
        #: each item's whole training row (``item_rows`` of the train dataset), which a moved row takes
        self.rows: dict[ItemKey, dict[str, Any]] = {}

    def for_step(self, step: int, process: int = 0) -> Callable[[int], list[ItemKey]]:
        """A ``draw(count)`` whose draws depend only on the seed, the step and the process.

        Args:
            step: the global step being rolled out.
            process: this process's index.

        Returns:
            ``draw(count)``: ``count`` (env id, item id) pairs drawn with replacement.
        """
        rng = np.random.default_rng([self.seed, step, process])

        def draw(count: int) -> list[ItemKey]:
            picks = rng.integers(len(self.items), size=count)
            return [self.items[int(i)] for i in picks]

        return draw


def beta_moment(a: float, b: float, power: int) -> float:
    """``E[p^power]`` for ``p ~ Beta(a, b)``."""
    return math.prod((a + k) / (a + b + k) for k in range(power))


def teach_probability(successes: float, failures: float, group_size: int, prior: float,
                      prior_mean: float = 0.5) -> float:
    """The posterior predictive probability that a group of ``group_size`` episodes has a success and a failure,
    under a ``Beta(prior * prior_mean, prior * (1 - prior_mean))`` prior."""
    a, b = prior * prior_mean + successes, prior * (1 - prior_mean) + failures
    return max(0.0, 1.0 - beta_moment(a, b, group_size) - beta_moment(b, a, group_size))


class LearnabilityDrawer(ItemDrawer):
    """Draws train items in proportion to ``max(floor, teach(item))`` (module docstring), from success counts
    that ``observe`` keeps up to date; ``state_dict`` / ``load_state_dict`` carry them through checkpoints."""

    def __init__(self, items: Sequence[ItemKey], seed: int, group_size: int, prior: float = 1.0,
                 floor: float = 0.05):
        super().__init__(list(dict.fromkeys(items)), seed)  # TRL's dataset may repeat an item; each counts once
        if group_size < 2:
            raise ValueError(f"learnability draws need groups of at least 2 episodes, got {group_size}")
        if prior <= 0:
            raise ValueError(f"the Beta prior's weight must be positive, got {prior}")
        if not 0 < floor <= 1:
            raise ValueError(f"the draw weight's floor must be in (0, 1], got {floor}")
        self.group_size = group_size
        self.prior = prior
        self.floor = floor
        self.successes = np.zeros(len(self.items))
        self.failures = np.zeros(len(self.items))
        self._index = {item: i for i, item in enumerate(self.items)}

    def observe(self, outcomes: Iterable[tuple[str, int, bool]]) -> None:
        """Count played episodes: (env id, item id, success); items outside the train set are ignored."""
        for env_id, item_id, success in outcomes:
            index = self._index.get((str(env_id), int(item_id)))
            if index is not None:
                if success:
                    self.successes[index] += 1
                else:
                    self.failures[index] += 1

    def prior_mean(self) -> float:
        """The pool's success rate over every episode counted (Jeffreys-smoothed: 0.5 before any)."""
        return (self.successes.sum() + 0.5) / (self.successes.sum() + self.failures.sum() + 1.0)

    def posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Per item, the Beta posterior's parameters (a, b)."""
        mean = self.prior_mean()
        return self.prior * mean + self.successes, self.prior * (1 - mean) + self.failures

    def teach_probabilities(self) -> np.ndarray:
        """Per item, the probability that a group of it teaches (before the floor)."""
        mean = self.prior_mean()
        return np.array([teach_probability(s, f, self.group_size, self.prior, mean)
                         for s, f in zip(self.successes, self.failures, strict=True)])

    def weights(self) -> np.ndarray:
        """Per item, its draw weight: the teaching probability, never below the floor."""
        return np.maximum(self.teach_probabilities(), self.floor)

    def for_step(self, step: int, process: int | None = 0) -> Callable[[int], list[ItemKey]]:
        """A ``draw(count)`` drawing by weight, without replacement within the step while items remain.

        Args:
            step: the global step being rolled out.
            process: this process's index (its refills); None for the draw every process makes alike (the global
                batch's groups, which may span processes).

        Returns:
            ``draw(count)``: ``count`` (env id, item id) pairs; the weights are those at this call.
        """
        # (a seed list ending in 0 draws as the list without it: processes count from 1 here, the global draw is 0)
        rng = np.random.default_rng([self.seed, step, 0 if process is None else process + 1])
        weights = self.weights()
        left = np.ones(len(self.items), dtype=bool)

        def draw(count: int) -> list[ItemKey]:
            picks: list[int] = []
            for _ in range(count):
                if not left.any():  # every item drawn this step: start over
                    left[:] = True
                chances = np.where(left, weights, 0.0)
                pick = int(rng.choice(len(self.items), p=chances / chances.sum()))
                left[pick] = False
                picks.append(pick)
            return [self.items[i] for i in picks]

        return draw

    def summary(self, drawn: Sequence[ItemKey]) -> dict[str, float]:
        """The estimate's state for the log: its spread over items, the share of items played, and the mean
        teaching probability of the items ``drawn``."""
        a, b = self.posterior()
        teach = self.teach_probabilities()
        drawn_teach = [teach[self._index[item]] for item in drawn if item in self._index]
        return {
            "spread": float(np.std(a / (a + b))),
            "played": float(np.mean(self.successes + self.failures > 0)),
            "drawn_teach": float(np.mean(drawn_teach)) if drawn_teach else 0.0,
        }

    def state_dict(self) -> dict[str, list]:
        """The counts, by item, JSON-ready."""
        return {"items": [[env_id, item_id] for env_id, item_id in self.items],
                "successes": self.successes.tolist(), "failures": self.failures.tolist()}

    def load_state_dict(self, state: dict[str, list]) -> None:
        """Restore counts saved by ``state_dict`` (items no longer in the train set are dropped)."""
        for (env_id, item_id), successes, failures in zip(state["items"], state["successes"], state["failures"],
                                                          strict=True):
            index = self._index.get((str(env_id), int(item_id)))
            if index is not None:
                self.successes[index], self.failures[index] = successes, failures

    def save(self, folder: str | Path) -> None:
        """Write the counts into ``folder`` (a checkpoint)."""
        Path(folder, ESTIMATES_FILE).write_text(json.dumps(self.state_dict()) + "\n", encoding="utf-8")

    def load(self, folder: str | Path) -> bool:
        """Read the counts a checkpoint holds; False when it holds none (a run saved with uniform draws)."""
        path = Path(folder, ESTIMATES_FILE)
        if not path.exists():
            return False
        self.load_state_dict(json.loads(path.read_text(encoding="utf-8")))
        return True
