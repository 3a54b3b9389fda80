"""Env server: step latency in-process vs over HTTP on loopback, requests/s with 64 concurrent
sessions, and the server's resident memory over 10k episodes.

The server is an ``agentgym serve --env textcraft`` subprocess on 127.0.0.1 (a separate process,
as in a deployment); the baseline in the same run is the same env stepped in-process with the
same actions, so the ratio is the price of the network hop.

    python benchmarks/bench_server.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import httpx
import numpy as np
import psutil
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agentgym_envs  # noqa: E402
from agentgym_envs.server.client import RemoteEnv  # noqa: E402
from common import stats_ms, write_result  # noqa: E402

ENV_ID = "AgentGym/TextCraft-v0"
ACTIONS = ("Action: inventory", "Action: get 1 oak logs", "Action: craft 4 oak planks using 1 oak logs",
           "Thought: hm.\n\nAction:\ninventory")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(port: int, max_envs: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "agentgym_envs.cli", "serve", "--env", "textcraft", "--port", str(port),
               "--max-envs", str(max_envs), "--log-level", "warning"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1.0)
            return process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the server did not start")


def latency(url: str, episodes: int) -> dict:
    """The same oracle episodes stepped in-process and through RemoteEnv (and AgentGym's /step)."""
    local = gym.make(ENV_ID)
    remote = RemoteEnv(url, env_id=ENV_ID)
    items = agentgym_envs.get_task(ENV_ID).split("test")
    in_process, over_http, resets_local, resets_http = [], [], [], []
    for episode in tqdm(range(episodes), desc="latency (oracle episodes)"):
        options = {"item_id": items[episode % len(items)]}
        start = time.perf_counter()
        local.reset(seed=0, options=options)
        resets_local.append(time.perf_counter() - start)
        start = time.perf_counter()
        remote.reset(seed=0, options=options)
        resets_http.append(time.perf_counter() - start)
        for _ in range(30):
            action = local.unwrapped.oracle_action()
            start = time.perf_counter()
            _, _, terminated, truncated, _ = local.step(action)
            in_process.append(time.perf_counter() - start)
            start = time.perf_counter()
            remote.step(action)
            over_http.append(time.perf_counter() - start)
            if terminated or truncated:
                break
    remote.close()
    local.close()
    # AgentGym's protocol on the same server: the leanest request there is
    agentgym = []
    with httpx.Client(base_url=url) as client:
        number = client.post("/create").json()["id"]
        client.post("/reset", json={"id": number, "data_idx": items[0]})
        for _ in range(len(over_http)):
            start = time.perf_counter()
            client.post("/step", json={"id": number, "action": "inventory"})
            agentgym.append(time.perf_counter() - start)
        client.post("/close", json={"id": number})
    step_local, step_http = stats_ms(in_process), stats_ms(over_http)
    return {
        "in_process_step": step_local,
        "remote_env_step": step_http,
        "agentgym_protocol_step": stats_ms(agentgym),
        "in_process_reset": stats_ms(resets_local),
        "remote_env_reset": stats_ms(resets_http),
        "http_over_in_process_ratio_median": round(step_http["median_ms"] / step_local["median_ms"], 1),
        "http_overhead_ms_median": round(step_http["median_ms"] - step_local["median_ms"], 4),
    }


class Connection:
    """A lean HTTP/1.1 keep-alive connection (asyncio streams, pre-built requests).

    The load generator must cost far less than the server, or it measures itself: httpx's async
    pool spends more CPU per request than the server does at 64 concurrent sessions.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> "Connection":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        payload = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode()
        self.writer.write(head + payload)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, json.loads(await self.reader.readexactly(length)) if length else {}

    def close(self) -> None:
        self.writer.close()


async def _session_loop(port: int, index: int, stop: float, counts: dict, latencies: list) -> None:
    connection = await Connection.open(port)
    key = (await connection.call("POST", "/v1/sessions", {"env_id": ENV_ID}))[1]["session"]
    rng = np.random.default_rng(index)
    items = agentgym_envs.get_task(ENV_ID).split("test")

    async def call(method: str, path: str, body: dict) -> dict:
        start = time.perf_counter()
        status, result = await connection.call(method, path, body)
        latencies.append(time.perf_counter() - start)
        counts["requests"] += 1
        counts["errors"] += int(status >= 400)
        return result

    while time.monotonic() < stop:
        await call("POST", f"/v1/sessions/{key}/reset", {"options": {"item_id": int(items[rng.integers(len(items))])}})
        for turn in range(1, 9):
            result = await call("POST", f"/v1/sessions/{key}/step",
                                {"action": ACTIONS[int(rng.integers(len(ACTIONS)))], "seq": turn})
            counts["steps"] += 1
            if result.get("terminated") or result.get("truncated"):
                break
        counts["episodes"] += 1
    await connection.call("DELETE", f"/v1/sessions/{key}")
    connection.close()


async def _throughput(port: int, sessions: int, seconds: float) -> dict:
    """64 sessions, one keep-alive connection each, playing episodes as fast as the server answers."""
    counts = {"requests": 0, "errors": 0, "steps": 0, "episodes": 0}
    latencies: list[float] = []
    started = time.perf_counter()
    stop = time.monotonic() + seconds
    await asyncio.gather(*(_session_loop(port, index, stop, counts, latencies) for index in range(sessions)))
    elapsed = time.perf_counter() - started
    metrics = httpx.get(f"http://127.0.0.1:{port}/v1/metrics").json()
    return {
        "sessions": sessions,
        "client": "asyncio HTTP/1.1, one keep-alive connection per session",
        "seconds": round(elapsed, 2),
        "requests_per_s": round(counts["requests"] / elapsed, 1),
        "steps_per_s": round(counts["steps"] / elapsed, 1),
        "episodes": counts["episodes"],
        "errors": counts["errors"],
        "request_latency_under_load": stats_ms(latencies),
        "live_envs_after": metrics["live_envs"],
        "server_5xx": sum(n for status, n in metrics["responses_by_status"].items() if status.startswith("5")),
    }


def _remote_env_threads(url: str, sessions: int, seconds: float) -> dict:
    """What one Python trainer process sees: 64 RemoteEnv in threads sharing one pooled client."""
    counts = [0] * sessions
    errors: list[str] = []
    items = agentgym_envs.get_task(ENV_ID).split("test")

    def worker(index: int) -> None:
        try:
            env = RemoteEnv(url, env_id=ENV_ID)
            rng = np.random.default_rng(index)
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                env.reset(options={"item_id": items[int(rng.integers(len(items)))]})
                counts[index] += 1
                for _ in range(8):
                    counts[index] += 1
                    if any(env.step(ACTIONS[int(rng.integers(len(ACTIONS)))])[2:4]):
                        break
            env.close()
        except Exception as error:
            errors.append(repr(error))

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(index,)) for index in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return {"sessions": sessions, "requests_per_s": round(sum(counts) / elapsed, 1), "errors": len(errors),
            "seconds": round(elapsed, 2)}


async def _episodes(port: int, episodes: int, workers: int, server: psutil.Process, every: int) -> dict:
    """Full oracle episodes; every 10th episode of a worker on a fresh session (create/close churn)."""
    items = agentgym_envs.get_task(ENV_ID).split("test") + agentgym_envs.get_task(ENV_ID).split("train")
    samples: list[tuple[int, float]] = []
    done = {"episodes": 0, "successes": 0, "errors": 0}
    bar = tqdm(total=episodes, desc="memory (episodes)", mininterval=2)

    async def worker(index: int) -> None:
        connection = await Connection.open(port)
        key = None
        while done["episodes"] < episodes:
            number = done["episodes"]
            done["episodes"] += 1
            if key is None or number % 10 == 0:
                if key is not None:
                    await connection.call("DELETE", f"/v1/sessions/{key}")
                key = (await connection.call("POST", "/v1/sessions", {"env_id": ENV_ID}))[1]["session"]
            await connection.call("POST", f"/v1/sessions/{key}/reset",
                                  {"options": {"item_id": items[number % len(items)]}})
            for turn in range(1, 31):
                action = (await connection.call("GET", f"/v1/sessions/{key}/oracle"))[1]["action"]
                status, result = await connection.call("POST", f"/v1/sessions/{key}/step",
                                                       {"action": action, "seq": turn})
                if status != 200:
                    done["errors"] += 1
                    break
                if result["terminated"] or result["truncated"]:
                    done["successes"] += int(result["info"]["success"])
                    break
            bar.update(1)
            if number % every == 0:
                samples.append((number, server.memory_info().rss / 2**20))
        if key is not None:
            await connection.call("DELETE", f"/v1/sessions/{key}")
        connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker(index) for index in range(workers)))
    elapsed = time.perf_counter() - started
    bar.close()
    metrics = httpx.get(f"http://127.0.0.1:{port}/v1/metrics").json()
    samples.sort()
    warm = [rss for number, rss in samples if number >= episodes // 10] or [rss for _, rss in samples]
    return {
        "episodes": episodes,
        "episodes_per_s": round(episodes / elapsed, 1),
        "successes": done["successes"],
        "errors": done["errors"],
        "rss_mb_after_10pct": round(warm[0], 1),
        "rss_mb_end": round(samples[-1][1], 1),
        "rss_mb_max": round(max(rss for _, rss in samples), 1),
        "rss_growth_mb_after_warmup": round(samples[-1][1] - warm[0], 1),
        "rss_mb_samples": [(number, round(rss, 1)) for number, rss in samples],
        "live_envs_after": metrics["live_envs"],
        "sessions_created": metrics["created_total"],
        "server_steps": metrics["steps_total"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer episodes and a shorter load phase")
    args = parser.parse_args()
    results: dict = {"env_id": ENV_ID, "quick": args.quick,
                     "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    latency_episodes, load_seconds, memory_episodes = (20, 3.0, 1000) if args.quick else (100, 15.0, 10_000)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_server(port, max_envs=256)
    try:
        server = psutil.Process(process.pid)
        results["latency"] = latency(url, latency_episodes)
        print(f"step median: in-process {results['latency']['in_process_step']['median_ms']} ms, "
              f"RemoteEnv {results['latency']['remote_env_step']['median_ms']} ms "
              f"(x{results['latency']['http_over_in_process_ratio_median']})")
        results["load_64_sessions"] = asyncio.run(_throughput(port, 64, load_seconds))
        print(f"64 sessions: {results['load_64_sessions']['requests_per_s']} requests/s, "
              f"{results['load_64_sessions']['errors']} errors")
        results["remote_env_64_threads"] = _remote_env_threads(url, 64, load_seconds)
        print(f"64 RemoteEnv threads in one process: {results['remote_env_64_threads']['requests_per_s']} requests/s")
        results["memory"] = asyncio.run(_episodes(port, memory_episodes, workers=8, server=server,
                                                  every=max(1, memory_episodes // 20)))
        print(f"server RSS over {memory_episodes} episodes: {results['memory']['rss_mb_after_10pct']} -> "
              f"{results['memory']['rss_mb_end']} MB")
    finally:
        process.terminate()
        process.wait(timeout=30)
    write_result("server", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
