"""BabyAI: text-env step latency next to the raw MiniGrid step, description / planning cost, oracle and random success.

For every test item the oracle plays through ``gym.make("AgentGym/BabyAI-v0")`` (turn cap 20).
Every MiniGrid primitive the text layer executes is recorded and then replayed on a stock
``gymnasium.make(<level>)`` env of the same level and seed in the same process: that raw step is
the baseline of the ratio. The description (with its action list, i.e. the planning) and the
shortest-path search alone are timed on every visited state with the caches cleared. A seeded
random agent (uniform over the available actions) gives the floor.

With ``--text-layer ours`` it plays our own text layer instead of AgentGym's (the default); the
description and the shortest-path search are timed for ours only (AgentGym's layer builds both in
every step it takes), and the result goes to ``babyai_ours.json``.

    python benchmarks/bench_babyai.py [--quick] [--text-layer ours]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agentgym_envs  # noqa: E402
from agentgym_envs.babyai.planner import Routes  # noqa: E402
from common import stats_ms, write_result  # noqa: E402

FAMILY_ID = "AgentGym/BabyAI-v0"


def record_primitives(base: Any) -> list[int]:
    """Make the current level engine log every primitive it is stepped with (benchmark instrumentation)."""
    engine = base.world.env
    log: list[int] = []
    step = type(engine).step

    def logged_step(action: int):
        log.append(int(action))
        return step(engine, action)

    engine.step = logged_step
    return log


def oracle_pass(items: list[int], text_layer: str) -> dict[str, Any]:
    env = gym.make(FAMILY_ID, text_layer=text_layer)
    base = env.unwrapped
    raw_envs: dict[str, Any] = {}
    text_steps, raw_steps, resets, oracle_times, describe_times, planning_times = [], [], [], [], [], []
    primitives_per_step, per_primitive_ratio = [], []
    outcomes = []
    for item in tqdm(items, desc="oracle episodes"):
        start = time.perf_counter()
        obs, start_info = env.reset(options={"item_id": item})
        resets.append(time.perf_counter() - start)
        log = record_primitives(base)
        episode_text_steps = []
        total = 0.0
        while True:
            world = base.world
            if text_layer == "ours":
                world._touch()  # drop the caches so the description rebuilds its action list (plans) from scratch
                start = time.perf_counter()
                world.describe()
                describe_times.append(time.perf_counter() - start)
                world._touch()
                start = time.perf_counter()
                Routes(world.width, world.height, world.known_costs(), world.pose)
                planning_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            action = base.oracle_action()
            oracle_times.append(time.perf_counter() - start)
            before = len(log)
            start = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action)
            elapsed = time.perf_counter() - start
            total += reward
            text_steps.append(elapsed)
            executed = len(log) - before
            primitives_per_step.append(executed)
            episode_text_steps.append((elapsed, executed))
            if terminated or truncated:
                break
        outcomes.append({"item_id": item, "subtask": info["subtask"], "level": start_info["level"],
                         "success": bool(info["success"]),
                         "turns": info["turn"], "return": total, "primitive_steps": info["primitive_steps"]})
        # the same primitives on a stock MiniGrid env of the same level and seed
        level, seed = start_info["level"], start_info["seed"]
        raw = raw_envs.get(level)
        if raw is None:
            raw = raw_envs[level] = gym.make(level)
        with contextlib.redirect_stdout(io.StringIO()):
            raw.reset(seed=seed)
        episode_raw = []
        for action in log:
            start = time.perf_counter()
            raw.step(action)
            episode_raw.append(time.perf_counter() - start)
        raw_steps.extend(episode_raw)
        raw_median = float(np.median(episode_raw)) if episode_raw else float("nan")
        for elapsed, executed in episode_text_steps:
            if executed:
                per_primitive_ratio.append(elapsed / (executed * raw_median))
    env.close()
    for raw in raw_envs.values():
        raw.close()
    text, raw_stats = stats_ms(text_steps), stats_ms(raw_steps)
    return {
        "outcomes": outcomes,
        "latency": {
            "reset": stats_ms(resets),
            "text_env_step": text,
            "raw_minigrid_step": raw_stats,
            "text_step_over_raw_step_ratio": round(text["median_ms"] / raw_stats["median_ms"], 2),
            "primitives_per_text_step": {"mean": round(float(np.mean(primitives_per_step)), 2),
                                         "median": float(np.median(primitives_per_step))},
            "text_step_over_its_raw_primitives_ratio_median": round(float(np.median(per_primitive_ratio)), 2),
            "description_with_action_list": stats_ms(describe_times) if describe_times else None,
            "shortest_path_search": stats_ms(planning_times) if planning_times else None,
            "oracle_decision": stats_ms(oracle_times),
        },
    }


def random_pass(items: list[int], seeds: list[int], text_layer: str) -> list[dict[str, Any]]:
    env = gym.make(FAMILY_ID, text_layer=text_layer)
    base = env.unwrapped
    outcomes = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for item in tqdm(items, desc=f"random agent (seed {seed})"):
            env.reset(options={"item_id": item})
            total = 0.0
            while True:
                obs, reward, terminated, truncated, info = env.step(base.random_action(rng))
                total += reward
                if terminated or truncated:
                    break
            outcomes.append({"item_id": item, "subtask": info["subtask"], "success": bool(info["success"]),
                             "return": total})
    env.close()
    return outcomes


def summarise(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    by_subtask: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for outcome in outcomes:
        by_subtask[outcome["subtask"]].append(outcome)
    summary = {
        "episodes": len(outcomes),
        "success_rate": round(float(np.mean([o["success"] for o in outcomes])), 4),
        "mean_return": round(float(np.mean([o["return"] for o in outcomes])), 4),
        "by_subtask": {
            sub: {"episodes": len(rows), "success_rate": round(float(np.mean([o["success"] for o in rows])), 4)}
            for sub, rows in by_subtask.items()
        },
    }
    if outcomes and "turns" in outcomes[0]:
        turns = [o["turns"] for o in outcomes if o["success"]]
        summary["turns_when_solved"] = {"mean": round(float(np.mean(turns)), 2), "max": int(max(turns))}
        summary["failed_items"] = [o["item_id"] for o in outcomes if not o["success"]]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a third of the test items, one random seed")
    parser.add_argument("--text-layer", choices=("agentgym", "ours"), default="agentgym",
                        help="the env's text layer (default: AgentGym's)")
    args = parser.parse_args()
    items = agentgym_envs.get_task(FAMILY_ID).split("test")
    if args.quick:
        items = items[::3]
    random_seeds = [0] if args.quick else [0, 1, 2]
    load_before = os.getloadavg()[0]
    oracle = oracle_pass(items, args.text_layer)
    random_outcomes = random_pass(items, random_seeds, args.text_layer)
    load_after = os.getloadavg()[0]
    latency = oracle["latency"]
    result = {
        "env_id": FAMILY_ID,
        "text_layer": args.text_layer,
        "test_items": len(items),
        "turn_cap": agentgym_envs.get_task(FAMILY_ID).max_turns,
        "load_average_1min": {"before": round(load_before, 2), "after": round(load_after, 2), "cpus": os.cpu_count()},
        "latency": latency,
        "oracle": summarise(oracle["outcomes"]),
        "random_agent": {"seeds": random_seeds, **summarise(random_outcomes)},
    }
    print(f"text step {latency['text_env_step']['median_ms']:.3f} ms (p95 {latency['text_env_step']['p95_ms']:.3f}) vs "
          f"raw MiniGrid step {latency['raw_minigrid_step']['median_ms']:.4f} ms: "
          f"x{latency['text_step_over_raw_step_ratio']} ({latency['primitives_per_text_step']['mean']} primitives per "
          f"text step; x{latency['text_step_over_its_raw_primitives_ratio_median']} against the raw time of those "
          f"primitives)")
    if args.text_layer == "ours":
        print(f"description + action list {latency['description_with_action_list']['median_ms']:.3f} ms, "
              f"shortest-path search {latency['shortest_path_search']['median_ms']:.3f} ms")
    print(f"oracle decision {latency['oracle_decision']['median_ms']:.3f} ms")
    print(f"oracle success {result['oracle']['success_rate']:.3f}, random agent success "
          f"{result['random_agent']['success_rate']:.3f}")
    write_result("babyai" if args.text_layer == "agentgym" else "babyai_ours", result)


if __name__ == "__main__":
    main()
