"""ScienceWorld family: latency against the bare simulator, memory over 500 episodes, gold replay of the test set.

* Latency: our ``env.reset``/``env.step`` (full Gymnasium stack, oracle responses) next to, in the
  same run and on the same items and actions, (a) the simulator's own calls in the same JVM (load
  + task description + free look; ``step`` + score + completed over py4j) and (b) the
  ``scienceworld`` package's ``ScienceWorldEnv`` (``load``+``reset``, ``step``), which also asks
  Java for every valid action and for look/inventory/task texts on every step.
* Memory: resident memory of this process plus its JVM over 500 gold-replay episodes of
  ``AgentGym/SciWorld-v0`` cycling through the 200 test items; the growth after a 10-episode
  warm-up must stay under ``RSS_BOUND_MB``.
* Gold replay: the first 200 of those episodes are the full test set, one item each, played
  through ``gym.make`` (turn cap 30) with the oracle; success must be 200/200.
* Restart: time from killing the JVM to the next finished reset.

    python benchmarks/bench_sciworld.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import gymnasium as gym
import psutil
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agentgym_envs  # noqa: E402
from common import stats_ms, write_result  # noqa: E402

from agentgym_envs.core.tasks import load_splits  # noqa: E402
from agentgym_envs.sciworld.catalog import decode  # noqa: E402
from agentgym_envs.sciworld.env import stored_gold  # noqa: E402

FAMILY_ID = "AgentGym/SciWorld-v0"
RSS_BOUND_MB = 64.0
WARMUP_EPISODES = 10


def rss_mb(process: psutil.Process) -> float:
    """Resident memory of this process and its children (the JVM), in MB."""
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def latency(items: list[int]) -> dict:
    """Reset/step times of our env, the bare simulator in our JVM and the scienceworld wrapper, item by item."""
    from scienceworld import ScienceWorldEnv

    env = gym.make(FAMILY_ID)
    base = env.unwrapped
    wrapper = ScienceWorldEnv("", envStepLimit=10_000)
    names = ("env_reset", "env_step", "raw_reset", "raw_step", "wrapper_reset", "wrapper_step")
    times: dict[str, list[float]] = {name: [] for name in names}
    try:
        env.reset(options={"item_id": items[0]})  # start the JVM outside the timings
        interface = base.jvm.unguarded_interface()
        for item in tqdm(items, desc="latency"):
            task, variation = decode(item)
            gold = list(stored_gold()[item])
            start = time.perf_counter()
            env.reset(options={"item_id": item})
            times["env_reset"].append(time.perf_counter() - start)
            for _ in gold:
                response = base.oracle_action()
                start = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(response)
                times["env_step"].append(time.perf_counter() - start)
                if terminated or truncated:
                    break
            start = time.perf_counter()
            interface.load(task.name, variation, "", False)
            interface.getTaskDescription()
            interface.freeActionLook()
            times["raw_reset"].append(time.perf_counter() - start)
            for action in gold:
                start = time.perf_counter()
                interface.step(action)
                interface.getScore()
                interface.getCompleted()
                times["raw_step"].append(time.perf_counter() - start)
            start = time.perf_counter()
            wrapper.load(task.name, variation, "")
            wrapper.reset()
            times["wrapper_reset"].append(time.perf_counter() - start)
            for action in gold:
                start = time.perf_counter()
                wrapper.step(action)
                times["wrapper_step"].append(time.perf_counter() - start)
    finally:
        env.close()
        wrapper.close()
    stats = {name: stats_ms(values) for name, values in times.items()}
    ratio = lambda a, b: round(stats[a]["median_ms"] / stats[b]["median_ms"], 2)  # noqa: E731
    return {
        "items": len(items),
        **stats,
        "env_step_over_raw_step": ratio("env_step", "raw_step"),
        "wrapper_step_over_raw_step": ratio("wrapper_step", "raw_step"),
        "wrapper_step_over_env_step": ratio("wrapper_step", "env_step"),
        "env_reset_over_raw_reset": ratio("env_reset", "raw_reset"),
        "wrapper_reset_over_env_reset": ratio("wrapper_reset", "env_reset"),
    }


def episodes_memory_and_gold(episodes: int) -> tuple[dict, dict]:
    """Gold replays cycling through the test items: resident memory over all of them, success over the first pass."""
    items = agentgym_envs.get_task(FAMILY_ID).split("test")
    subtask_of = {item: sub for sub, ids in load_splits("sciworld").items() for item in ids["test"]}
    env = gym.make(FAMILY_ID)
    process = psutil.Process(os.getpid())
    samples: list[tuple[int, float]] = []
    outcomes: dict[int, bool] = {}
    turns: list[int] = []
    baseline = None
    started = time.perf_counter()
    try:
        for episode in tqdm(range(episodes), desc="episodes"):
            item = items[episode % len(items)]
            env.reset(options={"item_id": item})
            terminated = truncated = False
            info: dict = {}
            while not (terminated or truncated):
                _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            if episode < len(items):
                outcomes[item] = bool(info["success"])
                turns.append(int(info["turn"]))
            if episode + 1 == WARMUP_EPISODES:
                baseline = rss_mb(process)
            if episode + 1 >= WARMUP_EPISODES and (episode + 1) % 25 == 0 or episode + 1 == episodes:
                samples.append((episode + 1, round(rss_mb(process), 1)))
    finally:
        env.close()
    baseline = baseline if baseline is not None else samples[0][1]
    growth = max(value for _, value in samples) - baseline
    memory = {
        "episodes": episodes,
        "rss_after_warmup_mb": round(baseline, 1),
        "rss_final_mb": samples[-1][1],
        "rss_max_growth_mb": round(growth, 1),
        "rss_bound_mb": RSS_BOUND_MB,
        "within_bound": growth < RSS_BOUND_MB,
        "rss_samples": samples,
        "seconds": round(time.perf_counter() - started, 1),
    }
    per_subtask: dict[str, list[int]] = {}
    for item, success in outcomes.items():
        per_subtask.setdefault(subtask_of[item], [0, 0])
        per_subtask[subtask_of[item]][0] += int(success)
        per_subtask[subtask_of[item]][1] += 1
    gold = {
        "items": len(outcomes),
        "successes": sum(outcomes.values()),
        "success_rate": round(sum(outcomes.values()) / max(len(outcomes), 1), 4),
        "per_subtask": {sub: {"successes": s, "items": n} for sub, (s, n) in per_subtask.items()},
        "failures": sorted(item for item, success in outcomes.items() if not success),
        "median_turns": sorted(turns)[len(turns) // 2] if turns else None,
    }
    return memory, gold


def restart(repeats: int) -> dict:
    """Kill the JVM mid-episode, then time the step that reports it and the reset that recovers."""
    env = gym.make("AgentGym/SciWorld-Find-v0")
    report_times, recover_times = [], []
    try:
        item = env.unwrapped.task.split("test")[0]
        for _ in tqdm(range(repeats), desc="restarts"):
            env.reset(options={"item_id": item})
            env.step(env.unwrapped.oracle_action())
            os.kill(env.unwrapped.jvm.pid, signal.SIGKILL)
            start = time.perf_counter()
            _, _, _, truncated, info = env.step(env.unwrapped.oracle_action())
            report_times.append(time.perf_counter() - start)
            assert truncated and "engine_error" in info
            start = time.perf_counter()
            env.reset(options={"item_id": item})
            recover_times.append(time.perf_counter() - start)
        starts = env.unwrapped.jvm.starts
    finally:
        env.close()
    return {
        "repeats": repeats,
        "crash_reported": stats_ms(report_times),
        "reset_with_new_jvm": stats_ms(recover_times),
        "jvm_starts": starts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 episodes, 8 latency items, 2 restarts")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    test_items = agentgym_envs.get_task(FAMILY_ID).split("test")
    latency_items = test_items[:: 25 if args.quick else 5]
    episodes = 40 if args.quick else 500
    results = {"quick": args.quick, "latency": latency(latency_items)}
    results["memory"], results["gold_replay"] = episodes_memory_and_gold(episodes)
    results["restart"] = restart(2 if args.quick else 5)
    lat, mem, gold = results["latency"], results["memory"], results["gold_replay"]
    print(
        f"reset: env {lat['env_reset']['median_ms']:.1f} ms, bare simulator {lat['raw_reset']['median_ms']:.1f} ms, "
        f"scienceworld wrapper {lat['wrapper_reset']['median_ms']:.1f} ms (median)\n"
        f"step:  env {lat['env_step']['median_ms']:.2f} ms (p95 {lat['env_step']['p95_ms']:.2f}), bare simulator "
        f"{lat['raw_step']['median_ms']:.2f} ms, wrapper {lat['wrapper_step']['median_ms']:.2f} ms "
        f"-> env/bare x{lat['env_step_over_raw_step']}, "
        f"wrapper/env x{lat['wrapper_step_over_env_step']}\n"
        f"memory: {mem['episodes']} episodes, RSS {mem['rss_after_warmup_mb']} -> {mem['rss_final_mb']} MB, "
        f"max growth {mem['rss_max_growth_mb']} MB (bound {RSS_BOUND_MB})\n"
        f"gold replay: {gold['successes']}/{gold['items']} test items succeed; failures {gold['failures']}\n"
        f"restart: crash reported in {results['restart']['crash_reported']['median_ms']:.0f} ms, "
        f"next reset {results['restart']['reset_with_new_jvm']['median_ms']:.0f} ms"
    )
    write_result("sciworld", results)


if __name__ == "__main__":
    main()
