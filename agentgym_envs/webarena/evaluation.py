"""WebArena's evaluators, deterministic: string match, URL match, program_html, plus a database check.

A task's score is the product of its evaluators' scores (all must pass), as in WebArena. By default
the checks are WebArena's ``evaluation_harness/evaluators.py``:

* ``string_match``: the answer is cleaned (stripped, one pair of surrounding quotes removed, lower
  case); ``exact_match``: equal to the cleaned reference; ``must_include``: every reference is a
  substring of the answer, except that a one-character reference that is the list's only entry
  must be one of its word tokens (WebArena: nltk's ``word_tokenize``, approximated here); no
  ``|OR|`` alternatives (WebArena splits them in ``program_html`` only). ``fuzzy_match``: WebArena
  asks an LLM (here too with ``judge=``, see ``core/judge.py``); by default the rule is fixed:
  after normalisation (lower case, numbers without thousands separators or currency signs,
  punctuation dropped) the answer passes if it contains every reference token and is not much
  longer than the reference (at most twice its tokens, or ``FUZZY_EXTRA_TOKENS`` more), or if its
  ``difflib`` similarity ratio to a reference is at least ``FUZZY_RATIO`` (0.8). A reference
  ``"N/A"`` accepts only answers that say the task cannot be done.
* ``url_match`` ("GOLD in PRED"): trailing slashes stripped, the reference's host and path must be
  a substring of the final URL's (case-sensitive), and for every query parameter of the
  references (``|OR|`` alternatives pooled) one of its values must be among the final URL's
  values, each decoded once by ``parse_qs``.
* ``program_html``: open a URL (``last`` = the final page), evaluate a JavaScript locator, unescape
  HTML entities and match the text (``exact_match`` / ``must_include`` with ``|OR|`` alternatives,
  WebArena's cleaning, no tokens).
* ``db_state`` (embedded sites only): an SQL query on the site's database returns exactly the
  expected rows.

``lenient=True`` (the env's ``lenient_matching=True``) is the project's forgiving variant:
``exact_match`` after ``normalize`` (quotes anywhere, ``$``, thousands separators and trailing
``.!?;:`` ignored), ``must_include`` of a one-token reference as a whole token, ``|OR|``
alternatives in ``string_match`` too, and URLs compared by equal host and path (case-insensitive)
with every reference parameter's values equal.
"""

from __future__ import annotations

import difflib
import html
import re
from collections import defaultdict
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlparse, urlsplit

FUZZY_RATIO = 0.8
#: how many words an answer may add to a short reference and still match it by its tokens
FUZZY_EXTRA_TOKENS = 6
NOT_ACHIEVABLE = ("n/a", "not achievable", "cannot be done", "can't be done", "not possible", "impossible", "no such")
OR = " |OR| "


# ---- WebArena's string checks (the default) -------------------------------------------------------
def clean_answer(answer: str) -> str:
    """WebArena's ``clean_answer``: stripped, one pair of surrounding quotes removed, lower case."""
    answer = str(answer).strip()
    if answer[:1] in ("'", '"') and answer.endswith(answer[:1]):
        answer = answer[1:-1]
    return answer.lower()


def word_tokens(text: str) -> list[str]:
    """Word tokens as nltk's ``word_tokenize`` (the Treebank rules) splits an answer, near enough for
    WebArena's one use (is a one-character reference one of them); nltk is no dependency. Quotes,
    brackets and ``;@#$%&?!`` stand alone, ``:`` and ``,`` unless a digit follows ("1,263.97" stays
    whole), a period before a space or the end, and clitics ("'s", "n't"); hyphens stay ("-2")."""
    text = re.sub(r"([\"“”‘«»„`(){}\[\]<>;@#$%&?!])", r" \1 ", text)
    text = re.sub(r"([:,])(?!\d)", r" \1 ", text)
    text = re.sub(r"(?i)(?<=[^'\s])('s|'m|'d|'ll|'re|'ve|n't|'|’)(?=\s|$)", r" \1", text)
    text = re.sub(r"\.(?=\s|$)", " . ", text)
    return text.split()


def exact_match(answer: str, reference: str) -> bool:
    """WebArena's ``exact_match``: the answers are equal once both are cleaned (``clean_answer``)."""
    return clean_answer(answer) == clean_answer(reference)


def must_include(answer: str, reference: str, tokenize: bool = False) -> bool:
    """WebArena's ``must_include``: the cleaned reference is in the cleaned answer.

    Args:
        answer: the agent's answer.
        reference: one reference value.
        tokenize: WebArena's rule for a single reference: a one-character reference must then be a whole word token of
            the answer (``word_tokens``), so ``"1"`` is not found in ``"2021"``.

    Returns:
        Whether the answer includes the reference.
    """
    clean_reference, clean_prediction = clean_answer(reference), clean_answer(answer)
    if tokenize and len(clean_reference) == 1 and len(word_tokens(clean_reference)) == 1:
        return clean_reference in word_tokens(clean_prediction)
    return clean_reference in clean_prediction


# ---- the project's lenient checks (lenient=True) --------------------------------------------------
def normalize(text: str) -> str:
    """The lenient checks' form of a text: lower case, thousands separators, ``$`` and quotes removed, whitespace
    collapsed, end punctuation stripped.
    """
    text = str(text).lower().strip()
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)  # 1,234 -> 1234
    text = text.replace("$", "")
    text = re.sub(r"[\"'`]", "", text)
    text = re.sub(r"\s+", " ", text)
    return text.strip(" .!?;:")


def tokens(text: str) -> list[str]:
    """Lower-case word and number tokens of ``normalize(text)``; a minus sign before a number stays
    with it ("-79.9436" is not "79.9436"), a hyphen inside a word does not."""
    return re.findall(r"(?:(?<![a-z0-9])-(?=[0-9]))?[a-z0-9]+(?:\.[0-9]+)?", normalize(text))


def lenient_exact_match(answer: str, reference: str) -> bool:
    """The answers are equal once both are ``normalize``d."""
    return normalize(answer) == normalize(reference)


def lenient_must_include(answer: str, reference: str) -> bool:
    """The reference appears in the answer; a one-token reference must be a whole token of it, so
    ``"1"`` is not found in ``"2021"``."""
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


def string_match(answer: str, references: dict[str, Any], fuzzy: Callable[[str, str], bool] = fuzzy_match,
                 lenient: bool = False) -> bool:
    """Whether the answer passes every reference; ``fuzzy`` grades ``fuzzy_match`` (an LLM judge if given)."""
    prediction = clean_answer(answer)  # WebArena cleans the answer once before each check cleans it again
    for kind, reference in references.items():
        values = reference if isinstance(reference, list) else [reference]
        if kind not in ("exact_match", "must_include", "fuzzy_match"):
            raise ValueError(f"unknown string_match kind {kind!r}")
        if kind == "fuzzy_match":
            if not all(fuzzy(answer, value) for value in values):
                return False
        elif not lenient:
            if kind == "exact_match" and not exact_match(prediction, str(reference)):
                return False
            if kind == "must_include" and not all(
                must_include(prediction, str(value), tokenize=len(values) == 1) for value in values
            ):
                return False
        elif kind == "exact_match":
            if not all(lenient_exact_match(answer, value) for value in values):
                return False
        elif not all(any(lenient_must_include(answer, option) for option in str(value).split(OR)) for value in values):
            return False
    return True


# ---- URLs -----------------------------------------------------------------------------------------
def _parse_url(address: str) -> tuple[str, dict[str, list[str]]]:
    parts = urlparse(address)
    return parts.netloc + parts.path, parse_qs(parts.query)


def _lenient_split_url(address: str) -> tuple[str, dict[str, list[str]]]:
    parts = urlsplit(address.strip())
    path = unquote(parts.path).rstrip("/") or "/"  # the query is decoded once, by parse_qs
    query = {k.lower(): [v.lower() for v in vs] for k, vs in parse_qs(parts.query).items()}
    return f"{parts.netloc.lower()}{path}".lower(), query


def url_match(current_url: str, reference: str, lenient: bool = False) -> bool:
    """Whether the page the agent ended on is the reference page.

    Args:
        current_url: the URL of the agent's last page.
        reference: the reference URL; several alternatives are joined by ``OR``'s separator.
        lenient: compare our way (any one alternative; host, path and the reference's query fields, case and trailing
            slash ignored) instead of WebArena's (its base-URL and pooled-query comparison).

    Returns:
        Whether the URLs match.
    """
    if lenient:
        current_base, current_query = _lenient_split_url(current_url)
        for option in reference.split(OR):
            base, query = _lenient_split_url(option)
            if base == current_base and all(current_query.get(k) == v for k, v in query.items()):
                return True
        return False
    current_base, current_query = _parse_url(str(current_url).rstrip("/"))
    bases, pooled = [], defaultdict(set)
    for option in reference.split(OR):
        base, query = _parse_url(option.rstrip("/"))
        bases.append(base)
        for key, values in query.items():
            pooled[key].update(values)
    if not any(base in current_base for base in bases):
        return False
    return all(any(value in current_query.get(key, []) for value in values) for key, values in pooled.items())


def content_match(text: str, required: dict[str, Any], lenient: bool = False) -> bool:
    """A ``program_html`` check of the text a locator returned (HTML entities unescaped first)."""
    text = html.unescape(text)
    if "exact_match" in required:
        check = lenient_exact_match if lenient else exact_match
        return check(text, required["exact_match"])
    if "must_include" in required:
        check = lenient_must_include if lenient else must_include
        return all(any(check(text, o) for o in str(v).split(OR)) for v in required["must_include"])
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
    lenient: bool = False,
) -> tuple[float, list[str]]:
    """(score in {0, 1}, reasons for failures) of a finished episode.

    ``resolve`` turns placeholder URLs into real ones; ``run_locator(url, js)`` returns the text a
    locator yields (``None`` if it could not run); ``run_sql(site, sql, params)`` reads a site database.
    ``lenient=True``: the project's forgiving string and URL checks instead of WebArena's.
    """
    spec = config["eval"]
    failures: list[str] = []
    for kind in spec["eval_types"]:
        if kind == "string_match":
            if not string_match(answer, spec["reference_answers"], fuzzy, lenient):
                failures.append(f"answer {answer!r} does not match {spec['reference_answers']}")
        elif kind == "url_match":
            if not url_match(current_url, resolve(spec["reference_url"]), lenient):
                failures.append(f"final URL {current_url} does not match {spec['reference_url']}")
        elif kind == "program_html":
            for check in spec["program_html"]:
                target = check.get("url", "last")
                if str(target).startswith("func:") or str(check.get("locator") or "").startswith("func:"):
                    failures.append(f"program_html helper functions ({target!r}, {check.get('locator')!r}) "
                                    f"are not supported")
                    continue
                text = run_locator("last" if target == "last" else resolve(target), check.get("locator") or "")
                if text is None or not content_match(text, check["required_contents"], lenient):
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
