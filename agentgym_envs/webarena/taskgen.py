"""Task drafts: what a site module's templates produce before they become WebArena task configs.

A draft holds WebArena's config fields (intent, start URL, eval) plus its scripted solution. A
solution step is an action of the env's action space in which an element may be named instead of
numbered: ``click <link "My Orders">`` or ``type <searchbox "Search"> [mug] [1]``. The oracle
replaces each ``<role "name">`` by the ``[id]`` that element has on the current page, so the
scripts survive markup changes and still go through exactly the agent's action space.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Draft:
    template: str
    intent: str
    start_path: str
    eval: dict[str, Any]
    solution: list[str] = field(default_factory=list)


def answer_eval(kind: str, reference: Any) -> dict[str, Any]:
    """String-match eval: ``kind`` is exact_match, must_include or fuzzy_match."""
    return {"eval_types": ["string_match"], "reference_answers": {kind: reference}, "reference_url": "",
            "program_html": []}


def url_eval(reference_url: str) -> dict[str, Any]:
    """URL-match eval: the agent must end on ``reference_url`` (the reference inside the page's URL)."""
    return {"eval_types": ["url_match"], "reference_answers": None, "reference_url": reference_url,
            "url_note": "GOLD in PRED", "program_html": []}


def db_eval(site: str, sql: str, expected: list[list[Any]], params: list[Any] | None = None) -> dict[str, Any]:
    """Our embedded sites' state check: the rows ``sql`` returns must equal ``expected``."""
    return {"eval_types": ["db_state"], "reference_answers": None, "reference_url": "", "program_html": [],
            "db_state": [{"site": site, "sql": sql, "params": params or [], "expected": expected}]}


def html_eval(url: str, locator: str, required: dict[str, Any]) -> dict[str, Any]:
    """Page-content eval: the text ``locator`` reads on page ``url`` must hold ``required``.

    Args:
        url: the page to read (``last``: the page the agent ended on).
        locator: a JavaScript expression whose value is read (empty: the page's text).
        required: WebArena's ``required_contents`` (``exact_match`` / ``must_include``).

    Returns:
        The eval part of a task config.
    """
    return {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
            "program_html": [{"url": url, "locator": locator, "required_contents": required}]}


def seeded_shuffle(rows: list[Any], seed: int) -> list[Any]:
    """A copy of ``rows`` in the order ``random.Random(seed)`` shuffles it (a site's fixed task order)."""
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    return shuffled


def q(text: str) -> str:
    """An element name inside a solution step (double quotes escaped)."""
    return '"' + text.replace('"', '\\"') + '"'
