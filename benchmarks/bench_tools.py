"""Tool-use and BIRD envs: step latency per env, oracle and random success, SQL guard overhead.

Baselines measured in the same process:

* per tool env, the full Gymnasium step (TimeLimit wrapper, ReAct parsing, JSON arguments, info)
  against the service call alone on the already-parsed call (``Service.call``);
* for BIRD, a guarded query (authorizer, progress-handler time limit, row cap) against the same
  gold query on an unguarded clone of the database; plus how long a runaway query takes to be
  interrupted with a 0.5 s limit.

    python benchmarks/bench_tools.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agentgym_envs  # noqa: E402
from agentgym_envs.agents import RandomAgent, run_episode  # noqa: E402
from agentgym_envs.tools import bird_data  # noqa: E402
from agentgym_envs.tools.dbutil import ReadOnlySQL, clone  # noqa: E402
from agentgym_envs.tools.tasks import ENVS  # noqa: E402
from agentgym_envs.tools.toolkit import parse_call  # noqa: E402
from common import stats_ms, write_result  # noqa: E402

TOOL_ENVS = [name for name in ENVS if name != "BIRD"]


def measure_tool_env(name: str, train_items: int) -> dict:
    env_id = f"AgentGym/{name}-v0"
    spec = agentgym_envs.get_task(env_id)
    env = gym.make(env_id)
    base = env.unwrapped
    started = time.perf_counter()
    env.reset(options={"item_id": spec.split("test")[0]})
    cold_reset = time.perf_counter() - started
    resets, steps, engine = [], [], []
    items = spec.split("test") + spec.split("train")[:train_items]
    successes = {"test": [], "train": []}
    for item in tqdm(items, desc=name, leave=False):
        started = time.perf_counter()
        env.reset(options={"item_id": item})
        resets.append(time.perf_counter() - started)
        success = False
        while True:
            action = base.oracle_action()
            call = parse_call(base._parse(action).action)
            if call.tool != "finish":  # the service alone, on a scratch call that changes nothing for reads
                if call.tool not in base.service.WRITE_TOOLS:
                    started = time.perf_counter()
                    base.service.call(call)
                    engine.append(time.perf_counter() - started)
            started = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            steps.append(time.perf_counter() - started)
            if terminated or truncated:
                success = bool(info["success"])
                break
        successes["test" if item in spec.split("test") else "train"].append(success)
    random_agent = RandomAgent(seed=0)
    random_success = [run_episode(env, random_agent, int(i)).success for i in spec.split("test")]
    env.close()
    step_stats, engine_stats = stats_ms(steps), stats_ms(engine)
    return {
        "first_reset_ms": round(cold_reset * 1000, 1),
        "reset": stats_ms(resets),
        "step": step_stats,
        "service_call": engine_stats,
        "step_over_service_ratio": round(step_stats["median_ms"] / max(engine_stats["median_ms"], 1e-6), 2),
        "oracle_success_test": float(np.mean(successes["test"])),
        "oracle_success_train": float(np.mean(successes["train"])) if successes["train"] else None,
        "random_success_test": float(np.mean(random_success)),
    }


def measure_bird(train_items: int) -> dict:
    env_id = "AgentGym/BIRD-v0"
    spec = agentgym_envs.get_task(env_id)
    started = time.perf_counter()
    for db_id in bird_data.DB_IDS:
        bird_data.database(db_id)
    build = time.perf_counter() - started
    sizes = {
        db_id: {
            t: bird_data.database(db_id).execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for (t,) in bird_data.database(db_id).execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        for db_id in bird_data.DB_IDS
    }
    env = gym.make(env_id)
    base = env.unwrapped
    raw = {db_id: clone(bird_data.database(db_id)) for db_id in bird_data.DB_IDS}
    resets, steps, guarded, unguarded = [], [], [], []
    successes = {"test": [], "train": []}
    items = spec.split("test") + spec.split("train")[:train_items]
    for item in tqdm(items, desc="BIRD", leave=False):
        started = time.perf_counter()
        env.reset(options={"item_id": item})
        resets.append(time.perf_counter() - started)
        sql = base.current.sql
        runner = base.runner(base.current.db_id)
        started = time.perf_counter()
        runner.run(sql)
        guarded.append(time.perf_counter() - started)
        started = time.perf_counter()
        raw[base.current.db_id].execute(sql).fetchall()
        unguarded.append(time.perf_counter() - started)
        started = time.perf_counter()
        _, _, _, _, info = env.step(base.oracle_action())
        steps.append(time.perf_counter() - started)
        successes["test" if item in spec.split("test") else "train"].append(bool(info["success"]))
    random_agent = RandomAgent(seed=0)
    random_success = [run_episode(env, random_agent, int(i)).success for i in spec.split("test")]
    env.close()
    for db in raw.values():
        db.close()
    runaway = ReadOnlySQL(clone(bird_data.database("retail_store")), timeout=0.5)
    interrupts = []
    for _ in range(3):
        started = time.perf_counter()
        try:
            runaway.run("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c")
        except Exception:  # QueryError: interrupted, as intended
            pass
        interrupts.append(time.perf_counter() - started)
    runaway.db.close()
    step_stats, guarded_stats, raw_stats = stats_ms(steps), stats_ms(guarded), stats_ms(unguarded)
    return {
        "database_build_s": round(build, 2),
        "database_rows": sizes,
        "reset": stats_ms(resets),
        "step": step_stats,
        "guarded_query": guarded_stats,
        "unguarded_query": raw_stats,
        "guard_over_raw_ratio": round(guarded_stats["median_ms"] / max(raw_stats["median_ms"], 1e-6), 2),
        "step_over_raw_query_ratio": round(step_stats["median_ms"] / max(raw_stats["median_ms"], 1e-6), 2),
        "runaway_query_interrupted_after_0_5s_limit": stats_ms(interrupts),
        "oracle_success_test": float(np.mean(successes["test"])),
        "oracle_success_train": float(np.mean(successes["train"])) if successes["train"] else None,
        "random_success_test": float(np.mean(random_success)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="test items only (no train items)")
    args = parser.parse_args()
    train_items = 0 if args.quick else 400
    results = {}
    for name in tqdm(TOOL_ENVS, desc="envs"):
        results[f"AgentGym/{name}-v0"] = measure_tool_env(name, train_items)
    results["AgentGym/BIRD-v0"] = measure_bird(train_items)
    for env_id, r in results.items():
        print(
            f"{env_id:24s} reset {r['reset']['median_ms']:7.2f} ms  step {r['step']['median_ms']:7.3f} ms (p95 "
            f"{r['step']['p95_ms']:.3f})  oracle test {r['oracle_success_test']:.2f} train {r['oracle_success_train']} "
            f" random {r['random_success_test']:.2f}"
        )
    write_result("tools", {"train_items_per_env": train_items, "envs": results})


if __name__ == "__main__":
    main()
