"""``AgentGym/BIRD-v0``: BIRD-style text-to-SQL, one query per episode, stepped as AgentGym's SqlGym server.

The agent sees a database and a question and answers with one SQL statement. By default the
episode reads and steps as AgentGym's SqlGym server (the ``sqlgym`` package, 0.1.2) and its client:

- SqlGym's instruction and "Ok.", then the database described in words followed by the question
  (no evidence) as the first observation;
- the SQL is the client's: the text after the last ```sql of the response, up to the next ```, stripped;
- the statement runs on a read-only connection, as SqlGym opens BIRD's files: the observation is the
  rows as Python prints them (cut at 100 characters, then "...") or the error's own text (SQLite's
  ``attempt to write a readonly database`` for a write, Python's ``You can only execute one statement
  at a time.`` for two statements); an empty statement returns ``[]``;
- every step ends the episode (an error too), with reward 1 when the rows equal the gold query's as a
  set (SqlGym's ``set(predicted) == set(gold)``, BIRD's execution accuracy; ``round_floats=True``
  compares floats to 4 decimals), 0 otherwise.

What remains ours (``docs/fidelity.md``): the statement runs under a time limit and size limits
(TEMP tables' too), ``ATTACH`` (so ``VACUUM``) and extension loading are refused, and each
foreign-key sentence of the description names the key's own columns (SqlGym names the column after
each, an upstream bug that misleads the agent).

Opt-in: ``extra_feedback=True`` (errors are marked invalid and leave the episode to the turn cap,
refusals explained in our words, an empty statement refused), ``full_primary_keys=True`` (composite
primary keys named in the description), ``detailed_instruction=True`` (our instruction, the CREATE
statements with the evidence, lenient SQL extraction, our verdict; ``extra_feedback`` on).

The real BIRD dev set can be used instead of the generated databases:

    env = gym.make("AgentGym/BIRD-v0", bird_dir="/data/bird/dev")   # dev.json + dev_databases/<db_id>/<db_id>.sqlite

Its items are then numbered 0 .. n-1, all in the "test" split.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
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


def describe_schema(db: sqlite3.Connection, db_id: str, full_primary_keys: bool = False) -> str:
    """The database in words as SqlGym gives it (its ``serialize_schema_natural_language`` layout, lower-cased
    names): tables, each table's columns and primary key, then the foreign keys. SqlGym reads BIRD's
    ``tables.json``; here the names come from the database itself.

    As SqlGym reads BIRD's ``tables.json`` (a composite key is a nested list there, which its
    ``column_id in primary_keys`` never matches), a table with a composite primary key names none,
    `` is the primary key.`` as for a table without one; ``full_primary_keys=True`` names its columns.
    Each foreign-key sentence names the key's own columns; SqlGym names the column after each (it
    looks them up in a list that skips ``*``): kept, see ``docs/fidelity.md``."""
    tables = [r[0] for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    parts = [f"{db_id} contains tables such as {', '.join(t.lower() for t in tables)}."]
    keys = []
    for table in tables:
        quoted = '"' + table.replace('"', '""') + '"'
        columns = db.execute(f"PRAGMA table_info({quoted})").fetchall()  # (cid, name, type, notnull, default, pk)
        parts.append(f"Table {table.lower()} has columns such as {', '.join(c[1].lower() for c in columns)}.")
        primary = [c[1].lower() for c in sorted(columns, key=lambda c: c[5]) if c[5]]
        if len(primary) > 1 and not full_primary_keys:
            primary = []
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


#: The shared in-memory copies behind ``read_only_copy``: each connection keeps its copy alive.
_SHARED_COPIES: dict[str, sqlite3.Connection] = {}
_SHARED_LOCK = threading.Lock()


def read_only_copy(db_id: str) -> tuple[sqlite3.Connection, bool]:
    """A new connection to generated database ``db_id`` opened read-only, as SqlGym opens BIRD's files
    (``mode=ro``), so SQLite itself refuses writes, in its own words: one in-memory copy per process
    (SQLite's ``memdb`` VFS), shared read-only by every env. Returns the connection and whether it is
    read-only; an SQLite without ``memdb`` (before 3.36) gives a private clone instead (``False``: it
    needs ``ReadOnlySQL``'s full guard, whose refusals are in our words)."""
    uri = f"file:/agentgym-bird-{db_id}?vfs=memdb"
    try:
        with _SHARED_LOCK:
            if db_id not in _SHARED_COPIES:
                keeper = sqlite3.connect(uri, uri=True, check_same_thread=False)
                bird_data.database(db_id).backup(keeper)
                _SHARED_COPIES[db_id] = keeper
        return sqlite3.connect(uri + "&mode=ro", uri=True, check_same_thread=False), True
    except sqlite3.Error:
        return clone(bird_data.database(db_id)), False


class BirdEnv(TextEnv):
    """Text-to-SQL: one SELECT per episode, graded by execution result against the gold query.

    Actions:
        One SQL statement, run read-only: the last ``sql`` code block of the response (from its opening
        fence up to the next fence; the whole response when it has none).

    Rewards:
        1 when the statement's rows equal the gold query's as a set (``round_floats=True``: floats to 4
        decimals), 0 otherwise; the first statement ends the episode (with ``extra_feedback=True`` one
        that fails leaves it to the turn cap).
    """

    family = "tools"
    acknowledgement = "Ok."  # SqlGym's conversations in AgentGym answer the instruction with this
    #: SqlGym ends the episode on any statement (an error too): the conformance check of bad actions
    #: (which must leave the episode playable) runs with the option under which they do not.
    bad_action_check_kwargs = {"extra_feedback": True}

    def __init__(
        self,
        task_id: str,
        render_mode: str | None = None,
        bird_dir: str | None = None,
        sql_timeout: float = 3.0,
        detailed_instruction: bool = False,
        round_floats: bool = False,
        extra_feedback: bool | None = None,
        full_primary_keys: bool = False,
    ):
        """By default every step is SqlGym's (see the module's docstring).

        ``detailed_instruction=True``: our instruction, the schema as CREATE statements with BIRD's
        evidence, lenient SQL extraction and our verdict, instead of SqlGym's (and ``extra_feedback``
        on unless given). ``extra_feedback=True``: an SQL error does not end the episode (it is marked
        invalid; the turn cap decides, so pass ``max_episode_steps`` for retries), a refused write or a
        second statement is explained in our words ("Only SELECT queries are allowed ...", "Give
        exactly one SQL statement per action."), and an empty statement is refused instead of run.
        ``full_primary_keys=True``: the description names every column of a composite primary key
        (SqlGym, reading BIRD's ``tables.json``, names none). Results compare as SqlGym compares them,
        ``set(predicted) == set(gold)``; ``round_floats=True`` rounds floats to 4 decimals on both
        sides first (so ``0.1 + 0.2`` equals ``0.3``)."""
        super().__init__(task_id, render_mode=render_mode)
        self.detailed_instruction = detailed_instruction
        self.extra_feedback = bool(detailed_instruction if extra_feedback is None else extra_feedback)
        self.full_primary_keys = bool(full_primary_keys)
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
        """This env's guarded connection to ``db_id``: the real file read-only, or for a generated database
        a read-only copy (by default, as SqlGym opens BIRD's files) or a private clone (``extra_feedback``)."""
        if db_id not in self._runners:
            plain = not self.extra_feedback  # SQLite's own answers on a read-only connection
            if self.examples is not None:
                path = next(e.db_path for e in self.examples if e.db_id == db_id)
                db = open_read_only(path)
            elif plain:
                db, plain = read_only_copy(db_id)  # a clone where SQLite has no memdb: our guard's refusals
            else:
                db = clone(bird_data.database(db_id))
            self._runners[db_id] = ReadOnlySQL(db, timeout=self.sql_timeout, plain=plain)
        return self._runners[db_id]

    def _fresh_connection(self, db_id: str) -> None:
        """SqlGym connects anew at every reset: TEMP tables and settings of an earlier episode are gone."""
        old = self._runners.pop(db_id, None)
        if old is not None:
            old.close()

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        if not self.extra_feedback and self.current is not None:
            self._fresh_connection(self.current.db_id)
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
                    self._descriptions[db_id] = describe_schema(db, db_id, self.full_primary_keys)
                finally:
                    db.close()
            else:
                self._descriptions[db_id] = describe_schema(bird_data.database(db_id), db_id, self.full_primary_keys)
        return self._descriptions[db_id]

    def action_response(self, action: str) -> str:
        """The query in a ```sql block (AgentGym's SqlGym client reads only that), unless it has a fence already."""
        return action if "```" in action else f"```sql\n{action.strip()}\n```"

    def _parse(self, response: str) -> ParsedAction:
        if self.detailed_instruction:
            return parse_sql_response(response)
        if self.extra_feedback:
            return ParsedAction(sqlgym_action(clean_text(response)))
        return ParsedAction(sqlgym_action(response))  # the client's split, on the response as it came

    def _act(self, action: str) -> Outcome:
        assert self.current is not None, "call reset() first"
        try:
            result = self.runner(self.current.db_id).run(action, distinct=True)
        except QueryError as error:
            if not self.extra_feedback:  # SqlGym: the error's text, reward 0, the episode over
                return Outcome(str(error).removeprefix("SQL error: "), done=True, valid=False)
            if not self.detailed_instruction:
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
