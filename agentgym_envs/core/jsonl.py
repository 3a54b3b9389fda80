"""JSON-lines files the project appends to (trajectories, collect's journal, training metrics), and whole files
written at once (``write_atomically``: a run's settings and summaries).

Appending line by line keeps what was written when a process dies; the price is a last line that a
kill may cut, or a byte a disk or a copy may damage. Readers here skip such a line with a warning
(never the whole file), and writers start a new line after a cut one, so one bad line costs one
record.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def finite_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by the string ``"NaN"``, ``"Infinity"`` or
    ``"-Infinity"``: Python's json writes them bare, which strict parsers (a browser's ``JSON.parse``, jq)
    reject whole, while ``float()`` and JavaScript's ``Number()`` read the strings back as the same number."""
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE[repr(float(value))]
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(item) for item in value]
    return value


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every readable line of ``path``; a line that is not UTF-8 or not JSON
    is skipped with a warning, blank lines silently."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                logger.warning("%s line %d is not valid UTF-8 (a damaged byte?); skipped", path, number)
                continue
            except (json.JSONDecodeError, RecursionError, ValueError):
                logger.warning("%s line %d is not valid JSON (an interrupted write?); skipped", path, number)
                continue
            yield number, value


def ends_with_newline(path: str | os.PathLike) -> bool:
    """Whether ``path`` is missing, empty or ends with a newline (else its last line was cut off)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return True
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def append_lines(path: str | os.PathLike, lines: str) -> None:
    """Append ``lines`` (each ending in a newline) to ``path``, flushed; after a line cut off by a crash
    a newline comes first, so the cut line does not swallow the first new record."""
    if not lines:
        return
    if not ends_with_newline(path):
        lines = "\n" + lines
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(lines)
        handle.flush()


def write_atomically(path: str | os.PathLike, text: str) -> None:
    """``text`` as ``path``, whole or not at all: a full disk leaves the old file (or none), never an empty one that
    every rerun would fail on; a symlink at ``path`` is replaced, its target left alone."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
