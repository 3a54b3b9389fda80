"""Generated BIRD-style databases and question templates with gold SQL.

BIRD's own databases cannot be downloaded here, so four realistic ones are generated with a
fixed seed (foreign keys, tens of thousands of rows each): a retail store, a university, a
hospital and a football league, one module each (schema and data). Each question template
(``questions.json``) picks its literal values from the data,
writes the question, the "evidence" hint (BIRD's external-knowledge field) and the gold SQL, and
is rejected when the answer would be empty or ambiguous (ties for a "which ... most" question;
see ``checks.py``).
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache
from types import ModuleType

import numpy as np

from agentgym_envs.tools.bird_data import football, hospital, retail, university
from agentgym_envs.tools.bird_data.checks import is_usable
from agentgym_envs.tools.bird_data.common import Question, q, templates

__all__ = ["DATABASES", "DB_IDS", "WORLD_SEED", "Question", "database", "q", "question", "schema_text", "templates"]

WORLD_SEED = 7_006

#: db_id -> the module that builds it and draws its questions' values (the order fixes the seeds).
DATABASES: dict[str, ModuleType] = {
    module.DB_ID: module for module in (retail, university, hospital, football)
}
DB_IDS = tuple(DATABASES)


@lru_cache(maxsize=None)
def database(db_id: str) -> sqlite3.Connection:
    """The master copy of a generated database (built once per process; envs query clones)."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript(DATABASES[db_id].SCHEMA)
    DATABASES[db_id].build(db, np.random.default_rng([WORLD_SEED, DB_IDS.index(db_id)]))
    db.commit()
    db.execute("ANALYZE")
    return db


def schema_text(db: sqlite3.Connection) -> str:
    """The CREATE statements of every table (with their comments), as the agent sees them."""
    rows = db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
    ).fetchall()
    return "\n".join(r[0].strip() + ";" for r in rows)


def question(local: int) -> Question:
    """Item ``local``: database ``local % 4``, a template of that database, literals drawn from the item's seed.

    Questions whose gold result is empty, NULL, zero, too long (over 30 rows) or a tie are redrawn
    (after 50 failed draws the next template takes over).
    """
    db_id = DB_IDS[local % len(DB_IDS)]
    candidates = templates(db_id)
    first = (local // len(DB_IDS)) % len(candidates)
    rng = np.random.default_rng([WORLD_SEED, 99, local])
    db = database(db_id)
    for attempt in range(50 * len(candidates)):
        item = candidates[(first + attempt // 50) % len(candidates)](db, rng, DATABASES[db_id])
        if is_usable(db, item):
            return item
    raise RuntimeError(f"no valid question for item {local}")
