"""SQLite helpers shared by the tool services and BIRD: private copies, fingerprints, guarded reads."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Callable


def clone(master: sqlite3.Connection) -> sqlite3.Connection:
    """A private in-memory copy of ``master`` (cheap: one memcpy of the serialised pages).

    Each env works on its own copy, so envs in parallel threads never share a connection and no
    episode can see another's writes.
    """
    copy = sqlite3.connect(":memory:", check_same_thread=False)
    if hasattr(master, "serialize"):
        copy.deserialize(master.serialize())
    else:  # SQLite builds without the serialise API
        master.backup(copy)
    return copy


def fingerprint(db: sqlite3.Connection) -> str:
    """SHA-256 over every table's schema and rows in a fixed order: equal iff the data is equal."""
    digest = hashlib.sha256()
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    for table in tables:
        digest.update(table.encode())
        quoted = '"' + table.replace('"', '""') + '"'
        for row in sorted(repr(row) for row in db.execute(f"SELECT * FROM {quoted}")):
            digest.update(row.encode())
    return digest.hexdigest()


# ---- read-only execution with a time limit ----------------------------------------------------

_READ_ACTIONS = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    getattr(sqlite3, "SQLITE_RECURSIVE", 33),
}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}


def _authorize(action: int, arg1: str | None, arg2: str | None, db_name: str | None, source: str | None) -> int:
    """Allow reading only: SELECT, column reads, functions (bar extension loading) and recursive CTEs."""
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


#: One printf conversion: flags, width (digits or ``*``), precision (digits or ``*``), type.
_PRINTF_SPEC = re.compile(r"%[-+ 0#,!]*(\*|[0-9]+)?(?:\.(\*|[0-9]+))?([a-zA-Z%])")
#: Widest field a query may ask printf() for.
MAX_PRINTF_WIDTH = 10_000


def _bounded_printf(helper: sqlite3.Connection) -> Callable[..., Any]:
    """SQLite's own ``printf()`` (run on ``helper``), refusing widths and precisions over
    ``MAX_PRINTF_WIDTH``: SQLite builds ``printf('%.*c', 2147483647, 'x')`` in one VM step that
    takes 10 s or more, and no progress handler or interrupt can stop a step midway."""

    def printf(template: Any, *args: Any) -> Any:
        arg_index = 0
        for spec in _PRINTF_SPEC.finditer(str(template or "")):
            for size in spec.group(1, 2):
                if size == "*":
                    value = args[arg_index] if arg_index < len(args) else 0
                    arg_index += 1
                else:
                    value = size
                try:
                    too_wide = size is not None and abs(float(value)) > MAX_PRINTF_WIDTH
                except (TypeError, ValueError, OverflowError):
                    too_wide = False  # SQLite reads a non-number as 0
                if too_wide:
                    raise ValueError("printf width too large")
            arg_index += spec.group(3) != "%"
        placeholders = ", ".join("?" * (1 + len(args)))
        return helper.execute(f"SELECT printf({placeholders})", (template, *args)).fetchone()[0]

    return printf


def _authorize_plain(action: int, arg1: str | None, arg2: str | None, db_name: str | None, source: str | None) -> int:
    """For a connection that is read-only itself (``plain=True``): allow what it allows, bar extension loading,
    ``ATTACH`` (which could write a file: ``VACUUM INTO``) and raising the cap on TEMP tables."""
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_ATTACH:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() == "max_page_count" and arg2 is not None:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _explain(message: str, timeout: float, plain: bool = False) -> str:
    """SQLite's message, reworded where the cause is our guard rather than the SQL itself; with
    ``plain`` only then (a refused write, a second statement: SQLite's and Python's own words)."""
    lower = message.lower()
    if "user-defined function raised exception" in lower:  # only our bounded printf() raises
        return f"SQL error: printf()/format() widths and precisions are limited to {MAX_PRINTF_WIDTH}."
    if "interrupted" in lower:
        return f"The query was interrupted: it ran longer than the {timeout:g} s time limit."
    if plain:
        return message
    if "one statement" in lower:
        return "Give exactly one SQL statement per action."
    if any(word in lower for word in ("authoriz", "prohibited", "readonly", "read-only")):
        return f"Only SELECT queries are allowed; the database is read-only ({message})."
    return f"SQL error: {message}"


class QueryError(Exception):
    """A query was refused or failed; the message is meant for the agent."""


@dataclass
class QueryResult:
    """``rows``: the first ``max_rows`` rows; ``row_set`` (``run(..., distinct=True)`` only): every
    distinct row of the whole result, ``None`` if there are more than ``max_rows`` of them."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool
    seconds: float
    row_set: frozenset[tuple[Any, ...]] | None = None


class ReadOnlySQL:
    """Runs one SELECT at a time on ``db`` under an authorizer, a time limit and size limits.

    * writes, schema changes, ATTACH, PRAGMA and transactions are denied by the authorizer (and by
      ``PRAGMA query_only``), so the data cannot change whatever the agent sends;
    * a progress handler interrupts any statement running longer than ``timeout`` seconds, including
      the time spent fetching rows, so an endless recursive CTE or a huge cross join returns an
      error instead of hanging;
    * at most ``max_rows`` rows are fetched, strings/blobs are capped at ``max_length`` bytes, a
      result row at ``max_columns`` columns (``SQLITE_LIMIT_COLUMN``), and a result over ``max_bytes``
      (a rough size, counted row by row) is refused, so no query holds more than ``max_bytes`` plus
      one row (``max_columns * max_length``) in memory;
    * ``printf()`` / ``format()`` refuse huge widths, the one built-in whose single step outlasts
      the time limit (see ``_bounded_printf``).

    ``plain=True`` is only for a connection that is read-only itself (opened with SQLite's ``mode=ro``, as
    SqlGym opens BIRD's files): the statement runs as SQLite runs it there, so a write fails with
    SQLite's "attempt to write a readonly database", a statement without rows (an empty one, ``BEGIN``,
    a ``TEMP`` table) returns no rows, and errors are SQLite's and Python's own text; the time limit,
    the size limits (TEMP tables' too), the printf bound and the refusal of ``ATTACH`` (so of ``VACUUM``)
    and of extension loading stay.
    """

    def __init__(
        self,
        db: sqlite3.Connection,
        timeout: float = 3.0,
        max_rows: int = 100_000,
        max_length: int = 100_000,
        max_bytes: int = 64_000_000,
        max_columns: int = 256,
        plain: bool = False,
    ):
        self.db = db
        self.timeout = timeout
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.plain = plain
        if plain:  # a read-only connection refuses writes itself; TEMP tables, which SQLite lets be, are capped
            db.execute(f"PRAGMA temp.max_page_count = {max(1, max_bytes // 4096)}")
        else:
            db.execute("PRAGMA query_only = ON")
        if hasattr(db, "setlimit"):
            db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_length)
            db.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, max_columns)
            db.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 100_000)
            db.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        db.set_authorizer(_authorize_plain if plain else _authorize)
        self._printf_helper = sqlite3.connect(":memory:", check_same_thread=False)
        printf = _bounded_printf(self._printf_helper)
        for name in ("printf", "format"):
            db.create_function(name, -1, printf, deterministic=True)
        self._deadline = 0.0

    def close(self) -> None:
        """Close the database and the printf helper; safe to call twice."""
        self.db.close()
        self._printf_helper.close()

    def _check_time(self) -> int:
        return 1 if time.perf_counter() > self._deadline else 0

    def _fetch(self, cursor: sqlite3.Cursor) -> list[tuple[Any, ...]]:
        """Up to ``max_rows + 1`` rows, one at a time, refusing results larger than ``max_bytes`` as soon
        as the row that crosses it arrives (a batch of wide rows could hold gigabytes before a check)."""
        rows: list[tuple[Any, ...]] = []
        size = 0
        while len(rows) <= self.max_rows:
            row = cursor.fetchone()
            if row is None:
                break
            size += sum(16 + (len(v) if isinstance(v, (str, bytes)) else 0) for v in row)
            if size > self.max_bytes:
                del row, rows
                raise QueryError(
                    f"The result is too large (over {self.max_bytes // 1_000_000} MB); select fewer rows or columns."
                )
            rows.append(row)
        return rows

    def _fetch_distinct(
        self, cursor: sqlite3.Cursor
    ) -> tuple[list[tuple[Any, ...]], frozenset[tuple[Any, ...]] | None]:
        """The first ``max_rows + 1`` rows and the set of all distinct rows (``None`` past ``max_rows``
        of them): the whole result is read, under the time limit, the size of the rows kept (listed or
        distinct) counted against ``max_bytes``."""
        rows: list[tuple[Any, ...]] = []
        seen: set[tuple[Any, ...]] = set()
        size = 0
        while batch := cursor.fetchmany(200):
            for row in batch:
                kept, new = len(rows) <= self.max_rows, row not in seen
                if kept:
                    rows.append(row)
                if new:
                    seen.add(row)
                    if len(seen) > self.max_rows:
                        return rows, None
                if not (kept or new):
                    continue
                size += 16 * len(row) + sum(len(v) for v in row if isinstance(v, (str, bytes)))
                if size > self.max_bytes:
                    raise QueryError(
                        f"The result is too large (over {self.max_bytes // 1_000_000} MB); "
                        f"select fewer rows or columns."
                    )
        return rows, frozenset(seen)

    def run(self, sql: str, distinct: bool = False) -> QueryResult:
        """Execute one read-only statement; raises ``QueryError`` with SQLite's message otherwise.
        ``distinct=True`` reads the whole result for ``QueryResult.row_set`` (result sets compared
        as sets, the rows kept for display still capped)."""
        statement = sql if self.plain else sql.strip()
        if not statement.strip() and not self.plain:
            raise QueryError("The SQL statement is empty.")
        started = time.perf_counter()
        self._deadline = started + self.timeout
        self.db.set_progress_handler(self._check_time, 5_000)
        cursor = None
        try:
            cursor = self.db.execute(statement)
            if cursor.description is None and not self.plain:
                raise QueryError("Only SELECT queries are allowed; the database is read-only.")
            columns = [d[0] for d in cursor.description or ()]
            row_set = None
            if cursor.description is None:  # plain: a statement without rows (SQLite's fetchall() is [])
                rows, row_set = [], frozenset() if distinct else None
            elif distinct:
                rows, row_set = self._fetch_distinct(cursor)
            else:
                rows = self._fetch(cursor)
        except (sqlite3.Error, sqlite3.Warning) as error:  # Warning: older Pythons' 'one statement' error
            raise QueryError(_explain(str(error), self.timeout, self.plain)) from None
        except (OverflowError, MemoryError, ValueError) as error:
            raise QueryError(str(error) if self.plain else f"SQL error: {error}") from None
        finally:
            if cursor is not None:
                cursor.close()
            self.db.set_progress_handler(None, 0)
            if self.db.in_transaction:
                self.db.rollback()
        truncated = len(rows) > self.max_rows
        return QueryResult(columns, rows[: self.max_rows], truncated, time.perf_counter() - started, row_set)
