"""Grading of ``finish`` answers.

By default an answer is graded as AgentGym's tool servers grade it (``agentenv-tool``'s
``Toolusage`` envs): ``finish`` records its answer (a list sorted) as a subgoal, and the task is won
when that value equals the gold subgoal under Python's ``==``: no case folding, no tolerance, no
reading of numbers out of text (``"21.4"`` is not ``21.4``; ``21.40`` is ``21.4`` and ``3`` is
``3.0``). ``Gold.matches_as_agentgym`` is that rule.

``Gold.matches`` is ours (``lenient_answers=True``): agents answer in many shapes (``21.4``,
``"21.4 °C"``, ``["a", "b"]``, ``"a, b"``, ``"Yes."``); the gold answer's type decides how the
prediction is read, numbers within a tolerance, texts after normalisation, lists as sets.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from dataclasses import dataclass
from typing import Any

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_KEEP = set("-.:/")


def normalize_text(value: Any) -> str:
    """Lower case, no accents, no punctuation except inside dates/numbers, no articles, single spaces."""
    text = unicodedata.normalize("NFKD", str(value))
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower().strip()
    text = "".join(" " if ch in string.punctuation and ch not in _KEEP else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split()).strip(" .:-/")


def read_number(value: Any) -> float | None:
    """The number in ``value`` if it holds exactly one (``"1,250 km"`` -> 1250.0)."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str) and len(found := _NUMBER.findall(value)) == 1:
            number = float(found[0].replace(",", ""))
        else:
            return None
    except OverflowError:  # an int with hundreds of digits
        return None
    return number if math.isfinite(number) else None


def read_list(value: Any) -> list[str]:
    """A list answer: a JSON list, or a string split on commas, semicolons, newlines and ' and '."""
    if isinstance(value, list):
        items = [str(v) for v in value]
    else:
        items = re.split(r"[;,\n]|\band\b", str(value))
    return [normalize_text(v) for v in items if normalize_text(v)]


def read_bool(value: Any) -> bool | None:
    """A yes/no answer as a bool (``yes``/``true``/``y`` and ``no``/``false``/``n`` as first word); None for anything
    else.
    """
    if isinstance(value, bool):
        return value
    words = normalize_text(value).split()
    if words and words[0] in {"yes", "true", "y"}:
        return True
    if words and words[0] in {"no", "false", "n"}:
        return False
    return None


@dataclass(frozen=True)
class Gold:
    """A gold answer and how to compare with it.

    ``kind`` is ``number`` (within ``tolerance`` absolute or ``relative`` times the gold value),
    ``text``, ``list`` (order-free) or ``bool``.
    """

    value: Any
    kind: str = "text"
    tolerance: float = 0.0
    relative: float = 0.0

    @property
    def agentgym_subgoal(self) -> Any:
        """The gold as AgentGym's data stores a subgoal: lists sorted (its ``finish`` sorts the answer
        and its gold lists are sorted), a yes/no answer as the word our question asks for."""
        if self.kind == "bool":
            return "yes" if self.value else "no"
        if isinstance(self.value, list):
            return _sorted_or_none(self.value)
        return self.value

    def matches_as_agentgym(self, predicted: Any) -> bool:
        """AgentGym's rule: the answer (a list sorted, as its ``finish`` does) ``==`` the gold subgoal."""
        if isinstance(predicted, list):
            predicted = _sorted_or_none(predicted)
            if predicted is None:  # AgentGym's sort raises: an error observation, never a win
                return False
        if isinstance(predicted, bool):  # JSON true/false: AgentGym evals the input as Python, a NameError there
            return False
        return bool(predicted == self.agentgym_subgoal)

    def matches(self, predicted: Any) -> bool:
        """Our forgiving rule (``lenient_answers=True``)."""
        if predicted is None:
            return False
        if self.kind == "number":
            number = read_number(predicted)
            if number is None:
                return False
            gold = float(self.value)
            return abs(number - gold) <= max(self.tolerance, self.relative * abs(gold)) + 1e-9
        if self.kind == "list":
            return sorted(read_list(predicted)) == sorted(read_list(self.value))
        if self.kind == "bool":
            return read_bool(predicted) is bool(self.value)
        return normalize_text(predicted) == normalize_text(self.value)


def _sorted_or_none(values: list[Any]) -> list[Any] | None:
    """``sorted(values)``, or ``None`` where Python cannot order them (mixed types)."""
    try:
        return sorted(values)
    except TypeError:
        return None
