"""WebArena: step latency (action + accessibility tree), reset time, browser memory over many
episodes, and several envs stepping concurrently.

Every episode plays a test task's scripted solution, so the steps are the real mix of typing,
clicking, form submissions and answers. Memory is the resident memory of Chromium and
chromedriver (all processes under the driver) sampled after every episode of one env.

    python benchmarks/bench_webarena.py [--quick]      # full: 300 episodes; quick: 30
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gymnasium as gym  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agentgym_envs  # noqa: E402
from common import stats_ms, write_result  # noqa: E402

FAMILY_ID = "AgentGym/WebArena-v0"


def browser_memory_mb(env: gym.Env) -> tuple[float, float]:
    """(unique, resident) memory of chromedriver and every Chromium process under it, in MB.

    The resident sum counts memory shared between Chromium's processes once per process; the
    unique sum (USS) is what the browser really costs."""
    import psutil

    process = env.unwrapped.browser.driver.service.process
    root = psutil.Process(process.pid)
    unique = resident = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            info = proc.memory_full_info()
            unique += info.uss
            resident += info.rss
        except psutil.Error:
            pass
    return unique / 2**20, resident / 2**20


def play(env: gym.Env, item: int) -> tuple[float, list[float], list[float], bool]:
    """One scripted episode: (reset seconds, action-step seconds, stop-step seconds, success)."""
    start = time.perf_counter()
    env.reset(options={"item_id": item})
    reset_s = time.perf_counter() - start
    steps, stops = [], []
    info: dict = {}
    for _ in range(15):
        response = env.unwrapped.oracle_action()
        start = time.perf_counter()
        _, _, terminated, truncated, info = env.step(response)
        (stops if "```stop" in response else steps).append(time.perf_counter() - start)
        if terminated or truncated:
            break
    return reset_s, steps, stops, bool(info.get("success"))


def sequential(episodes: int) -> dict:
    items = agentgym_envs.get_task(FAMILY_ID).split("test")
    env = gym.make(FAMILY_ID)
    start = time.perf_counter()
    env.reset(options={"item_id": items[0]})
    first_reset_s = time.perf_counter() - start  # Chromium launch + site start + seeding
    resets, steps, stops, successes, memory = [], [], [], 0, []
    try:
        for episode in range(episodes):
            reset_s, step_s, stop_s, success = play(env, items[episode % len(items)])
            resets.append(reset_s)
            steps += step_s
            stops += stop_s
            successes += success
            memory.append(browser_memory_mb(env))
        processes = len(env.unwrapped.browser._processes())
    finally:
        env.close()
    tenth = max(1, episodes // 10)
    return {
        "episodes": episodes,
        "first_reset_with_launch_s": round(first_reset_s, 3),
        "reset": stats_ms(resets),
        "step": stats_ms(steps),
        "stop_with_evaluation": stats_ms(stops),
        "scripted_success_rate": round(successes / episodes, 4),
        "browser_processes_at_end": processes,
        **{f"browser_{kind}_mb": {
            "first_10pct_mean": round(sum(m[index] for m in memory[:tenth]) / tenth, 1),
            "last_10pct_mean": round(sum(m[index] for m in memory[-tenth:]) / tenth, 1),
            "max": round(max(m[index] for m in memory), 1),
        } for index, kind in enumerate(("uss", "rss_sum"))},
    }


def concurrent(workers: int, episodes_per_worker: int) -> dict:
    """``workers`` envs (each with its own Chromium) playing in threads at the same time."""
    items = agentgym_envs.get_task(FAMILY_ID).split("test")
    envs = [gym.make(FAMILY_ID) for _ in range(workers)]
    for env in envs:
        env.reset(options={"item_id": items[0]})  # launch outside the timing

    def work(index: int) -> tuple[list[float], int, int]:
        steps, successes, count = [], 0, 0
        for episode in range(episodes_per_worker):
            _, step_s, _, success = play(envs[index], items[(index * 7 + episode) % len(items)])
            steps += step_s
            successes += success
            count += 1 + len(step_s)
        return steps, successes, count

    start = time.perf_counter()
    try:
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(work, range(workers)))
    finally:
        for env in envs:
            env.close()
    wall = time.perf_counter() - start
    steps = [s for r in results for s in r[0]]
    return {
        "workers": workers,
        "episodes": workers * episodes_per_worker,
        "step": stats_ms(steps),
        "scripted_success_rate": round(sum(r[1] for r in results) / (workers * episodes_per_worker), 4),
        "env_steps_per_s": round(sum(r[2] for r in results) / wall, 2),
        "wall_s": round(wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 sequential episodes, 2 workers x 5 episodes")
    args = parser.parse_args()
    from agentgym_envs.web import chromium_missing_reason

    missing = chromium_missing_reason()
    if missing is not None:
        write_result("webarena", {"quick": args.quick, "skipped": missing})
        return
    result = {"quick": args.quick, "cpus": os.cpu_count()}
    result["sequential"] = sequential(30 if args.quick else 300)
    result["concurrent_1"] = concurrent(1, 5 if args.quick else 20)
    result["concurrent_2"] = concurrent(2, 5 if args.quick else 20)
    if not args.quick:
        result["concurrent_4"] = concurrent(4, 10)
    write_result("webarena", result)
    print({k: result[k] for k in result if k.startswith(("sequential", "concurrent"))})


if __name__ == "__main__":
    main()
