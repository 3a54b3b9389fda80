"""The checks a drawn question must pass before it becomes an item: a gold result that is short, not
empty, not NULL, not zero, and not a tie for a "which ... most" question."""

from __future__ import annotations

import sqlite3

from agentgym_envs.tools.bird_data.common import Question

#: The most rows a gold result may have (a longer list is no question to answer by hand).
MAX_ROWS = 30


def is_ambiguous(db: sqlite3.Connection, sql: str) -> bool:
    """A 'top-1' gold query is ambiguous when the runner-up ties with the winner."""
    if "LIMIT 1" not in sql or "ORDER BY" not in sql:
        return False
    head, order = sql.rsplit("ORDER BY", 1)
    key = order.replace("LIMIT 1", "").replace(" DESC", "").replace(" ASC", "").strip()
    values = db.execute(f"SELECT {key} AS k {head[head.index(' FROM '):]} ORDER BY k DESC LIMIT 2").fetchall()
    return len(values) == 2 and values[0][0] == values[1][0]


def is_usable(db: sqlite3.Connection, item: Question) -> bool:
    """Whether ``item``'s gold result is one a question can fairly ask for."""
    rows = db.execute(item.sql).fetchall()
    if not rows or len(rows) > MAX_ROWS or any(v is None for row in rows for v in row) or rows == [(0,)]:
        return False
    return not is_ambiguous(db, item.sql)
