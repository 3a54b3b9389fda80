"""Hostile input over every registered id: does any action raise, give an observation that is not
valid UTF-8, or take long?

Each id plays ``agentgym_envs.testing.hostile_actions`` (every payload of ``HOSTILE_PAYLOADS`` and
``HOSTILE_JSON_VALUES`` placed into the env's own action syntax: as numbers, bracketed and tagged
arguments, JSON arguments, bare and as a ReAct action, plus a 1 MB response) on its first test
item, starting a new episode whenever one ends. Counted per id: steps tried, exceptions (raised
by ``step``, or caught by ``TextEnv.step`` as ``info["action_error"]``), observations or info that
cannot be sent as UTF-8 JSON, and the slowest step.

Then the probes of issue 35, each counting ``problems`` (0 is the goal): session isolation (can a
client list, guess or drive another's session?), cross-origin and Host (can a web page or a
rebound name drive the server?), credentialed endpoint URLs (does a key reach a file, a message or
the request path?), wide SQL rows (does a query take more than ~64 MB?), long typing (does a WebArena
step outlast 15 s?), damaged JSONL (does one bad byte cost more than its line?) and step after close
(does any id do anything but raise ``ResetNeeded``?).

Then two fault checks:

* faults: the ScienceWorld JVM, the WebArena browser and an ``agentgym serve`` process are killed
  mid-episode; counted: episodes ended by the fault (the one in flight at most) and episodes lost
  after it (a later reset or step that fails);
* soak: episodes of random play through an in-process server by 64 client threads
  (``RemoteEnv``); file descriptors, threads and resident memory after a warm-up and at ten points
  along the way, judged flat by their growth over the second half (``FLAT_THREADS``, ``FLAT_RSS_SHARE``).

    python benchmarks/bench_robustness.py [--quick]      # --quick: one id per family, a short soak
    python benchmarks/bench_robustness.py --soak-only --soak-episodes 20000   # just the soak
    python benchmarks/bench_robustness.py --probes-only       # just the issue-35 probes
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
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' fake chat server
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


# ---- the probes of issue 35 ------------------------------------------------------------------------
def probe_session_isolation() -> dict:
    """Guesses built from what every client sees (the server id, counting ids) and the session list."""
    import httpx

    from agentgym_envs.server.app import LocalServer

    problems = []
    with LocalServer("textcraft") as server, httpx.Client(base_url=server.url, timeout=10) as client:
        server_id = client.get("/v1/health").json()["server_id"]
        keys = [client.post("/v1/sessions", json={}).json()["session"] for _ in range(3)]
        for key in keys:
            client.post(f"/v1/sessions/{key}/reset", json={"options": {"split": "test", "index": 0}})
        listing = client.get("/v1/sessions").text
        problems += [f"GET /v1/sessions lists key {key[:6]}..." for key in keys if key in listing]
        guesses = [f"{server_id}-{n}" for n in range(10)] + [f"{server_id}--1", "0", "1"]
        tried = 0
        for guess in guesses:
            for method, path, body in (("GET", "", None), ("POST", "/step", {"action": "inventory"}),
                                       ("POST", "/reset", {}), ("DELETE", "", None)):
                tried += 1
                answer = client.request(method, f"/v1/sessions/{guess}{path}", json=body)
                if answer.status_code < 400 or server_id in answer.text:
                    problems.append(f"{method} /v1/sessions/{guess}{path}: {answer.status_code}")
        for number in range(10):  # AgentGym's integer ids: /create's envs only
            tried += 1
            answer = client.post("/step", json={"id": number, "action": "inventory"})
            if answer.status_code < 400:
                problems.append(f"POST /step id {number} reached a /v1 session")
        for key in keys:
            state = client.get(f"/v1/sessions/{key}").json()
            if state.get("turn") != 0 or not state.get("episode_active"):
                problems.append(f"a session was changed by a guess: {state}")
            client.delete(f"/v1/sessions/{key}")
    return {"requests_tried": tried, "problems": len(problems), "examples": problems[:5]}


def probe_cross_origin_and_host() -> dict:
    import httpx

    from agentgym_envs.server.app import LocalServer

    hostile = [
        ("POST", "/create", {"content": b"",
                             "headers": {"content-type": "text/plain", "origin": "http://evil.example"}}),
        ("POST", "/create", {"content": b"{}", "headers": {"content-type": "text/plain", "origin": "null"}}),
        ("POST", "/v1/sessions", {"json": {}, "headers": {"origin": "http://evil.example"}}),
        ("POST", "/v1/sessions", {"json": {}, "headers": {"sec-fetch-site": "cross-site"}}),
        ("GET", "/v1/health", {"headers": {"host": "evil.example"}}),
        ("POST", "/create", {"json": {}, "headers": {"host": "evil.example:8000"}}),
        ("POST", "/v1/sessions", {"json": {}, "headers": {"host": "127.0.0.1.evil.example"}}),
    ]
    problems = []
    with LocalServer("textcraft") as server:
        for method, path, kwargs in hostile:
            answer = httpx.request(method, f"{server.url}{path}", timeout=10, **kwargs)
            if answer.status_code < 400:
                problems.append(f"{method} {path} {kwargs.get('headers')}: {answer.status_code}")
        live = server.manager.metrics()["live_envs"]
        if live:
            problems.append(f"{live} envs were created by refused requests")
        if httpx.get(f"{server.url}/v1/health", headers={"origin": server.url}).status_code != 200:
            problems.append("a same-origin request was refused")
    return {"requests_tried": len(hostile), "problems": len(problems), "examples": problems[:5]}


def probe_credentialed_urls() -> dict:
    """``agentgym eval --endpoint`` with a key in the user info and in the query, against a local fake server."""
    import contextlib
    import io
    import tempfile

    from agentgym_envs.cli import main as cli_main
    from fake_chat import FakeChatServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    problems = []
    with FakeChatServer("Action: inventory", usage=None) as server, tempfile.TemporaryDirectory() as tmp:
        port = server.httpd.server_address[1]
        urls = [f"http://bob:sk-USERINFO@127.0.0.1:{port}/v1", f"http://127.0.0.1:{port}/v1?api_key=sk-QUERY",
                f"http://bob:sk-DOWN@127.0.0.1:{closed_port}/v1?token=sk-DOWNQ",
                f"http://127.0.0.1:{port}/v1?key=sk-A&key=sk-B"]
        for index, url in enumerate(urls):
            out = Path(tmp) / str(index)
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                code = cli_main(["eval", "--endpoint", url, "--model", "m", "--env", "AgentGym/TextCraft-Depth1-v0",
                                 "--limit", "1", "--max-turns", "1", "--out", str(out), "--no-progress",
                                 "--retries", "0"])
            files = [p for p in out.rglob("*") if p.is_file()] if out.is_dir() else []
            saved = "".join(p.read_text(errors="replace") for p in files)
            if "sk-" in saved or "bob" in saved:
                problems.append(f"URL {index}: a credential was saved")
            if "sk-" in printed.getvalue():
                problems.append(f"URL {index}: a credential was printed")
            if code != (0 if index < 2 else 2):
                problems.append(f"URL {index}: exit code {code}")
    seen = [(request["path"], {name.lower(): value for name, value in headers.items()}.get("authorization", ""))
            for request, headers in zip(server.requests, server.headers, strict=True)]
    expected = [("/v1/chat/completions", "Bearer sk-USERINFO"),
                ("/v1/chat/completions?api_key=sk-QUERY", "Bearer EMPTY")]
    if seen != expected:
        problems.append(f"the requests were {seen}")
    return {"urls_tried": len(urls), "problems": len(problems), "examples": problems[:5]}


def probe_wide_sql_rows() -> dict:
    import sqlite3
    import tracemalloc

    from agentgym_envs.tools.dbutil import QueryError, ReadOnlySQL

    problems, cases = [], {}
    for columns, rows in ((900, 200), (250, 200), (40, 2_000)):
        guard = ReadOnlySQL(sqlite3.connect(":memory:", check_same_thread=False))
        wide = ", ".join(["zeroblob(99999)"] * columns)
        sql = f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) SELECT {wide} FROM n"
        tracemalloc.start()
        began = time.perf_counter()
        try:
            guard.run(sql)
            refused = False
        except QueryError:
            refused = True
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        guard.close()
        cases[f"{columns} columns x {rows} rows"] = {"refused": refused, "peak_mb": round(peak_mb, 1),
                                                    "seconds": round(time.perf_counter() - began, 2)}
        if not refused or peak_mb > 100:
            problems.append(f"{columns}x{rows}: refused {refused}, peak {peak_mb:.0f} MB")
    return {"cases": cases, "problems": len(problems), "examples": problems}


def probe_long_typing() -> dict:
    from agentgym_envs.web import chromium_missing_reason

    if chromium_missing_reason() is not None:
        return {"skipped": str(chromium_missing_reason()), "problems": 0}
    env = gym.make("AgentGym/WebArena-v0")
    try:
        env.reset(options={"item_id": 0})
        field = env.unwrapped._tree.find("searchbox", "Search the store")
        began = time.perf_counter()
        obs, _, _, _, info = env.step(f"```type [{field.id}] [{'A' * 15_000}] [0]```")
        seconds = time.perf_counter() - began
    finally:
        env.close()
    problems = [] if seconds < 15 and "Only the first" in obs else [f"15,000 characters: {seconds:.1f} s"]
    return {"characters": 15_000, "step_s": round(seconds, 2), "problems": len(problems), "examples": problems}


def probe_damaged_jsonl() -> dict:
    import contextlib
    import io
    import tempfile

    from agentgym_envs.cli import main as cli_main
    from agentgym_envs.collect import Journal
    from agentgym_envs.evaluation.plots import read_metrics
    from agentgym_envs.evaluation.records import load_run

    def damage(path: Path, number: int) -> None:
        lines = path.read_bytes().split(b"\n")
        line = bytearray(lines[number - 1])
        line[len(line) // 2] = 0xFF
        lines[number - 1] = bytes(line)
        path.write_bytes(b"\n".join(lines))

    problems = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        out = Path(tmp) / "run"
        argv = ["eval", "--agent", "oracle", "--env", "AgentGym/TextCraft-Depth1-v0", "--limit", "3", "--max-turns",
                "3", "--out", str(out), "--no-progress"]
        cli_main(argv)
        damage(out / "trajectories.jsonl", 2)
        checks = {
            "load_run reads the other lines": lambda: len(load_run(out)) == 2,
            "agentgym view": lambda: cli_main(["view", str(out)]) == 0,
            "agentgym eval resumes":
                lambda: cli_main(argv) == 0 and json.loads((out / "summary.json").read_text())["episodes"] == 3,
        }
        journal_path = Path(tmp) / "episodes.jsonl"
        journal = Journal(journal_path, {"s": 1})
        for index in range(3):
            journal.add("x", index, True, {})
        journal_path.write_bytes(journal_path.read_bytes()[:-5])  # cut
        Journal(journal_path, {"s": 1}).add("x", 3, True, {})
        damage(journal_path, 2)
        checks["the journal resumes after a cut and a damaged line"] = lambda: sorted(
            i for _, i in Journal(journal_path, {"s": 1}).entries) == [1, 3]
        metrics = Path(tmp) / "agent_metrics.jsonl"
        metrics.write_text('{"step": 1}\n{"step": 2}\n{"step": null}\n{"step": 3}\n', encoding="utf-8")
        damage(metrics, 2)
        checks["metrics skip the damaged and step-less lines"] = \
            lambda: [r["step"] for r in read_metrics(metrics)] == [1, 3]
        for name, check in checks.items():
            try:
                if not check():
                    problems.append(f"{name}: wrong result")
            except Exception as error:
                problems.append(f"{name}: {type(error).__name__}: {str(error)[:100]}")
    return {"checks": len(checks), "problems": len(problems), "examples": problems}


def probe_step_after_close(ids: list[str]) -> dict:
    from agentgym_envs.testing import check_step_after_close

    problems = []
    for env_id in ids:
        try:
            check_step_after_close(env_id)
        except Exception as error:
            problems.append(f"{env_id}: {type(error).__name__}: {str(error)[:120]}")
    return {"ids": len(ids), "problems": len(problems), "examples": problems[:5]}


def run_probes(ids: list[str]) -> dict:
    probes = {}
    for name, probe in (("session_isolation", probe_session_isolation),
                        ("cross_origin_and_host", probe_cross_origin_and_host),
                        ("credentialed_urls", probe_credentialed_urls),
                        ("wide_sql_rows", probe_wide_sql_rows),
                        ("long_typing", probe_long_typing),
                        ("damaged_jsonl", probe_damaged_jsonl),
                        ("step_after_close", lambda: probe_step_after_close(ids))):
        began = time.perf_counter()
        try:
            probes[name] = probe()
        except Exception as error:
            probes[name] = {"problems": 1, "examples": [f"the probe raised {type(error).__name__}: {str(error)[:200]}"]}
        probes[name]["seconds"] = round(time.perf_counter() - began, 1)
        print(f"probe {name}: {probes[name]}", flush=True)
    probes["total_problems"] = sum(p["problems"] for p in probes.values())
    return probes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one id per family, a 500-episode soak")
    parser.add_argument("--soak-episodes", type=int, default=10_000)
    parser.add_argument("--soak-only", action="store_true",
                        help="run only the soak and replace it in the existing results/robustness.json")
    parser.add_argument("--probes-only", action="store_true",
                        help="run only the issue-35 probes and replace them in the existing results/robustness.json")
    args = parser.parse_args()
    if args.probes_only:
        logging.disable(logging.WARNING)
        probes = run_probes(env_ids(args.quick)[0])
        previous = json.loads((RESULTS_DIR / "robustness.json").read_text())
        write_result("robustness", {**{k: v for k, v in previous.items() if k not in ("benchmark", "machine",
                                                                                    "written_at")}, "probes": probes})
        return
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
    probes = run_probes(ids)
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
        "probes": probes,
        "soak": soaked,
    })


if __name__ == "__main__":
    main()
