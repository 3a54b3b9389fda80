"""``AgentGym/BIRD-v0``: BIRD-style text-to-SQL, one read-only query per episode.

The agent sees a database schema, a question and BIRD's "evidence" hint, and answers with one
SQL statement. The statement runs read-only under a time limit (``ReadOnlySQL``); the episode
ends with reward 1 when its result equals the gold query's result as a set of rows (SqlGym's
``set(predicted) == set(gold)``, BIRD's execution accuracy; ``round_floats=True`` compares floats
to 4 decimals), 0 otherwise. A statement that cannot run
(syntax error, a write, more than one statement, the time limit) returns SQLite's error text,
is marked invalid and leaves the database unchanged; the turn cap of 1 makes the episode a
single attempt under ``gym.make`` (pass ``max_episode_steps`` to allow retries).

The real BIRD dev set can be used instead of the generated databases:

    env = gym.make("AgentGym/BIRD-v0", bird_dir="/data/bird/dev")   # dev.json + dev_databases/<db_id>/<db_id>.sqlite

Its items are then numbered 0 .. n-1, all in the "test" split.

By default the episode reads as AgentGym's SqlGym server (the ``sqlgym`` package) writes it:
SqlGym's instruction and "Ok.", the database described in words followed by the question (no
evidence) as the first observation, the SQL taken from the response as AgentGym's client takes it
(the last ```sql block), and the result as Python prints the rows (cut at 100 characters) or
SQLite's error. A result ends the episode; an error is marked invalid and, as SqlGym's single
attempt, ends it only through the turn cap of 1 (truncated, where SqlGym terminates). ``detailed_instruction=True``
gives our
instruction, the CREATE statements with the evidence, and our verdict.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from agentgym_envs.core import Outcome, ParsedAction, Start, TextEnv, clean_text
from agentgym_envs.core.parsers import find_action_line
from agentgym_envs.tools import bird_data
from agentgym_envs.tools.dbutil import QueryError, ReadOnlySQL, clone
from agentgym_envs.tools.tasks import ENVS, ITEMS_PER_ENV

#: SqlGym's instruction in AgentGym (``agentenv/envs/sqlgym.py``), answered with "Ok.".
SQLGYM_INSTRUCTION = (
    "Given you a description of a SQlite database system, I will ask you a question, then you should help me operate "
    "the SQLite database with SQL to answer the question.\n"
    "\n"
    "You have to explain the problem and your solution to me and write down your thoughts.\n"
    "After thinking and explaining thoroughly, you should give a SQL statement to solve the question.\n"
    "\n"
    "your response should be like this:\n"
    "Thought: Your thought here.\n"
    "\n"
    "Action: ```sql\n"
    "SELECT * FROM table WHERE condition;\n"
    "```\n"
    "\n"
    "You MUST put SQL in markdown format without any other comments. Your SQL should be in one line. Every time you "
    "can only execute one SQL statement."
)

#: Our instruction (``detailed_instruction=True``).
INSTRUCTION = """You are a database expert. Each episode gives you the schema of a SQLite database, a question about \
its data and some evidence (external knowledge that explains how the question maps to the columns). Answer with ONE \
SQLite SELECT statement whose result answers the question.

Rules:
- Return exactly the columns the question asks for, nothing more (for a name, select only the name; for "first and \
last names", select both columns).
- The database is read-only: only SELECT (and WITH ... SELECT) statements run. A query that fails or runs longer than \
the time limit returns the error message.
- The answer is graded by comparing your query's result rows with the correct query's result rows (order of rows does \
not matter).

Answer in this format:
Thought: <your reasoning about the tables, joins and filters>

Action:
```sql
SELECT ...
```"""

_FENCE = re.compile(r"```(?:sql|sqlite)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_SQL_START = re.compile(r"^\s*(select|with)\b", re.IGNORECASE)
SQL_HINT = "Answer with one SQL query:\nThought: <your reasoning>\n\nAction:\n```sql\nSELECT ...\n```"


def parse_sql_response(response: str) -> ParsedAction:
    """The SQL after ``Action:`` (fenced or not, may span lines), a ```sql block, or a bare SELECT."""
    text = clean_text(response).strip()
    found = find_action_line(text, "give exactly one SQL query.", SQL_HINT)
    if isinstance(found, ParsedAction):
        return found
    if found.index is not None:
        body = found.body
    else:
        fenced = _FENCE.search(text)
        if fenced:
            body = fenced.group(1)
        elif _SQL_START.match(text) or (len(found.lines) == 1 and not text.lower().startswith("thought")):
            body = text
        else:
            return ParsedAction(None, "No 'Action:' line or ```sql block found in your response. " + SQL_HINT)
    fenced = _FENCE.search(body)
    sql = (fenced.group(1) if fenced else body.replace("```", "")).strip()
    if not sql:
        return ParsedAction(None, "The query is empty. " + SQL_HINT)
    return ParsedAction(sql)


def sqlgym_action(response: str) -> str:
    """The SQL AgentGym's SqlGym client sends: after the last ```sql, up to the next ```, stripped."""
    return response.split("```sql")[-1].split("```")[0].strip()


def describe_schema(db: sqlite3.Connection, db_id: str) -> str:
    """The database in words as SqlGym gives it (its ``serialize_schema_natural_language`` layout, lower-cased
    names): tables, each table's columns and primary key, then the foreign keys. SqlGym reads BIRD's
    ``tables.json``; here the names come from the database itself."""
    tables = [r[0] for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    parts = [f"{db_id} contains tables such as {', '.join(t.lower() for t in tables)}."]
    keys = []
    for table in tables:
        quoted = '"' + table.replace('"', '""') + '"'
        columns = db.execute(f"PRAGMA table_info({quoted})").fetchall()  # (cid, name, type, notnull, default, pk)
        parts.append(f"Table {table.lower()} has columns such as {', '.join(c[1].lower() for c in columns)}.")
        primary = [c[1].lower() for c in sorted(columns, key=lambda c: c[5]) if c[5]]
        parts.append(f"{', '.join(primary)} is the primary key.")
        for fk in db.execute(f"PRAGMA foreign_key_list({quoted})").fetchall():  # (id, seq, table, from, to, ...)
            target = fk[4]
            if target is None:  # REFERENCES t without a column: t's primary key
                target = next((c[1] for c in db.execute(f"PRAGMA table_info(\"{fk[2]}\")") if c[5]), "")
            keys.append(f"The {fk[3].lower()} of {table.lower()} is the foreign key of {target.lower()} of "
                        f"{fk[2].lower()}.")
    return " ".join(parts + keys)


def sqlgym_result(rows: list[tuple[Any, ...]]) -> str:
    """SqlGym's observation of a result: the rows as Python prints them, cut at 100 characters."""
    text = str(rows)
    return text[:100] + "..." if len(text) > 100 else text


def normalize_rows(rows: Iterable[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    """Rows as a set, floats rounded to 4 decimals (``round_floats=True``)."""
    return {tuple(round(v, 4) if isinstance(v, float) else v for v in row) for row in rows}


def results_match(
    predicted: Iterable[tuple[Any, ...]] | None, gold: Iterable[tuple[Any, ...]], round_floats: bool = False
) -> bool:
    """SqlGym's grade, ``set(predicted) == set(gold)``; ``round_floats=True`` rounds floats to 4
    decimals on both sides first. ``predicted`` is ``None`` for a result with more distinct rows than
    the guard reads (``ReadOnlySQL.max_rows``), which fails."""
    if predicted is None:
        return False
    if round_floats:
        return normalize_rows(predicted) == normalize_rows(gold)
    return set(predicted) == set(gold)


def format_result(columns: list[str], rows: list[tuple[Any, ...]], limit: int = 10) -> str:
    """A query's result as the agent reads it: the column names, then one ``|``-separated line per row.

    Args:
        columns: the column names.
        rows: the result rows (None shown as NULL).
        limit: how many rows to show; the rest are counted, not shown.

    Returns:
        The text.
    """
    head = " | ".join(columns)
    body = "\n".join(" | ".join("NULL" if v is None else str(v) for v in row) for row in rows[:limit])
    more = f"\n... ({len(rows) - limit} more rows)" if len(rows) > limit else ""
    return f"{head}\n{body}{more}" if rows else f"{head}\n(no rows)"


# ---- the real BIRD dev set ---------------------------------------------------------------------


@dataclass(frozen=True)
class BirdExample:
    """One BIRD item: question, evidence, gold SQL and the path of its SQLite file."""

    question_id: int
    db_id: str
    question: str
    evidence: str
    sql: str
    difficulty: str
    db_path: Path


def load_bird(path: str | Path, questions: str = "dev.json", databases: str = "dev_databases") -> list[BirdExample]:
    """Read a local BIRD split: ``<path>/dev.json`` and ``<path>/dev_databases/<db_id>/<db_id>.sqlite``.

    BIRD's files come from https://bird-bench.github.io (dev.zip); nothing is downloaded here.
    Raises ``FileNotFoundError`` naming what is missing.
    """
    root = Path(path).expanduser()
    question_file = root / questions
    if not question_file.is_file():
        raise FileNotFoundError(f"BIRD questions not found: {question_file} (expected BIRD's {questions} in {root})")
    entries = json.loads(question_file.read_text(encoding="utf-8"))
    examples = []
    for index, entry in enumerate(entries):
        db_path = root / databases / entry["db_id"] / f"{entry['db_id']}.sqlite"
        if not db_path.is_file():
            raise FileNotFoundError(f"BIRD database not found: {db_path}")
        examples.append(
            BirdExample(
                int(entry.get("question_id", index)),
                entry["db_id"],
                entry["question"],
                entry.get("evidence", ""),
                entry.get("SQL") or entry["sql"],
                entry.get("difficulty", ""),
                db_path,
            )
        )
    return examples


def open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to a real BIRD database file (SQLite's ``mode=ro``), usable from any thread."""
    return sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, check_same_thread=False)


# ---- the env -----------------------------------------------------------------------------------


@dataclass
class _Item:
    db_id: str
    question: str
    evidence: str
    sql: str
    template: str


@lru_cache(maxsize=256)
def _generated_item(local: int) -> tuple[_Item, frozenset[tuple[Any, ...]]]:
    """A generated item and its gold result (gold queries run once per process)."""
    found = bird_data.question(local)
    rows = bird_data.database(found.db_id).execute(found.sql).fetchall()
    return _Item(found.db_id, found.question, found.evidence, found.sql, found.template), frozenset(rows)


@lru_cache(maxsize=None)
def _schema(db_id: str) -> str:
    return bird_data.schema_text(bird_data.database(db_id))


class BirdEnv(TextEnv):
    """Text-to-SQL: one SELECT per episode, graded by execution result against the gold query.

    Actions:
        One read-only SQL statement: the last ``sql`` code block of the response (a bare statement too).

    Rewards:
        1 when the statement's rows equal the gold query's as a set (``round_floats=True``: floats to 4
        decimals), and the episode ends; 0 otherwise.
    """

    family = "tools"
    acknowledgement = "Ok."  # SqlGym's conversations in AgentGym answer the instruction with this

    def __init__(
        self,
        task_id: str,
        render_mode: str | None = None,
        bird_dir: str | None = None,
        sql_timeout: float = 3.0,
        detailed_instruction: bool = False,
        round_floats: bool = False,
    ):
        """``detailed_instruction=True``: our instruction, the schema as CREATE statements with BIRD's
        evidence, lenient SQL extraction and our verdict, instead of SqlGym's. Results compare as
        SqlGym compares them, ``set(predicted) == set(gold)``; ``round_floats=True`` rounds floats to
        4 decimals on both sides first (so ``0.1 + 0.2`` equals ``0.3``)."""
        super().__init__(task_id, render_mode=render_mode)
        self.detailed_instruction = detailed_instruction
        self.round_floats = bool(round_floats)
        self.offset = ENVS["BIRD"][0]
        self.sql_timeout = sql_timeout
        self.examples: list[BirdExample] | None = None
        if bird_dir is not None:
            self.examples = load_bird(bird_dir)
            self._splits = {"train": [], "test": list(range(len(self.examples)))}
            self._split_of = {i: "test" for i in self._splits["test"]}
            self._subtask_of = {i: "BIRD" for i in self._splits["test"]}
            self.default_split = "test"
        self._runners: dict[str, ReadOnlySQL] = {}
        self._descriptions: dict[str, str] = {}
        self.current: _Item | None = None
        self._gold: frozenset[tuple[Any, ...]] = frozenset()

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` is an item here: an index of the given BIRD examples, else of our generated block."""
        if self.examples is not None:
            return 0 <= item_id < len(self.examples)
        return self.offset <= item_id < self.offset + ITEMS_PER_ENV

    def runner(self, db_id: str) -> ReadOnlySQL:
        """This env's guarded connection to ``db_id`` (a private clone, or the real file read-only)."""
        if db_id not in self._runners:
            if self.examples is not None:
                path = next(e.db_path for e in self.examples if e.db_id == db_id)
                db = open_read_only(path)
            else:
                db = clone(bird_data.database(db_id))
            self._runners[db_id] = ReadOnlySQL(db, timeout=self.sql_timeout)
        return self._runners[db_id]

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        if self.examples is not None:
            example = self.examples[item_id]
            self.current = _Item(example.db_id, example.question, example.evidence, example.sql, example.difficulty)
            runner = self.runner(example.db_id)
            schema = "\n".join(
                r[0].strip() + ";"
                for r in runner.db.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL ORDER BY rowid"
                )
            )
            gold = runner.run(example.sql, distinct=True)
            self._gold = gold.row_set if gold.row_set is not None else frozenset(gold.rows)
        else:
            self.current, self._gold = _generated_item(item_id - self.offset)
            self.runner(self.current.db_id)
            schema = _schema(self.current.db_id)
        info = {"db_id": self.current.db_id, "template": self.current.template}
        if not self.detailed_instruction:
            return Start(SQLGYM_INSTRUCTION, f"{self._described(self.current.db_id)}\n\n{self.current.question}", info)
        evidence = self.current.evidence or "(none)"
        observation = (
            f"Database: {self.current.db_id}\nSchema:\n{schema}\n\nQuestion: {self.current.question}\n"
            f"Evidence: {evidence}"
        )
        return Start(INSTRUCTION, observation, info)

    def _described(self, db_id: str) -> str:
        """SqlGym's description of ``db_id``, read on an unguarded connection (the runner's guard refuses PRAGMA)."""
        if db_id not in self._descriptions:
            if self.examples is not None:
                db = open_read_only(next(e.db_path for e in self.examples if e.db_id == db_id))
                try:
                    self._descriptions[db_id] = describe_schema(db, db_id)
                finally:
                    db.close()
            else:
                self._descriptions[db_id] = describe_schema(bird_data.database(db_id), db_id)
        return self._descriptions[db_id]

    def _parse(self, response: str) -> ParsedAction:
        if self.detailed_instruction:
            return parse_sql_response(response)
        return ParsedAction(sqlgym_action(clean_text(response)))

    def _act(self, action: str) -> Outcome:
        assert self.current is not None, "call reset() first"
        try:
            result = self.runner(self.current.db_id).run(action, distinct=True)
        except QueryError as error:
            if not self.detailed_instruction:  # SqlGym's text; the turn cap of 1 still makes this the only attempt
                return Outcome(str(error).removeprefix("SQL error: "), valid=False)
            return Outcome(f"Error: {error}", valid=False)
        success = results_match(result.row_set, self._gold, self.round_floats)
        if not self.detailed_instruction:
            return Outcome(sqlgym_result(result.rows), progress=float(success), score=float(success), done=True,
                           success=success)
        verdict = "correct" if success else "not correct: it does not return the expected rows"
        text = f"Query result:\n{format_result(result.columns, result.rows)}\n\nYour query is {verdict}."
        return Outcome(text, progress=float(success), score=float(success), done=True, success=success)

    def oracle_action(self) -> str:
        """The gold SQL query in AgentGym's SqlGym answer format (a ```sql block)."""
        assert self.current is not None, "call reset() first"
        return f"Thought: The gold query answers this.\n\nAction:\n```sql\n{self.current.sql}\n```"

    def random_action(self, rng: np.random.Generator) -> str:
        """A random agent's query: the row count or the first rows of a random table of the item's database."""
        assert self.current is not None, "call reset() first"
        runner = self.runner(self.current.db_id)
        tables = [
            r[0]
            for r in runner.db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        table = tables[int(rng.integers(len(tables)))]
        query = (f"SELECT COUNT(*) FROM {table}", f"SELECT * FROM {table} LIMIT 3")[int(rng.integers(2))]
        return f"Thought: Let me look at {table}.\n\nAction:\n```sql\n{query}\n```"

    def _release(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners = {}
