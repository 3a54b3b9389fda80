"""Reading hostile model output safely: valid UTF-8 out, bounded numbers and JSON in.

A model (or a person probing the env server) can send anything: numbers with thousands of
digits, digits of other scripts, lone UTF-16 surrogates (raw or JSON-escaped), JSON nested
thousands deep. These helpers are the one place where such input is turned into either a
bounded value or ``None`` / ``ValueError``, so families never call ``int()`` or ``json.loads``
on model text themselves. ``valid_utf8`` is applied by ``TextEnv`` to every observation and
info value, so nothing an agent echoes can make an observation unencodable.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: U+D800..U+DFFF: only valid in pairs inside UTF-16, never in a Python str meant for UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")
_ASCII_COUNT = re.compile(r"[0-9]{1,18}")

#: Deepest JSON nesting accepted from an agent (tool arguments are flat in practice).
MAX_JSON_DEPTH = 32


def valid_utf8(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings replaced by U+FFFD (recursing into lists,
    tuples and dict values/keys); anything else is returned unchanged.

    Strings that already encode (the common case) are returned as they are, without a copy.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {valid_utf8(key): valid_utf8(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(valid_utf8(item) for item in value)
    return value


def parse_count(text: str | None, default: int | None = None) -> int | None:
    """A non-negative count written in ASCII digits (at most 18 of them), else ``None``.

    ``int()`` accepts Arabic-Indic and full-width digits and raises on a 5,000-digit string;
    ``str.isdigit()`` is true for superscripts and Ethiopic numerals that ``int()`` rejects. Agents
    write counts and element ids in ASCII; anything else is not a count. ``None`` or an empty
    string gives ``default``.
    """
    if text is None or text == "":
        return default
    return int(text) if _ASCII_COUNT.fullmatch(text) else None


def json_depth_ok(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether the brackets outside strings in ``text`` nest at most ``max_depth`` deep (a linear scan
    that runs before ``json`` parses, since deep nesting makes the decoder raise ``RecursionError``)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                return False
        elif char in "]}":
            depth -= 1
    return True


def decode_json_prefix(text: str, max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, int]:
    """``json.JSONDecoder().raw_decode`` for agent text: the first JSON value and where it ends.

    Raises ``ValueError`` (a ``json.JSONDecodeError`` for syntax errors) with a message for the
    agent when the text nests deeper than ``max_depth``, holds a number too large to be a float
    (``1e999``, ``NaN`` and ``Infinity`` are refused too) or a number with thousands of digits.
    Lone surrogates from ``\\ud800`` escapes are replaced by U+FFFD.
    """
    if not json_depth_ok(text, max_depth):
        raise ValueError(f"the JSON nests deeper than {max_depth} levels")

    def bounded_float(literal: str) -> float:
        number = float(literal)
        if number in (float("inf"), float("-inf")):
            raise ValueError(f"the number {literal[:20]}... is too large")
        return number

    def refuse_constant(name: str) -> None:
        raise ValueError(f"{name} is not a JSON number")

    def bounded_int(literal: str) -> int:
        if len(literal.lstrip("-")) > 18:
            raise ValueError(f"the number {literal[:20]}... has too many digits")
        return int(literal)

    decoder = json.JSONDecoder(parse_float=bounded_float, parse_int=bounded_int, parse_constant=refuse_constant)
    value, end = decoder.raw_decode(text)
    return valid_utf8(value), end
