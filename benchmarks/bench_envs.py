"""Reset and step latency (median, p95) and steps/s of every registered id whose extra is installed.

The baseline in the same run is the engine alone: for each env, the step time of the full
Gymnasium stack (``gym.make`` wrappers, parsing, info) is divided by the time of the env's
``_act`` on the already-parsed action, so the ratio is the price of the text-env layer.

    python benchmarks/bench_envs.py [--quick] [--ids AgentGym/TextCraft-v0 ...]
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
from common import stats_ms, write_result  # noqa: E402


def measure(env_id: str, episodes: int, max_steps: int) -> dict:
    env = gym.make(env_id)
    base = env.unwrapped
    items = agentgym_envs.get_task(env_id).split("test")
    rng = np.random.default_rng(0)
    resets, steps, engine_steps = [], [], []
    for episode in range(episodes):
        start = time.perf_counter()
        env.reset(options={"item_id": items[episode % len(items)]})
        resets.append(time.perf_counter() - start)
        for _ in range(max_steps):
            try:
                action = base.oracle_action()
            except NotImplementedError:
                action = base.random_action(rng)
            start = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action)
            steps.append(time.perf_counter() - start)
            if terminated or truncated:
                break
    # the engine alone on the same kind of actions: parse once, time _act on a fresh episode
    for episode in range(episodes):
        env.reset(options={"item_id": items[episode % len(items)]})
        for _ in range(max_steps):
            try:
                parsed = base._parse(base.oracle_action()).action
            except NotImplementedError:
                parsed = base._parse(base.random_action(rng)).action
            start = time.perf_counter()
            outcome = base._act(parsed or "")
            engine_steps.append(time.perf_counter() - start)
            if outcome.done:
                break
    env.close()
    step_stats, engine_stats = stats_ms(steps), stats_ms(engine_steps)
    return {
        "reset": stats_ms(resets),
        "step": step_stats,
        "engine_step": engine_stats,
        "steps_per_s": round(len(steps) / sum(steps), 1),
        "step_over_engine_ratio": round(step_stats["median_ms"] / max(engine_stats["median_ms"], 1e-6), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer episodes")
    parser.add_argument("--ids", nargs="*", default=None)
    args = parser.parse_args()
    ids = args.ids or [spec.env_id for spec in agentgym_envs.list_tasks() if spec.extra_installed()]
    episodes = 5 if args.quick else 30
    results = {}
    for env_id in tqdm(ids, desc="envs"):
        results[env_id] = measure(env_id, episodes=episodes, max_steps=10)
    for env_id, r in results.items():
        print(f"{env_id:40s} reset {r['reset']['median_ms']:8.2f} ms  step {r['step']['median_ms']:8.3f} ms (p95 "
              f"{r['step']['p95_ms']:.3f})  {r['steps_per_s']:9.1f} steps/s  x{r['step_over_engine_ratio']} engine")
    write_result("envs", {"episodes_per_env": episodes, "envs": results})


if __name__ == "__main__":
    main()
