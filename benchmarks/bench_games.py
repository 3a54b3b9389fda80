"""Maze, Wordle and ALFWorld: oracle and random success on the test splits, step and reset latency.

Baselines measured in the same run:
* every env: the full Gymnasium step (wrappers, parsing, info) over the engine's share of the same
  step (``_act``, timed inside it);
* ALFWorld: TextWorld's stock ``PddlEnv`` (how ALFWorld runs its text games) on the same games,
  measured first, before our engine installs its parse caches in the process.

    python benchmarks/bench_games.py            # all 200 ALFWorld test games (minutes on a cold cache)
    python benchmarks/bench_games.py --quick    # 4 ALFWorld games per task type
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agentgym_envs  # noqa: E402
from common import stats_ms, write_result  # noqa: E402

IDS = ("AgentGym/Maze-v0", "AgentGym/Wordle-v0", "AgentGym/ALFWorld-v0")


def textworld_baseline(items: list[int]) -> dict:
    """Reset and step latency of TextWorld's own PddlEnv (ALFWorld's names applied) on our games."""
    from textworld import EnvInfos
    from textworld.envs.pddl import PddlEnv

    from agentgym_envs.alfworld import generator
    from agentgym_envs.alfworld.engine import display_names

    resets, steps = [], []
    rng = np.random.default_rng(0)
    for item in tqdm(items, desc="textworld PddlEnv"):
        game = json.loads(generator.game_path(item).read_text())
        env = PddlEnv(EnvInfos(admissible_commands=True))
        start = time.perf_counter()
        env.load(game)
        names = display_names(list(env._entity_infos))
        for key, info in env._entity_infos.items():
            info.name = names[key]
        state = env.reset()
        resets.append(time.perf_counter() - start)
        for _ in range(10):
            commands = state["admissible_commands"]
            start = time.perf_counter()
            state, _, _ = env.step(commands[int(rng.integers(len(commands)))])
            steps.append(time.perf_counter() - start)
    return {"load_and_reset": stats_ms(resets), "step": stats_ms(steps)}


def play(env_id: str, items: list[int], policy: str, seed: int = 0) -> dict:
    """Play every item; time each step and, inside it, the engine's own share (``_act``)."""
    env = gym.make(env_id)
    base = env.unwrapped
    rng = np.random.default_rng(seed)
    engine_times: list[float] = []
    act = base._act

    def timed_act(action: str):
        start = time.perf_counter()
        outcome = act(action)
        engine_times.append(time.perf_counter() - start)
        return outcome

    base._act = timed_act  # the baseline: the same steps without the Gymnasium/text layer around them
    successes, turns, resets, steps, engine_steps = [], [], [], [], []
    for item in tqdm(items, desc=f"{env_id.split('/')[1]} {policy}", leave=False):
        start = time.perf_counter()
        env.reset(options={"item_id": item})
        resets.append(time.perf_counter() - start)
        while True:
            action = base.oracle_action() if policy == "oracle" else base.random_action(rng)
            engine_times.clear()
            start = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            elapsed = time.perf_counter() - start
            if engine_times:  # parsed actions reach the engine; unparseable ones never do
                steps.append(elapsed)
                engine_steps.append(engine_times[0])
            if terminated or truncated:
                break
        successes.append(bool(info["success"]))
        turns.append(int(info["turn"]))
    env.close()
    result = {
        "items": len(items),
        "success_rate": round(float(np.mean(successes)), 4),
        "mean_turns": round(float(np.mean(turns)), 2),
        "max_turns_used": int(max(turns)),
        "reset": stats_ms(resets),
        "step": stats_ms(steps),
        "engine_step": stats_ms(engine_steps),
        "steps_per_s": round(len(steps) / sum(steps), 1),
    }
    engine_ms = max(result["engine_step"]["median_ms"], 1e-6)
    result["step_over_engine_ratio"] = round(result["step"]["median_ms"] / engine_ms, 2)
    if policy == "oracle":
        result["failed_items"] = [item for item, ok in zip(items, successes) if not ok]
    return result


def alfworld_reset_paths(items: list[int]) -> dict:
    """Reset latency on a cold cache (generate + ground), from the disk cache, and of the same game again."""
    from agentgym_envs.alfworld import engine

    out = {}
    saved = os.environ.get("AGENTGYM_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AGENTGYM_CACHE_DIR"] = tmp
        try:
            env = gym.make("AgentGym/ALFWorld-v0")
            cold, disk, hot = [], [], []
            for item in tqdm(items, desc="ALFWorld reset paths", leave=False):
                engine._MEMORY_TRANSLATIONS.clear()
                start = time.perf_counter()
                env.reset(options={"item_id": item})
                cold.append(time.perf_counter() - start)
                start = time.perf_counter()
                env.reset(options={"item_id": item})
                hot.append(time.perf_counter() - start)
            env.close()
            env = gym.make("AgentGym/ALFWorld-v0")
            for item in items:
                engine._MEMORY_TRANSLATIONS.clear()
                env.reset(options={"item_id": items[0] if item != items[0] else items[-1]})  # another game first
                engine._MEMORY_TRANSLATIONS.clear()
                start = time.perf_counter()
                env.reset(options={"item_id": item})
                disk.append(time.perf_counter() - start)
            env.close()
        finally:
            if saved is None:
                os.environ.pop("AGENTGYM_CACHE_DIR", None)
            else:
                os.environ["AGENTGYM_CACHE_DIR"] = saved
    out["cold_generate_and_ground"] = stats_ms(cold)
    out["from_disk_cache"] = stats_ms(disk)
    out["same_game_again"] = stats_ms(hot)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a sample of the ALFWorld test split (4 per task type)")
    args = parser.parse_args()
    results: dict = {"quick": args.quick, "envs": {}}
    alf_test = agentgym_envs.get_task("AgentGym/ALFWorld-v0").split("test")
    alf_items = alf_test if not args.quick else [i for k in range(6) for i in [j for j in alf_test if j % 6 == k][:4]]
    baseline_items = alf_items[:3]
    # stock TextWorld first: our engine's parse caches are installed once it is used
    results["alfworld_textworld_pddlenv"] = textworld_baseline(baseline_items)
    for env_id in tqdm(IDS, desc="envs"):
        spec = agentgym_envs.get_task(env_id)
        items = alf_items if env_id.endswith("ALFWorld-v0") else spec.split("test")
        results["envs"][env_id] = {
            "max_turns": spec.max_turns,
            "oracle": play(env_id, items, "oracle"),
            "random": play(env_id, items, "random"),
        }
    results["alfworld_reset_paths"] = alfworld_reset_paths(alf_items[:6] if args.quick else alf_items[:12])
    ours = results["envs"]["AgentGym/ALFWorld-v0"]["oracle"]
    stock = results["alfworld_textworld_pddlenv"]
    results["alfworld_speedup_over_textworld_pddlenv"] = {
        "step_median": round(stock["step"]["median_ms"] / ours["step"]["median_ms"], 1),
        "reset_median_cached": round(stock["load_and_reset"]["median_ms"] / ours["reset"]["median_ms"], 1),
    }
    for env_id, r in results["envs"].items():
        o, rnd = r["oracle"], r["random"]
        print(f"{env_id:24s} oracle {o['success_rate']:.3f} ({o['items']} items, mean {o['mean_turns']} turns, "
              f"max {o['max_turns_used']}) random {rnd['success_rate']:.3f}  step {o['step']['median_ms']:.3f} ms "
              f"(p95 {o['step']['p95_ms']:.3f})  reset {o['reset']['median_ms']:.2f} ms  "
              f"x{o['step_over_engine_ratio']} engine")
    print("TextWorld PddlEnv:", stock, "speed-up:", results["alfworld_speedup_over_textworld_pddlenv"])
    print("ALFWorld reset paths:", {k: v["median_ms"] for k, v in results["alfworld_reset_paths"].items()})
    write_result("games", results)


if __name__ == "__main__":
    main()
