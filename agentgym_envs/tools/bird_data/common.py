"""What the four generated databases share: the question record, SQL literals, the seeded draws and
the question templates, which are data (``questions.json``: the values each one draws, then its
question, evidence and gold SQL with those values filled in)."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import string
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

#: The literal values a template's texts are filled with.
Values = dict[str, Any]


@dataclass(frozen=True)
class Question:
    """One text-to-SQL item: the database, the question, the evidence hint and the gold SQL."""

    db_id: str
    question: str
    evidence: str
    sql: str
    template: str = ""


def q(value: Any) -> str:
    """A SQL literal."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def dates(rng: np.random.Generator, start: dt.date, days: int, size: int) -> list[str]:
    """``size`` ISO dates drawn uniformly from the ``days`` days starting at ``start``."""
    return [(start + dt.timedelta(days=int(d))).isoformat() for d in rng.integers(0, days, size=size)]


def pick(rng: np.random.Generator, options: Any, size: int | None = None, p: Any = None) -> Any:
    """One option (or ``size`` of them, with replacement), uniformly or with probabilities ``p``."""
    count = 1 if size is None else size
    if p is None:
        index = rng.integers(len(options), size=count)
    else:
        cumulative = np.cumsum(p) / np.sum(p)
        index = np.minimum(np.searchsorted(cumulative, rng.random(count), side="right"), len(options) - 1)
    return options[int(index[0])] if size is None else [options[int(i)] for i in index]


class _SQLFormatter(string.Formatter):
    """``str.format`` plus two conversions: ``{name!q}``, the value as a SQL literal (see ``q``), and
    ``{month!d:%B %Y}``, a ``YYYY-MM`` or ``YYYY-MM-DD`` string as a date (so a format spec can spell it out)."""

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion == "q":
            return q(value)
        if conversion == "d":
            return dt.date.fromisoformat(value if len(value) > 7 else value + "-01")
        return super().convert_field(value, conversion)


_FORMATTER = _SQLFormatter()


def draw_values(steps: list[dict[str, Any]], db: sqlite3.Connection, rng: np.random.Generator, lists: Any) -> Values:
    """Run a template's ``draw`` steps in order (their order is the order of the random draws).

    * ``{"choice": <list, or the name of a list in lists>, "as": name}``: one of the options;
    * ``{"integer": [low, high], "as": name}``: an integer, ``low <= n < high``;
    * ``{"row": <SQL ending in LIMIT 1 OFFSET ?>, "offset": [high] or [low, high], "as": [names]}``: the row
      at a random offset, its columns named in order;
    * ``{"column": <SQL of one column>, "as": name}``: one value of the query's result.
    """
    values: Values = {}
    for step in steps:
        if "choice" in step:
            options = step["choice"]
            values[step["as"]] = pick(rng, getattr(lists, options) if isinstance(options, str) else options)
        elif "integer" in step:
            values[step["as"]] = int(rng.integers(*step["integer"]))
        elif "row" in step:
            row = db.execute(step["row"], (int(rng.integers(*step["offset"])),)).fetchone()
            values.update(zip(step["as"], row))
        else:
            values[step["as"]] = pick(rng, [r[0] for r in db.execute(step["column"])])
    return values


@dataclass(frozen=True)
class Template:
    """A question template of ``questions.json``: how its values are drawn, and its texts."""

    db_id: str
    name: str
    draw: list[dict[str, Any]]
    question: str
    evidence: str
    sql: str

    def __call__(self, db: sqlite3.Connection, rng: np.random.Generator, lists: Any) -> Question:
        """The question these draws give; ``lists`` holds the named option lists (the database's module)."""
        values = draw_values(self.draw, db, rng, lists)
        fill = lambda text: _FORMATTER.format(text, **values)  # noqa: E731
        return Question(self.db_id, fill(self.question), fill(self.evidence), fill(self.sql), self.name)


@lru_cache(maxsize=1)
def _texts() -> dict[str, list[dict[str, Any]]]:
    with resources.files(__package__).joinpath("questions.json").open("r", encoding="utf-8") as handle:
        return json.load(handle)


def templates(db_id: str) -> tuple[Template, ...]:
    """The templates of ``db_id``, in ``questions.json`` order."""
    return tuple(Template(db_id, **entry) for entry in _texts()[db_id])
