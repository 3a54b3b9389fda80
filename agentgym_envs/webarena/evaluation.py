"""WebArena's evaluators, deterministic: string match, URL match, program_html, plus a database check.

A task's score is the product of its evaluators' scores (all must pass), as in WebArena.

* ``string_match``: ``exact_match`` (normalised equality), ``must_include`` (every reference is a
  substring of the normalised answer; a one-token reference must be one of its tokens),
  ``fuzzy_match``. WebArena asks an LLM for fuzzy matches (here too with ``judge=``, see
  ``core/judge.py``); by default the rule is fixed: after
  normalisation (lower case, numbers without thousands separators or currency signs, punctuation
  dropped) the answer passes if it contains every reference token and is not much longer than the
  reference (at most twice its tokens, or ``FUZZY_EXTRA_TOKENS`` more), or if its ``difflib``
  similarity ratio to a reference is at least ``FUZZY_RATIO`` (0.8). A reference ``"N/A"``
  accepts only answers that say the task cannot be done.
* ``url_match``: the final URL's path equals the reference path and every reference query
  parameter is present with the same value (``|OR|`` separates alternatives).
* ``program_html``: open a URL (``last`` = the final page), evaluate a JavaScript locator and
  match the text it returns (``exact_match`` / ``must_include``).
* ``db_state`` (embedded sites only): an SQL query on the site's database returns exactly the
  expected rows.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

FUZZY_RATIO = 0.8
#: how many words an answer may add to a short reference and still match it by its tokens
FUZZY_EXTRA_TOKENS = 6
NOT_ACHIEVABLE = ("n/a", "not achievable", "cannot be done", "can't be done", "not possible", "impossible", "no such")


def normalize(text: str) -> str:
    text = str(text).lower().strip()
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)  # 1,234 -> 1234
    text = text.replace("$", "")
    text = re.sub(r"[\"'`]", "", text)
    text = re.sub(r"\s+", " ", text)
    return text.strip(" .!?;:")


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:\.[0-9]+)?", normalize(text))


def exact_match(answer: str, reference: str) -> bool:
    return normalize(answer) == normalize(reference)


def must_include(answer: str, reference: str) -> bool:
    """The reference appears in the answer; a one-token reference must be a whole token of it (as WebArena
    does), so ``"1"`` is not found in ``"2021"``."""
    reference_tokens = tokens(reference)
    if len(reference_tokens) == 1:
        return reference_tokens[0] in tokens(answer)
    return normalize(reference) in normalize(answer)


def fuzzy_match(answer: str, reference: str) -> bool:
    """Every reference token is in an answer of comparable length, or the two strings are near-identical.

    The length bound keeps the rule from rewarding an answer that lists everything on the page.
    """
    if normalize(reference) == "n/a":
        return any(phrase in normalize(answer) for phrase in NOT_ACHIEVABLE)
    answer_tokens, reference_tokens = tokens(answer), tokens(reference)
    short_enough = len(answer_tokens) <= max(2 * len(reference_tokens), len(reference_tokens) + FUZZY_EXTRA_TOKENS)
    if reference_tokens and short_enough and all(token in answer_tokens for token in reference_tokens):
        return True
    return difflib.SequenceMatcher(None, normalize(answer), normalize(reference)).ratio() >= FUZZY_RATIO


def string_match(answer: str, references: dict[str, Any], fuzzy: Callable[[str, str], bool] = fuzzy_match) -> bool:
    """Whether the answer passes every reference; ``fuzzy`` grades ``fuzzy_match`` (an LLM judge if given)."""
    for kind, reference in references.items():
        values = reference if isinstance(reference, list) else [reference]
        check = {"exact_match": exact_match, "must_include": must_include, "fuzzy_match": fuzzy}.get(kind)
        if check is None:
            raise ValueError(f"unknown string_match kind {kind!r}")
        if kind == "must_include" and len(values) == 1 and " |OR| " in str(values[0]):
            if not any(must_include(answer, option) for option in str(values[0]).split(" |OR| ")):
                return False
            continue
        if not all(check(answer, value) for value in values):
            return False
    return True


def _split_url(address: str) -> tuple[str, dict[str, list[str]]]:
    parts = urlsplit(unquote(address.strip()))
    path = parts.path.rstrip("/") or "/"
    return f"{parts.netloc.lower()}{path}".lower(), {k.lower(): [v.lower() for v in vs] for k, vs in parse_qs(parts.query).items()}


def url_match(current_url: str, reference: str) -> bool:
    current_base, current_query = _split_url(current_url)
    for option in reference.split(" |OR| "):
        base, query = _split_url(option)
        if base == current_base and all(current_query.get(k) == v for k, v in query.items()):
            return True
    return False


def content_match(text: str, required: dict[str, Any]) -> bool:
    if "exact_match" in required:
        return exact_match(text, required["exact_match"])
    if "must_include" in required:
        return all(any(must_include(text, o) for o in str(v).split(" |OR| ")) for v in required["must_include"])
    if "fuzzy_match" in required:
        return all(fuzzy_match(text, v) for v in required["fuzzy_match"])
    raise ValueError(f"unknown required_contents {sorted(required)}")


def evaluate(
    config: dict[str, Any],
    answer: str,
    current_url: str,
    resolve: Callable[[str], str],
    run_locator: Callable[[str, str], str | None],
    run_sql: Callable[[str, str, list[Any]], list[list[Any]]] | None,
    fuzzy: Callable[[str, str], bool] = fuzzy_match,
) -> tuple[float, list[str]]:
    """(score in {0, 1}, reasons for failures) of a finished episode.

    ``resolve`` turns placeholder URLs into real ones; ``run_locator(url, js)`` returns the text a
    locator yields (``None`` if it could not run); ``run_sql(site, sql, params)`` reads a site database.
    """
    spec = config["eval"]
    failures: list[str] = []
    for kind in spec["eval_types"]:
        if kind == "string_match":
            if not string_match(answer, spec["reference_answers"], fuzzy):
                failures.append(f"answer {answer!r} does not match {spec['reference_answers']}")
        elif kind == "url_match":
            if not url_match(current_url, resolve(spec["reference_url"])):
                failures.append(f"final URL {current_url} does not match {spec['reference_url']}")
        elif kind == "program_html":
            for check in spec["program_html"]:
                target = check.get("url", "last")
                if str(target).startswith("func:") or str(check.get("locator") or "").startswith("func:"):
                    failures.append(f"program_html helper functions ({target!r}, {check.get('locator')!r}) are not supported")
                    continue
                text = run_locator("last" if target == "last" else resolve(target), check.get("locator") or "")
                if text is None or not content_match(text, check["required_contents"]):
                    failures.append(f"page content {str(text)[:200]!r} does not satisfy {check['required_contents']}")
        elif kind == "db_state":
            if run_sql is None:
                failures.append("db_state checks need the embedded sites")
                continue
            for check in spec["db_state"]:
                rows = run_sql(check["site"], check["sql"], list(check.get("params", [])))
                if rows != [list(r) for r in check["expected"]]:
                    failures.append(f"database rows {rows} != expected {check['expected']}")
        else:
            failures.append(f"unsupported evaluator {kind!r}")
    return (0.0 if failures else 1.0), failures
