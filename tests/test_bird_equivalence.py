"""BIRD's default episode against a plain reference of AgentGym's SqlGym server, step by step.

``Reference`` below is AgentGym's SqlGym client (``agentenv/envs/sqlgym.py``), its server
(``agentenv-sqlgym``: ``environment.py``) and the ``sqlgym`` 0.1.2 package it runs (``SqlGymEnv``,
``BirdDataset``), re-written as read, with no code shared with ``agentgym_envs/tools/bird.py``:

- reset connects anew to the database file opened read-only (``file:...?mode=ro``) and answers the
  database in words (``serialize_schema_natural_language`` over BIRD's ``tables.json``), an empty
  line and the question;
- the client sends what follows the last ```sql of the response, up to the next ```, stripped;
- the server executes it with ``cursor.execute`` and ``fetchall()``; any exception is the
  observation as ``str(e)``, reward 0; otherwise reward 1 when ``set(rows) == set(gold rows)``, the
  gold query run on the same connection; the observation is ``str(rows)`` cut at 100 characters
  plus "..."; every step is terminal (SqlGym's single mode).

The databases are the generated ones, each written to a file here; their ``tables.json`` is made
from the database as BIRD's is laid out (``[-1, "*"]`` first, a composite primary key as a nested
list, foreign keys as column-index pairs). Our env runs beside it on the same items over the
oracle's, seeded random and invalid responses. Observation, reward and done are compared at every
step; the first observations differ only in each foreign-key sentence (SqlGym's lookup names the
column after the key's own, a documented upstream bug: ``docs/fidelity.md``), counted apart.
(The reference was checked once against ``sqlgym`` 0.1.2 itself, from PyPI, on BIRD-layout files of
these databases, ``dev.json`` and ``dev_tables.json`` included: all 580 steps and first observations equal.)
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs
from agentgym_envs.tools import bird_data
from agentgym_envs.tools.tasks import ENVS

ENV_ID = "AgentGym/BIRD-v0"

#: Responses an agent gets wrong: SQL errors, writes, two statements, empty SQL, plain text, odd fences.
INVALID = [
    "Thought: I am not sure.\n\nAction: ```sql\nSELEC * FROM x\n```",
    "Action: ```sql\nSELECT * FROM no_such_table\n```",
    "Action: ```sql\nSELECT no_such_column FROM {table}\n```",
    "Action: ```sql\nDROP TABLE {table}\n```",
    "Action: ```sql\nDELETE FROM {table}\n```",
    "Action: ```sql\nUPDATE {table} SET rowid = rowid\n```",
    "Action: ```sql\nCREATE TABLE t (a)\n```",
    "Action: ```sql\nSELECT 1; SELECT 2\n```",
    "Action: ```sql\nSELECT COUNT(*) FROM {table}; DROP TABLE {table}\n```",
    "Action: ```sql\n\n```",
    "Action: ```sql\n-- nothing to run\n```",
    "I think the answer is 42.",
    "Thought: count them.\n\nAction: SELECT COUNT(*) FROM {table}",
    "Action: ```\nSELECT COUNT(*) FROM {table}\n```",
    "Action: ```sql\nSELECT COUNT(*) FROM {table}",
    "Action: ```sql\nSELECT COUNT(*) FROM {table};\n```",
    "Action: ```sqlite\nSELECT COUNT(*) FROM {table}\n```",
    "Action: ```sql\nＳＥＬＥＣＴ 1\n```",
    "Action: ```sql\nSELECT 1\x00\n```",
    "Action: ```sql\nSELECT * FROM {table} WHERE 0\n```",
    "Action: ```sql\nBEGIN\n```",
    "Action: ```sql\nCREATE TEMP TABLE t (a)\n```",
    "Action: ```sql\nPRAGMA table_info({table})\n```",
    "```sql\nSELECT 1\n``` and then ```sql\nSELECT 2\n```",
]


def tables_json(db: sqlite3.Connection, db_id: str) -> dict:
    """The database as BIRD's ``dev_tables.json`` lays it out."""
    tables = [r[0] for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    columns = [[-1, "*"]]
    primary_keys: list = []
    for number, table in enumerate(tables):
        info = db.execute(f'PRAGMA table_info("{table}")').fetchall()
        first = len(columns)
        columns += [[number, c[1]] for c in info]
        key = [first + c[0] for c in sorted(info, key=lambda c: c[5]) if c[5]]
        if key:
            primary_keys.append(key[0] if len(key) == 1 else key)
    index = {(tables[t], name): i for i, (t, name) in enumerate(columns) if t >= 0}
    foreign_keys = []
    for table in tables:
        for fk in db.execute(f'PRAGMA foreign_key_list("{table}")').fetchall():
            foreign_keys.append([index[(table, fk[3])], index[(fk[2], fk[4])]])
    return {"db_id": db_id, "table_names": tables, "column_names": columns, "primary_keys": primary_keys,
            "foreign_keys": foreign_keys}


def describe(schema: dict, corrected: bool = False) -> str:
    """SqlGym's ``serialize_schema_natural_language`` as read; ``corrected`` names each key's own columns."""
    names, columns = schema["table_names"], schema["column_names"]
    sentences = [f"{schema['db_id']} contains tables such as {', '.join(t.lower() for t in names)}."]
    lowered_tables, lowered_columns = [], []  # SqlGym fills the second once per table, skipping "*"
    for number, table in enumerate(names):
        lowered_tables.append(table.lower())
        own, key = [], []
        for column_id, (owner, column) in enumerate(columns):
            if column_id == 0:
                continue
            lowered_columns.append(column.lower())
            if owner == number:
                own.append(column.lower())
                if column_id in schema["primary_keys"]:  # never true for a composite key's nested list
                    key.append(column.lower())
        sentences.append(f"Table {table.lower()} has columns such as {', '.join(own)}.")
        sentences.append(f"{', '.join(key)} is the primary key.")
    for x, y in schema["foreign_keys"]:
        if corrected:
            x_column, y_column = columns[x][1].lower(), columns[y][1].lower()
        else:
            x_column, y_column = lowered_columns[x], lowered_columns[y]
        sentences.append(f"The {x_column} of {lowered_tables[columns[x][0]]} is the foreign key of {y_column} of "
                         f"{lowered_tables[columns[y][0]]}.")
    return " ".join(sentences)


class Reference:
    """AgentGym's SqlGym client and server over one item, as their code reads."""

    def __init__(self, path: Path, schema: dict, question: str, gold_sql: str):
        self.path, self.schema, self.question, self.gold_sql = path, schema, question, gold_sql

    def reset(self, corrected: bool = False) -> str:
        self.conn = sqlite3.connect(f"file:{self.path.as_posix()}?mode=ro", uri=True)
        return f"{describe(self.schema, corrected)}\n\n{self.question}"

    def step(self, response: str) -> tuple[str, float, bool]:
        sql = response.split("```sql")[-1].split("```")[0].strip()
        cursor = self.conn.cursor()
        try:
            cursor.execute(sql)
            result = cursor.fetchall()
        except Exception as error:  # SqlGym catches everything
            result = error
        if isinstance(result, Exception):
            reward = 0.0
        else:
            gold_cursor = self.conn.cursor()
            try:
                gold_cursor.execute(self.gold_sql)
                gold = gold_cursor.fetchall()
            except Exception as error:
                gold = str(error)
            reward = 1.0 if set(result) == set(gold) else 0.0
        text = str(result)
        if len(text) > 100:
            text = text[:100] + "..."
        return text, reward, True

    def close(self) -> None:
        self.conn.close()


@pytest.fixture(scope="module")
def database_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    folder = tmp_path_factory.mktemp("bird_files")
    files = {}
    for db_id in bird_data.DB_IDS:
        path = folder / f"{db_id}.sqlite"
        target = sqlite3.connect(path)
        bird_data.database(db_id).backup(target)
        target.close()
        files[db_id] = (path, tables_json(bird_data.database(db_id), db_id))
    return files


def _responses(env: gym.Env, kind: str, rng: np.random.Generator, table: str) -> list[str]:
    if kind == "oracle":
        return [env.oracle_action()]
    if kind == "random":
        return [env.random_action(rng) for _ in range(4)]
    return [response.replace("{table}", table) for response in INVALID]


def _compare(database_files: dict, kind: str, seed: int = 0) -> tuple[int, int, int, int, list]:
    """(equal steps, steps, equal first observations, first observations differing only in the
    foreign-key sentences, first differences) over the test items."""
    env = gym.make(ENV_ID).unwrapped  # SqlGym's server has no turn cap: every step is terminal
    offset = ENVS["BIRD"][0]
    rng = np.random.default_rng(seed)
    equal = steps = openings_equal = openings_fk = 0
    differences: list = []
    for item in agentgym_envs.get_task(ENV_ID).split("test"):
        found = bird_data.question(item - offset)
        path, schema = database_files[found.db_id]
        reference = Reference(path, schema, found.question, found.sql)
        env.reset(options={"item_id": item})
        table = schema["table_names"][int(rng.integers(len(schema["table_names"])))]
        for response in _responses(env, kind, rng, table):
            observation, _ = env.reset(options={"item_id": item})
            expected_opening = reference.reset()
            if observation == expected_opening:
                openings_equal += 1
            elif observation == reference.reset(corrected=True):  # the documented FK sentences alone
                openings_fk += 1
            elif len(differences) < 3:
                differences.append((item, "opening", observation[:300], expected_opening[:300]))
            ours = env.step(response)
            expected = reference.step(response)
            steps += 1
            if (ours[0], ours[1], ours[2]) == expected:
                equal += 1
            elif len(differences) < 3:
                differences.append((item, response[-60:], ours[:3], expected))
            reference.close()
    env.close()
    return equal, steps, openings_equal, openings_fk, differences


@pytest.mark.parametrize("kind", ["oracle", "random", "invalid"])
def test_default_bird_steps_as_agentgyms_sqlgym_server(database_files: dict, kind: str) -> None:
    """At least 99.5% of steps equal (observation, reward, done); every first observation equal but for the
    documented foreign-key sentences."""
    equal, steps, openings_equal, openings_fk, differences = _compare(database_files, kind)
    print(f"bird {kind}: {equal}/{steps} steps equal; first observations: {openings_equal} equal, "
          f"{openings_fk} differ in the foreign-key sentences only (documented)")
    assert steps >= 20 and equal / steps >= 0.995, (equal, steps, differences)
    assert openings_equal + openings_fk == steps, differences


def test_the_foreign_key_sentences_are_the_one_difference_in_the_description(database_files: dict) -> None:
    """docs/fidelity.md's example: SqlGym names the column after each of the key's two (``grade`` for
    ``section_id``, ``course_id`` for sections' ``section_id``); ours names the key's own. Everything else
    in the description is SqlGym's."""
    schema = database_files["university"][1]
    upstream, corrected = describe(schema), describe(schema, corrected=True)
    assert "The section_id of enrollments is the foreign key of section_id of sections." in corrected
    assert "The grade of enrollments is the foreign key of course_id of sections." in upstream
    assert "The section_id of enrollments is the foreign key of name of students." in upstream
    env = gym.make(ENV_ID, full_primary_keys=False)
    observation, _ = env.reset(options={"split": "test", "index": 1})
    assert observation.split("\n\n")[0] == corrected
    env.close()


#: Where our default still differs on purpose (docs/fidelity.md): our sandbox refuses ATTACH, and so VACUUM
#: (SqlGym's ``VACUUM INTO 'file'`` writes a file), and caps TEMP tables. (ours, SqlGym's) observations.
DOCUMENTED_ACTIONS = {
    "ATTACH ':memory:' AS other": ("not authorized", "[]"),
    "VACUUM": ("authorization denied", "attempt to write a readonly database"),
    "CREATE TEMP TABLE t AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 10000) "
    "SELECT zeroblob(9999) FROM n": ("database or disk is full", "[]"),
}


def test_documented_sandbox_differences(database_files: dict) -> None:
    found = bird_data.question(1)
    reference = Reference(*database_files[found.db_id], found.question, found.sql)
    env = gym.make(ENV_ID).unwrapped
    for sql, (ours, upstream) in DOCUMENTED_ACTIONS.items():
        response = f"Action: ```sql\n{sql}\n```"
        env.reset(options={"item_id": ENVS["BIRD"][0] + 1})
        reference.reset()
        assert env.step(response)[:3] == (ours, 0.0, True)
        assert reference.step(response) == (upstream, 0.0, True)
        reference.close()
    env.close()
