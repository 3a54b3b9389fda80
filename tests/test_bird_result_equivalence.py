"""BIRD's grade against SqlGym's (``sqlgym/sqlgym.py``: ``set(predicted) == set(gold)`` over
``fetchall()``), re-implemented here, over the generated items' gold results and near misses
(reordered, duplicated, a row missing or added, floats off in the 7th or 5th decimal, ints as
floats or text, an extra column), SQL run end to end through the env, and a result of more rows
than the guard lists."""

from __future__ import annotations

import sqlite3
from functools import lru_cache

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the ids)
from agentgym_envs.tools import bird_data
from agentgym_envs.tools.bird import results_match
from agentgym_envs.tools.dbutil import ReadOnlySQL


def up_reward(predicted_rows, gold_rows) -> float:
    return 1.0 if set(predicted_rows) == set(gold_rows) else 0.0


def _shift(rows, delta):
    return [tuple(v + delta if isinstance(v, float) else v for v in row) for row in rows]


def variants(gold):
    yield gold
    yield list(reversed(gold))
    yield gold + gold
    yield gold[1:]
    yield gold + [tuple("x" if isinstance(v, str) else -1 for v in gold[0])]
    yield _shift(gold, 1e-7)
    yield _shift(gold, 1e-5)
    yield [tuple(round(v, 4) if isinstance(v, float) else v for v in row) for row in gold]
    yield [tuple(float(v) if isinstance(v, int) else v for v in row) for row in gold]
    yield [tuple(str(v) if isinstance(v, (int, float)) else v for v in row) for row in gold]
    yield [row + (1,) for row in gold]


@lru_cache(maxsize=1)
def gold_rows(n_items: int = 200) -> tuple[list, ...]:
    questions = [bird_data.question(local) for local in range(n_items)]
    return tuple(bird_data.database(q.db_id).execute(q.sql).fetchall() for q in questions)


def bird_agreement(round_floats: bool = False) -> tuple[int, int]:
    agree = total = 0
    for gold in gold_rows():
        for predicted in variants(gold):
            total += 1
            agree += results_match(predicted, gold, round_floats) == bool(up_reward(predicted, gold))
    return agree, total


def test_bird_grades_as_sqlgym() -> None:
    agree, total = bird_agreement()
    rounded, _ = bird_agreement(round_floats=True)
    print(f"bird: {agree}/{total} agree ({agree / total:.4%}); round_floats=True: {rounded / total:.4%}")
    assert agree / total >= 0.995 and rounded < agree


def test_bird_env_grades_sql_as_sqlgym() -> None:
    env = gym.make("AgentGym/BIRD-v0").unwrapped
    agree = total = 0
    for index in range(12):
        env.reset(options={"split": "test", "index": index})
        gold_sql = env.current.sql
        plain = bird_data.database(env.current.db_id)
        for sql in (gold_sql, f"SELECT * FROM ({gold_sql}) UNION ALL SELECT * FROM ({gold_sql})",
                    f"SELECT * FROM ({gold_sql}) LIMIT 1", f"SELECT *, 1 FROM ({gold_sql})"):
            env.reset(options={"split": "test", "index": index})
            _, reward, *_ = env.step(f"```sql\n{sql}\n```")
            upstream = up_reward(plain.execute(sql).fetchall(), plain.execute(gold_sql).fetchall())
            total += 1
            agree += reward == upstream
    env.close()
    assert agree == total


def test_results_over_the_listing_cap_compare_as_sets() -> None:
    """SqlGym fetches every row: 150,001 rows of two values equal a two-row gold."""
    guard = ReadOnlySQL(sqlite3.connect(":memory:"), timeout=5.0)
    big = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 150001) SELECT x % 2 FROM c"
    result = guard.run(big, distinct=True)
    assert result.truncated and len(result.rows) == 100_000 and result.row_set == {(0,), (1,)}
    assert results_match(result.row_set, [(0,), (1,)])
    many = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100001) SELECT x FROM c"
    assert guard.run(many, distinct=True).row_set is None and not results_match(None, [(1,)])
    guard.close()
