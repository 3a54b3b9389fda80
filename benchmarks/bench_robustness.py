"""Hostile input over every registered id: does any action raise, give an observation that is not
valid UTF-8, or take long?

Each id plays ``agentgym_envs.testing.hostile_actions`` (every payload of ``HOSTILE_PAYLOADS`` and
``HOSTILE_JSON_VALUES`` placed into the env's own action syntax: as numbers, bracketed and tagged
arguments, JSON arguments, bare and as a ReAct action, plus a 1 MB response) on its first test
item, starting a new episode whenever one ends. Counted per id: steps tried, exceptions (raised
by ``step``, or caught by ``TextEnv.step`` as ``info["action_error"]``), observations or info that
cannot be sent as UTF-8 JSON, and the slowest step.

Then two fault checks:

* faults: the ScienceWorld JVM, the WebArena browser and an ``agentgym serve`` process are killed
  mid-episode; counted: episodes ended by the fault (the one in flight at most) and episodes lost
  after it (a later reset or step that fails);
* soak: episodes of random play through an in-process server by 64 client threads
  (``RemoteEnv``); file descriptors, threads and resident memory after a warm-up and at ten points
  along the way, judged flat by their growth over the second half (``FLAT_THREADS``, ``FLAT_RSS_SHARE``).

    python benchmarks/bench_robustness.py [--quick]      # --quick: one id per family, a short soak
    python benchmarks/bench_robustness.py --soak-only --soak-episodes 20000   # just the soak
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agentgym_envs  # noqa: E402
from agentgym_envs.testing import HOSTILE_JSON_VALUES, HOSTILE_PAYLOADS, run_hostile_actions  # noqa: E402
from common import RESULTS_DIR, write_result  # noqa: E402


def env_ids(quick: bool) -> tuple[list[str], list[str]]:
    """(ids to run, ids skipped because their extra is missing)."""
    run, skipped, families = [], [], set()
    for spec in agentgym_envs.list_tasks():
        if not spec.extra_installed():
            skipped.append(spec.env_id)
        elif not quick or spec.family not in families:
            run.append(spec.env_id)
            families.add(spec.family)
    return run, skipped


def _play_after_fault(env: gym.Env, steps: int = 2) -> bool:
    """Whether a new episode starts and plays on ``env`` after a fault (the fault cost nothing more)."""
    try:
        env.reset(seed=0, options={"split": "test", "index": 1})
        for _ in range(steps):
            env.step(env.unwrapped.oracle_action())
        return True
    except Exception as error:
        print(f"  lost: {type(error).__name__}: {error}", flush=True)
        return False


def fault_jvm() -> dict:
    env = gym.make("AgentGym/SciWorld-Find-v0")
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        env.step(env.unwrapped.oracle_action())
        os.kill(env.unwrapped.jvm.pid, signal.SIGKILL)
        _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        ended = int(terminated or truncated)
        return {"in_flight_episodes_ended": ended, "engine_error_reported": "engine_error" in info,
                "episodes_lost_after": int(not _play_after_fault(env))}
    finally:
        env.close()


def fault_browser() -> dict:
    env = gym.make("AgentGym/WebArena-Maps-v0")
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        env.step(env.unwrapped.oracle_action())
        for process in env.unwrapped.browser._processes():
            process.kill()
        _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        return {"in_flight_episodes_ended": int(terminated or truncated),
                "browser_restarted": bool(info.get("browser_restarted")), "valid_action": bool(info["valid_action"]),
                "episodes_lost_after": int(not _play_after_fault(env))}
    finally:
        env.close()


def fault_server() -> dict:
    from agentgym_envs.server.client import RemoteEnv, RemoteEnvError

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "agentgym_envs.cli", "serve", "--env", "textcraft", "--port", str(port),
               "--log-level", "warning"]

    def start() -> subprocess.Popen:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return process
            time.sleep(0.1)
        raise RuntimeError("the server did not start")

    server = start()
    env = RemoteEnv(f"http://127.0.0.1:{port}", env_id="AgentGym/TextCraft-Depth1-v0", retries=1, backoff=0.1)
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        env.step(env.oracle_action())
        server.kill()
        server.wait()
        server = start()
        try:
            env.step("inventory")
            ended = 0
        except RemoteEnvError:
            ended = 1
        return {"in_flight_episodes_ended": ended, "episodes_lost_after": int(not _play_after_fault(env))}
    finally:
        env.close()
        server.kill()
        server.wait()


#: What the soak's clients play (random play without an extra request for each action).
SOAK_ACTIONS = ("inventory", "get 1 oak logs", "craft 4 oak planks using 1 oak logs", "go north")


#: The soak is "flat" when, over its second half, fds do not grow at all, threads by at most this many (a thread
#: pool still reaching its size) and resident memory by at most this share: a leak grows with every episode, so it
#: keeps growing in the second half, while pools and allocator arenas settle in the first.
FLAT_THREADS = 1
FLAT_RSS_SHARE = 0.02


def soak(episodes: int, clients: int = 64, steps: int = 3, snapshots: int = 10) -> dict:
    """``episodes`` random episodes of ``steps`` steps by ``clients`` threads through one server, with fds,
    threads and RSS taken ``snapshots`` times along the way (after a warm-up), so growth can be told from a leak."""
    import gc

    from agentgym_envs.server.app import LocalServer
    from agentgym_envs.server.client import RemoteEnv

    process = psutil.Process()

    def snapshot(played: int) -> dict:
        gc.collect()
        return {"episodes": played, "fds": process.num_fds(), "threads": threading.active_count(),
                "rss_mb": round(process.memory_info().rss / 2**20, 1)}

    with LocalServer("textcraft", max_envs=clients * 2) as server:
        envs = [RemoteEnv(server.url, env_id="AgentGym/TextCraft-Depth1-v0") for _ in range(clients)]
        counter = iter(range(10**9))
        lock = threading.Lock()

        def worker(env: RemoteEnv, quota: int) -> int:
            rng = np.random.default_rng(0)
            for _ in range(quota):
                with lock:
                    number = next(counter)
                env.reset(seed=number)
                for _ in range(steps):
                    action = SOAK_ACTIONS[int(rng.integers(len(SOAK_ACTIONS)))]
                    _, _, terminated, truncated, _ = env.step(action)
                    if terminated or truncated:
                        break
            return quota

        def run(total: int, pool: ThreadPoolExecutor) -> float:
            started = time.perf_counter()
            quotas = [total // clients + (i < total % clients) for i in range(clients)]
            assert sum(pool.map(worker, envs, quotas)) == total
            return time.perf_counter() - started

        with ThreadPoolExecutor(clients) as pool:  # one pool: its threads are counted once, not per chunk
            run(clients * 4, pool)  # warm-up: every session, pooled connections, caches
            series = [snapshot(0)]
            seconds = 0.0
            for index in range(snapshots):
                chunk = episodes // snapshots + (index < episodes % snapshots)
                seconds += run(chunk, pool)
                series.append(snapshot(series[-1]["episodes"] + chunk))
        metrics = server.manager.metrics()
        for env in envs:
            env.close()
    middle, last = series[len(series) // 2], series[-1]
    growth = {"fds": last["fds"] - middle["fds"], "threads": last["threads"] - middle["threads"],
              "rss_share": round((last["rss_mb"] - middle["rss_mb"]) / middle["rss_mb"], 4)}
    return {"episodes": episodes, "clients": clients, "steps_per_episode": steps, "seconds": round(seconds, 1),
            "episodes_per_s": round(episodes / seconds, 1), "before": series[0], "after": last, "series": series,
            "second_half_growth": growth,
            "flat": growth["fds"] <= 0 and growth["threads"] <= FLAT_THREADS and growth["rss_share"] <= FLAT_RSS_SHARE,
            "flat_rule": f"over the second half: fds +0, threads +{FLAT_THREADS} at most, RSS +{FLAT_RSS_SHARE:.0%} "
                         "at most",
            "server_crashed_total": metrics["crashed_total"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one id per family, a 500-episode soak")
    parser.add_argument("--soak-episodes", type=int, default=10_000)
    parser.add_argument("--soak-only", action="store_true",
                        help="run only the soak and replace it in the existing results/robustness.json")
    args = parser.parse_args()
    if args.soak_only:
        soaked = soak(args.soak_episodes)
        print(f"soak: {soaked}", flush=True)
        previous = json.loads((RESULTS_DIR / "robustness.json").read_text())
        write_result("robustness", {**{k: v for k, v in previous.items() if k not in ("benchmark", "machine",
                                                                                    "written_at")}, "soak": soaked})
        return
    logging.disable(logging.WARNING)  # TextEnv logs each caught error with its traceback; they are counted here
    ids, skipped = env_ids(args.quick)
    per_id = {}
    started = time.perf_counter()
    for env_id in ids:
        began = time.perf_counter()
        report = run_hostile_actions(env_id)
        per_id[env_id] = {
            "steps": report.steps,
            "exceptions": len(report.exceptions),
            "invalid_observations": len(report.invalid_observations),
            "max_step_s": round(report.max_step_seconds, 3),
            "slowest_action": report.slowest,
            "seconds": round(time.perf_counter() - began, 1),
            "examples": (report.exceptions + report.invalid_observations)[:5],
        }
        print(f"{env_id}: {report.steps} steps, {len(report.exceptions)} exceptions, "
              f"{len(report.invalid_observations)} invalid observations, max step {report.max_step_seconds:.2f} s "
              f"({report.slowest})", flush=True)
    totals = {
        "ids": len(per_id),
        "steps": sum(r["steps"] for r in per_id.values()),
        "exceptions": sum(r["exceptions"] for r in per_id.values()),
        "invalid_observations": sum(r["invalid_observations"] for r in per_id.values()),
        "max_step_s": max((r["max_step_s"] for r in per_id.values()), default=0.0),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(f"total: {totals}")
    faults = {}
    for name, check in (("jvm", fault_jvm), ("browser", fault_browser), ("server", fault_server)):
        try:
            faults[name] = check()
        except Exception as error:  # an engine that is not installed here
            faults[name] = {"skipped": f"{type(error).__name__}: {error}"[:200]}
        print(f"fault {name}: {faults[name]}", flush=True)
    soaked = soak(500 if args.quick else args.soak_episodes)
    print(f"soak: {soaked}", flush=True)
    write_result("robustness", {
        "quick": args.quick,
        "payload_kinds": len(HOSTILE_PAYLOADS) + len(HOSTILE_JSON_VALUES) + 1,
        "payloads": [*HOSTILE_PAYLOADS, *HOSTILE_JSON_VALUES, "megabyte response"],
        "totals": totals,
        "skipped_ids": skipped,
        "per_id": per_id,
        "faults": faults,
        "soak": soaked,
    })


if __name__ == "__main__":
    main()
