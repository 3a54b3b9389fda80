"""Envs on several ``agentgym serve`` hosts (``server/hosts.py``), ``AgentGym/Remote-v0`` as a local id, and the
client pool across ``fork``.

Every server listens on 127.0.0.1 only: in-process (``LocalServer``) where the test stops and revives one, an
``agentgym serve`` subprocess where it is killed with SIGKILL mid-run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import agentgym_envs  # noqa: E402
from agentgym_envs import testing  # noqa: E402
from agentgym_envs.agents import make_agent  # noqa: E402
from agentgym_envs.cli import main  # noqa: E402
from agentgym_envs.core import tasks as task_table  # noqa: E402
from agentgym_envs.core.loop import BaseAgent, Episode, EnvPool, EpisodeStart, Reply, play_batch  # noqa: E402
from agentgym_envs.registration import REMOTE_ENV_ID  # noqa: E402
from agentgym_envs.server.app import LocalServer  # noqa: E402
from agentgym_envs.server.client import (  # noqa: E402
    BadReplyError,
    RemoteEnv,
    RemoteEnvError,
    ServerTimeoutError,
    ServerUnavailableError,
    SessionLostError,
)
from agentgym_envs.server.hosts import (  # noqa: E402
    SERVERS_VARIABLE,
    HostRouter,
    RemoteEnvFactory,
    RoutedEnv,
    parse_servers,
    served_envs,
    server_health,
)

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"
MAZE = "AgentGym/Maze-v0"


# ---- the spec ---------------------------------------------------------------------------------------
def test_spec_routes_ids_to_their_servers() -> None:
    spec = parse_servers("AgentGym/SciWorld-v0=http://10.0.0.5:8000,http://10.0.0.6:8000/ ; *=http://10.0.0.7:8000;")
    assert spec.urls_for("AgentGym/SciWorld-v0") == ("http://10.0.0.5:8000", "http://10.0.0.6:8000")
    assert spec.urls_for(TEXTCRAFT) == ("http://10.0.0.7:8000",)
    assert spec.urls == ("http://10.0.0.5:8000", "http://10.0.0.6:8000", "http://10.0.0.7:8000")
    assert parse_servers(str(spec)) == spec
    bare = parse_servers("http://127.0.0.1:8000,https://envs.example:443")
    assert bare.urls_for(MAZE) == ("http://127.0.0.1:8000", "https://envs.example:443")
    only = parse_servers(f"{TEXTCRAFT}=http://127.0.0.1:8000")
    with pytest.raises(ValueError, match=f"names no server for {MAZE}"):
        only.urls_for(MAZE)
    assert only.with_route(MAZE, ["http://127.0.0.1:9000"]).urls_for(MAZE) == ("http://127.0.0.1:9000",)


@pytest.mark.parametrize("text, reason", [
    ("", "empty"),
    ("  ;  ", "names no server"),
    ("ftp://h:1", "not an http"),
    ("http://:8000", "names no host"),
    ("http://user:pw@h:8000", "credentials"),
    ("http://h:8000/v1", "path, query or fragment"),
    ("http://h:99999", "bad port"),
    ("A/B-v0=http://h:1;A/B-v0=http://h:2", "given twice"),
    ("http://h:1;*=http://h:2", "given twice"),
    ("A/B-v0=", "no server URL"),
    ("A/B-v0=http://h:1,http://h:1", "lists a URL twice"),
    ("A B=http://h:1", "not an env id"),
    ("http://a b:1", "spaces or control characters"),  # #61 item 16: URLs that can never work
    ("http://h\x00:1", "spaces or control characters"),
    ("http://h:1#", "path, query or fragment"),
    ("http://h:1?", "path, query or fragment"),
    ("http://a%2f:1", "no valid host"),
])
def test_bad_specs_say_why_in_one_line(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as error:
        parse_servers(text)
    assert "\n" not in str(error.value) and "ENV_ID=URL" in str(error.value)


def test_a_refused_spec_never_prints_a_password() -> None:
    """#61 item 10: the refusal goes into training logs and tracebacks."""
    for text in ("http://user:hunter2@h:1", "A/B-v0=http://h:1;A/B-v0=http://u:hunter2@h:2"):
        with pytest.raises(ValueError, match="bad servers spec") as error:
            parse_servers(text)
        assert "hunter2" not in str(error.value) and "***" in str(error.value)


def test_a_route_for_an_unknown_id_is_refused_naming_the_nearest() -> None:
    """#61 item 16: a typo's route would route nothing and its id would go to ``*`` without a word."""
    with pytest.raises(ValueError, match="AgentGym/SciWorld-V0 \\(did you mean AgentGym/SciWorld-v0\\?\\)"):
        RemoteEnvFactory("AgentGym/SciWorld-V0=http://127.0.0.1:9;*=http://127.0.0.1:9")
    with pytest.raises(ValueError, match="not registered here"):
        served_envs([MAZE], {}, "AgentGym/SciWorld-V0=http://127.0.0.1:9;*=http://127.0.0.1:9")


def test_a_server_that_is_down_is_one_line_from_the_cli(capsys: pytest.CaptureFixture, tmp_path: Any) -> None:
    """#61 item 7: ``eval --servers`` / ``--env AgentGym/Remote-v0`` with the server down: cli.main's one line."""
    down = f"http://127.0.0.1:{free_port()}"
    for options in (["--env", TEXTCRAFT, "--servers", down],
                    ["--env", REMOTE_ENV_ID, "--env-kwargs", f"url={down}", f"env_id={TEXTCRAFT}"]):
        assert main(["eval", "--agent", "oracle", *options, "--limit", "1", "--out", str(tmp_path / "x")]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("eval:")]
        assert len(lines) == 1 and lines[0].startswith("agentgym: error: no healthy env server"), lines


# ---- routing, in-process servers -------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_servers() -> Any:
    with LocalServer("textcraft", max_envs=64) as first, LocalServer("textcraft", max_envs=64) as second:
        yield first, second


def hosts_of(envs: Sequence[gym.Env]) -> list[str]:
    return [env.unwrapped.url for env in envs]


def test_episodes_spread_over_hosts_and_stay_on_theirs(two_servers: Any) -> None:
    first, second = two_servers
    router = HostRouter(f"{first.url},{second.url}")
    make = RemoteEnvFactory(router)
    envs = [make(TEXTCRAFT, max_episode_steps=6) for _ in range(4)]
    try:
        for index, env in enumerate(envs):
            env.reset(seed=index, options={"item_id": index})
        assert sorted(hosts_of(envs)) == sorted([first.url, second.url] * 2)
        assert [host["in_flight"] for host in router.status()] == [2, 2]
        started = hosts_of(envs)
        for _ in range(3):  # sticky: an episode's steps stay on its host
            for env in envs:
                env.step("inventory")
        assert hosts_of(envs) == started
        for env in envs[:2]:  # used up its budget: the TimeLimit is the budget, locally and on the server
            truncations = [env.step("inventory")[3] for _ in range(3)]
            assert truncations == [False, False, True]
        assert sum(host["in_flight"] for host in router.status()) == 2
        for index, env in enumerate(envs):  # the next episodes stay where they are: the load is even
            env.reset(seed=index, options={"item_id": index})
        assert hosts_of(envs) == started
        assert {key: value for key, value in router.status()[0].items() if key != "url"} == {
            "up": True, "in_flight": 2, "failures": 0, "retry_in_s": 0.0}
    finally:
        for env in envs:
            env.close()
    assert [host["in_flight"] for host in router.status()] == [0, 0]


def test_concurrent_choices_are_counted_once_and_checked_once(two_servers: Any) -> None:
    """Threads choosing at once (the trainer's env pool): one health check per host, leases exactly balanced."""
    first, second = two_servers
    router = HostRouter(f"{first.url},{second.url}")
    with ThreadPoolExecutor(16) as pool:
        chosen = list(pool.map(lambda _: router.choose(TEXTCRAFT), range(32)))
    assert sorted(chosen) == sorted([first.url, second.url] * 16)
    assert [(host["in_flight"], host["up"]) for host in router.status()] == [(16, True), (16, True)]
    for url in chosen:
        router.release(url)
    assert [host["in_flight"] for host in router.status()] == [0, 0]


def test_served_env_looks_like_the_local_env(two_servers: Any) -> None:
    first, _ = two_servers
    served = RemoteEnvFactory(first.url)(TEXTCRAFT)
    local = gym.make(TEXTCRAFT)
    try:
        assert served.spec.id == TEXTCRAFT and served.spec.max_episode_steps == local.spec.max_episode_steps == 30
        assert served.unwrapped.task == local.unwrapped.task
        assert served.reset(seed=3, options={"item_id": 7}) == local.reset(seed=3, options={"item_id": 7})
        for action in ("inventory", local.unwrapped.oracle_action(), "Action: nonsense"):
            assert served.step(action) == local.step(action)
        assert served.unwrapped.oracle_action() == local.unwrapped.oracle_action()
    finally:
        served.close()
        local.close()
    with pytest.raises(ValueError, match="env kwargs cannot travel"):
        RemoteEnvFactory(first.url)(TEXTCRAFT, lenient_crafting=True)
    with pytest.raises(ValueError, match="names no server"):
        RemoteEnvFactory(f"{TEXTCRAFT}={first.url}")(MAZE)
    with pytest.raises(ValueError, match="no server of the spec serves"):
        RemoteEnvFactory(first.url)(MAZE)


@pytest.fixture
def routed_textcraft_id(two_servers: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A temporary id whose entry point is RoutedEnv over both servers, for the public conformance checks."""
    routed_id = "AgentGym/RoutedTextCraft-Depth1-v0"
    spec = agentgym_envs.get_task(TEXTCRAFT)
    monkeypatch.setitem(task_table._TASKS, routed_id, dataclasses.replace(spec, env_id=routed_id))
    servers = ",".join(server.url for server in two_servers)
    gym.register(id=routed_id, entry_point="agentgym_envs.server.hosts:RoutedEnv", max_episode_steps=spec.max_turns,
                 kwargs={"servers": servers, "env_id": TEXTCRAFT, "max_turns": spec.max_turns})
    try:
        yield routed_id
    finally:
        del gym.registry[routed_id]


def test_routed_env_passes_the_public_conformance_checks(routed_textcraft_id: str, two_servers: Any) -> None:
    """check_env, determinism, bad and foreign actions, close twice, flat memory: all over two hosts."""
    before = [server.manager.metrics()["live_envs"] for server in two_servers]
    testing.check_text_env(routed_textcraft_id, memory_resets=20)
    assert [server.manager.metrics()["live_envs"] for server in two_servers] == before


def test_async_vector_routed_envs_after_the_parent_used_the_router(routed_textcraft_id: str) -> None:
    """Forked workers get their own router and clients: the items of a sync run, in order."""
    parent = gym.make(routed_textcraft_id)
    parent.reset(seed=0)
    parent.step("inventory")
    results = {}
    try:
        for mode in ("sync", "async"):
            envs = gym.make_vec(routed_textcraft_id, num_envs=3, vectorization_mode=mode)
            try:
                observations, infos = envs.reset(seed=5)
                stepped = envs.step(["inventory"] * 3)
                results[mode] = (tuple(observations), tuple(infos["item_id"]), tuple(stepped[0]))
            finally:
                envs.close()
        parent.step("inventory")
    finally:
        parent.close()
    assert results["async"] == results["sync"] and len(set(results["sync"][1])) == 3


def test_a_stopped_host_gets_no_new_episodes_and_is_used_again_after_its_cooldown(two_servers: Any) -> None:
    _, steady = two_servers
    flaky = LocalServer("textcraft")
    flaky.start()
    port = flaky.port
    router = HostRouter(f"{flaky.url},{steady.url}", cooldown=0.5)
    make = RemoteEnvFactory(router)
    envs = [make(TEXTCRAFT) for _ in range(2)]
    try:
        for index, env in enumerate(envs):
            env.reset(seed=index, options={"item_id": index})
        assert sorted(hosts_of(envs)) == sorted([flaky.url, steady.url])
        flaky.stop()
        for index, env in enumerate(envs):  # new episodes: the dead host is found out and avoided
            env.reset(seed=index, options={"item_id": index})
        assert hosts_of(envs) == [steady.url, steady.url]
        assert not router.status()[0]["up"] and router.status()[0]["failures"] >= 1
        extra = make(TEXTCRAFT)  # a new env too (the host is in its cooldown: not even tried)
        envs.append(extra)
        assert extra.unwrapped.url == steady.url
        revived = LocalServer("textcraft", port=port)
        revived.start()
        try:
            time.sleep(0.6)  # the cooldown: then a health check (in the background: nobody waits on it), and episodes
            assert router.choose(TEXTCRAFT, lease=False) == steady.url
            deadline = time.monotonic() + 5
            while not router.status()[0]["up"]:
                assert time.monotonic() < deadline, router.status()
                time.sleep(0.01)
            for index, env in enumerate(envs):
                env.reset(seed=index, options={"item_id": index})
            assert sorted(hosts_of(envs)).count(revived.url) == 1 and router.status()[0]["up"]
        finally:
            for env in envs:
                env.close()
            revived.stop()
    finally:
        for env in envs:
            env.close()


def test_the_oracle_of_an_episode_whose_host_stopped_comes_from_the_replay(two_servers: Any) -> None:
    _, steady = two_servers
    flaky = LocalServer("textcraft")
    flaky.start()
    env = RemoteEnvFactory(HostRouter(f"{flaky.url},{steady.url}"))(TEXTCRAFT)  # equal loads: the first host
    local = gym.make(TEXTCRAFT)
    try:
        env.reset(seed=4, options={"item_id": 5})
        local.reset(seed=4, options={"item_id": 5})
        action = local.unwrapped.oracle_action()
        assert env.step(action) == local.step(action)
        assert env.unwrapped.url == flaky.url
        flaky.stop()
        assert env.unwrapped.oracle_action() == local.unwrapped.oracle_action()
        assert env.unwrapped.url == steady.url and env.unwrapped.failovers == 1
        action = local.unwrapped.oracle_action()
        assert env.step(action) == local.step(action)
    finally:
        env.close()
        local.close()
        flaky.stop()  # idempotent


def test_a_lost_session_is_replayed_and_a_replay_that_differs_is_refused(two_servers: Any) -> None:
    first, second = two_servers
    env = RemoteEnvFactory(HostRouter(f"{first.url},{second.url}"))(TEXTCRAFT)
    local = gym.make(TEXTCRAFT)
    try:
        env.reset(seed=1, options={"item_id": 2})
        local.reset(seed=1, options={"item_id": 2})
        for _ in range(2):
            action = local.unwrapped.oracle_action()
            assert env.step(action) == local.step(action)
        remote = env.unwrapped.remote  # the server forgets the env (a restart, a reaper): replayed, nothing lost
        httpx.delete(f"{env.unwrapped.url}/v1/sessions/{remote.session}")
        action = local.unwrapped.oracle_action()
        assert env.step(action) == local.step(action)
        assert env.unwrapped.failovers == 1
        httpx.delete(f"{env.unwrapped.url}/v1/sessions/{env.unwrapped.remote.session}")
        env.unwrapped._last_observation += " (as a nondeterministic env would have it)"  # the replay differs
        with pytest.raises(SessionLostError, match="did not reproduce") as error:
            env.step("inventory")
        assert error.value.code == "replay_mismatch"
        with pytest.raises(gym.error.ResetNeeded):
            env.step("inventory")
        env.reset(seed=0)  # and the env goes on
    finally:
        env.close()
        local.close()


# ---- two `agentgym serve` processes, one killed mid-run ---------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_servers(count: int, env: str = "textcraft") -> list[tuple[subprocess.Popen, str]]:
    started = []
    for _ in range(count):
        port = free_port()
        command = [sys.executable, "-m", "agentgym_envs.cli", "serve", "--env", env, "--port", str(port),
                   "--log-level", "warning"]
        started.append((subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         env={**os.environ, "HF_HUB_OFFLINE": "1"}), f"http://127.0.0.1:{port}"))
    deadline = time.monotonic() + 60
    for process, url in started:
        while True:
            assert process.poll() is None, f"the server at {url} exited"
            try:
                httpx.get(f"{url}/v1/health", timeout=1.0).raise_for_status()
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, f"no server at {url}"
                time.sleep(0.1)
    return started


def stop_servers(started: list[tuple[subprocess.Popen, str]]) -> None:
    for process, _ in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


@pytest.fixture
def served_pair() -> Any:
    started = start_servers(2)
    try:
        yield started
    finally:
        stop_servers(started)


class KillAfterTurn(BaseAgent):
    """The oracle, which SIGKILLs a server after answering turn ``turn`` (before the envs step)."""

    name = "oracle"

    def __init__(self, turn: int, process: subprocess.Popen):
        self.oracle, self.turn, self.process, self.turns = make_agent("oracle"), turn, process, 0

    def act(self, episodes: Sequence[Episode]) -> list[Reply]:
        replies = self.oracle.act(episodes)
        self.turns += 1
        if self.turns == self.turn:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        return replies


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    keys = ("env_id", "item_id", "seed", "messages", "actions", "rewards", "valid", "scores", "return", "turns", "info",
            "final_observation", "parsed_actions")  # a served env reports the action it parsed as a local one does
    return {key: record[key] for key in keys}


def test_a_host_killed_mid_run_loses_no_episode(served_pair: Any) -> None:
    (victim, victim_url), (_, survivor_url) = served_pair
    items = agentgym_envs.get_task(TEXTCRAFT).split("test")[:8]
    starts = [EpisodeStart(TEXTCRAFT, int(item), 30) for item in items]
    router = HostRouter(f"{victim_url},{survivor_url}", cooldown=60)
    pool = EnvPool(make_env=RemoteEnvFactory(router))
    try:
        served, _ = play_batch(starts, KillAfterTurn(2, victim), pool)
        moved = [env for envs in pool._free.values() for env in envs]
        assert sum(env.unwrapped.failovers for env in moved) == 4  # the victim's half of the batch, replayed
        assert hosts_of(moved) == [survivor_url] * len(moved)
        assert not router.status()[0]["up"]
        again, _ = play_batch(starts[:4], make_agent("oracle"), pool)  # new episodes: the survivor only
        assert hosts_of([env for envs in pool._free.values() for env in envs]) == [survivor_url] * len(moved)
    finally:
        pool.close()
    local_pool = EnvPool()
    try:
        local, _ = play_batch(starts, make_agent("oracle"), local_pool)
    finally:
        local_pool.close()
    assert all(trajectory.success for trajectory in served) and len(served) == len(starts)
    assert [comparable(t.to_record()) for t in served] == [comparable(t.to_record()) for t in local]
    assert [comparable(t.to_record()) for t in again] == [comparable(t.to_record()) for t in local[:4]]


# ---- the CLI -------------------------------------------------------------------------------------------
def eval_summary(tmp: str, name: str, *options: str) -> dict[str, Any]:
    out = os.path.join(tmp, name)
    code = main(["eval", "--agent", "oracle", "--limit", "4", "--no-progress", "--out", out, *options])
    assert code == 0
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as summary:
        results = json.load(summary)["results"]
    with open(os.path.join(out, "trajectories.jsonl"), encoding="utf-8") as log:
        records = sorted((comparable(json.loads(line)) for line in log), key=lambda r: r["item_id"])
    return {"results": results, "records": records}


def test_eval_with_servers_and_with_remote_v0_matches_a_local_eval(two_servers: Any, monkeypatch: Any,
                                                                   capsys: Any) -> None:
    first, second = two_servers
    monkeypatch.delenv(SERVERS_VARIABLE, raising=False)
    with tempfile.TemporaryDirectory() as tmp:
        local = eval_summary(tmp, "local", "--env", TEXTCRAFT)
        assert local["results"][0]["subtasks"]["overall"]["success"] == 1.0 and len(local["records"]) == 4
        assert eval_summary(tmp, "servers", "--env", TEXTCRAFT, "--servers", f"{first.url},{second.url}") == local
        assert eval_summary(tmp, "remote", "--env", "AgentGym/Remote-v0", "--env-kwargs", f"url={first.url}",
                            f"env_id={TEXTCRAFT}", "timeout=30") == local
        monkeypatch.setenv(SERVERS_VARIABLE, f"*={second.url}")
        assert eval_summary(tmp, "variable", "--env", TEXTCRAFT) == local
        capsys.readouterr()
        assert main(["eval", "--agent", "oracle", "--env", TEXTCRAFT, "--servers", "ftp://nope",
                     "--out", os.path.join(tmp, "bad")]) == 2
        assert "bad servers spec" in capsys.readouterr().err
        assert main(["eval", "--agent", "oracle", "--env", TEXTCRAFT, "--env-kwargs", "lenient_crafting=true",
                     "--out", os.path.join(tmp, "kwargs")]) == 2
        assert "env kwargs cannot travel" in capsys.readouterr().err


def test_collect_with_servers_matches_a_local_collection(two_servers: Any, monkeypatch: Any) -> None:
    pytest.importorskip("datasets")
    first, second = two_servers
    monkeypatch.delenv(SERVERS_VARIABLE, raising=False)
    with tempfile.TemporaryDirectory() as tmp:
        journals = {}
        for name, options in (("local", []), ("served", ["--servers", f"{first.url},{second.url}"])):
            out = os.path.join(tmp, name)
            assert main(["collect", "--env", TEXTCRAFT, "--n", "3", "--out", out, *options]) == 0
            with open(os.path.join(out, "episodes.jsonl"), encoding="utf-8") as journal:
                journals[name] = [comparable(entry["row"]) for entry in map(json.loads, journal) if "row" in entry]
        assert len(journals["local"]) == 3 and journals["served"] == journals["local"]


def test_served_envs_reads_the_cli_options(two_servers: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv(SERVERS_VARIABLE, raising=False)
    default = served_envs(["AgentGym/Remote-v0"], {"url": two_servers[0].url}, None)  # the server's first id
    assert default[0] == ["AgentGym/TextCraft-v0"] and default[1] == {}
    assert served_envs([TEXTCRAFT], {"lenient_crafting": True}, None) == ([TEXTCRAFT], {"lenient_crafting": True},
                                                                          None)
    ids, kwargs, make = served_envs(["AgentGym/Remote-v0", MAZE], {"url": "http://127.0.0.1:9", "env_id": TEXTCRAFT,
                                                                   "retries": 0}, f"{MAZE}=http://127.0.0.1:8")
    assert ids == [TEXTCRAFT, MAZE] and kwargs == {} and make.remote_options == {"retries": 0}
    assert make.router.spec.urls_for(TEXTCRAFT) == ("http://127.0.0.1:9",)
    with pytest.raises(ValueError, match="names no server"):
        served_envs([TEXTCRAFT, MAZE], {}, f"{MAZE}=http://127.0.0.1:8")
    with pytest.raises(ValueError, match="pass env_id"):
        served_envs(["AgentGym/Remote-v0"], {"url": f"http://127.0.0.1:{free_port()}"}, None)


# ---- AgentGym/Remote-v0 like the local id -------------------------------------------------------------
def test_remote_v0_carries_the_served_cap_and_splits(two_servers: Any) -> None:
    first, _ = two_servers
    spec = agentgym_envs.get_task(TEXTCRAFT)
    envs = {"default": gym.make("AgentGym/Remote-v0", url=first.url, env_id=TEXTCRAFT),
            "max_turns": gym.make("AgentGym/Remote-v0", url=first.url, env_id=TEXTCRAFT, max_turns=40),
            "shorter": gym.make("AgentGym/Remote-v0", url=first.url, env_id=TEXTCRAFT, max_episode_steps=5)}
    try:
        assert {name: env.spec.max_episode_steps for name, env in envs.items()} == {
            "default": spec.max_turns, "max_turns": 40, "shorter": 5}
        remote = envs["default"].unwrapped
        assert remote.task == spec and remote.split("test") == spec.split("test")
        assert remote.description == spec.description
        envs["default"].reset(seed=0)
        truncations = [envs["default"].step("inventory")[3] for _ in range(spec.max_turns)]
        assert truncations.index(True) == spec.max_turns - 1
    finally:
        for env in envs.values():
            env.close()


def test_async_vector_remote_envs_after_the_parent_used_the_pool(two_servers: Any) -> None:
    """A forked worker gets a client of its own: right items, in order, no crossed or broken requests."""
    first, _ = two_servers
    parent = gym.make("AgentGym/Remote-v0", url=first.url, env_id=TEXTCRAFT)
    parent.reset(seed=0)
    parent.step("inventory")  # the pooled keep-alive connection is open in the parent
    kwargs = {"url": first.url, "env_id": TEXTCRAFT}
    results = {}
    try:
        for mode in ("sync", "async"):
            envs = gym.make_vec("AgentGym/Remote-v0", num_envs=4, vectorization_mode=mode, **kwargs)
            try:
                turns = []
                for round_ in range(3):
                    observations, infos = envs.reset(seed=10 * round_)
                    stepped = envs.step(["inventory"] * 4)
                    turns.append((tuple(observations), tuple(infos["item_id"]), tuple(stepped[0])))
                results[mode] = turns
            finally:
                envs.close()
            parent.step("inventory")  # and the parent's own env still works
    finally:
        parent.close()
    local = gym.make_vec(TEXTCRAFT, num_envs=4, vectorization_mode="sync")
    try:
        expected = [tuple(np.asarray(local.reset(seed=10 * round_)[1]["item_id"])) for round_ in range(3)]
    finally:
        local.close()
    assert results["async"] == results["sync"]
    assert [turn[1] for turn in results["async"]] == expected and len(set(expected[0])) == 4


def test_no_healthy_host_is_a_clear_error() -> None:
    port = free_port()
    router = HostRouter(f"http://127.0.0.1:{port}", cooldown=30, health_timeout=1)
    with pytest.raises(ServerUnavailableError, match="no healthy env server"):
        RoutedEnv(router, TEXTCRAFT)
    assert router.status()[0]["retry_in_s"] > 25


def test_a_server_restarted_at_the_same_address_with_other_ids_is_read_again() -> None:
    """The router keeps the ids each host serves from its last health check; a new server on the old address (the
    shared router of a spec outlives it) must not be refused for the ids it did not serve before."""
    with LocalServer("textcraft") as first:
        spec, port = first.url, first.port
        env = RemoteEnvFactory(spec)(TEXTCRAFT)
        env.reset(seed=0)
        env.close()
    with LocalServer("maze", port=port) as second:
        env = RemoteEnvFactory(spec)(MAZE)
        try:
            observation, _ = env.reset(seed=0)
            assert observation and env.unwrapped.url == second.url
        finally:
            env.close()
        with pytest.raises(ValueError, match=f"no server of the spec serves {TEXTCRAFT}"):
            RemoteEnvFactory(spec)(TEXTCRAFT).reset(seed=0)


# ---- the trainer ----------------------------------------------------------------------------------------
def test_trainer_plays_its_env_ids_on_the_servers(two_servers: Any, tmp_path: Any) -> None:
    """``env_servers``: checked when the config is built; the rollout's envs run on the servers, splits stay local."""
    pytest.importorskip("trl")
    import torch
    from tiny_model import tiny_model, tiny_tokenizer

    from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer

    torch.set_num_threads(1)
    first, second = two_servers
    settings = dict(output_dir=str(tmp_path / "run"), env_ids=[TEXTCRAFT], max_turns=2, max_turn_tokens=8,
                    max_context_tokens=2048, per_device_train_batch_size=4, num_generations=2, max_steps=1,
                    max_items_per_env=4, save_strategy="no", report_to="none", seed=0, use_cpu=True,
                    dataloader_num_workers=0, cpu_threads=1)
    with pytest.raises(ValueError, match="bad servers spec") as error:
        AgentGRPOConfig(**settings, env_servers=f"{TEXTCRAFT}=ftp://127.0.0.1:1")
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=f"names no server for {TEXTCRAFT}"):
        AgentGRPOConfig(**settings, env_servers=f"{MAZE}=http://127.0.0.1:1")
    tokenizer = tiny_tokenizer("chatml")
    args = AgentGRPOConfig(**settings, env_servers=f"{first.url},{second.url}")
    before = [server.manager.metrics()["created_total"] for server in two_servers]
    trainer = AgentGRPOTrainer(tiny_model(tokenizer), args=args, processing_class=tokenizer)
    try:
        assert isinstance(trainer.env_pool.make_env, RemoteEnvFactory)
        trainer.train()
        trajectories = trainer.last_rollout.trajectories
        assert len(trajectories) == 4 and {t.env_id for t in trajectories} == {TEXTCRAFT}
        assert {t.item_id for t in trajectories} <= set(agentgym_envs.get_task(TEXTCRAFT).split("train"))
        created = [server.manager.metrics()["created_total"] - count for server, count in zip(two_servers, before)]
        assert min(created) >= 1  # both hosts played
    finally:
        trainer.env_pool.close()


def test_a_remote_env_refuses_to_be_copied_naming_the_id(two_servers: Any) -> None:
    """A copy would drive the same server session: deepcopy and pickle raise EnvCopyError naming the id."""
    import copy
    import pickle

    from agentgym_envs.core import EnvCopyError

    first, _ = two_servers
    env = gym.make("AgentGym/Remote-v0", url=first.url, env_id=TEXTCRAFT)
    try:
        env.reset(seed=0)
        for how in (copy.deepcopy, pickle.dumps):
            with pytest.raises(EnvCopyError, match=f"AgentGym/Remote-v0 serving {TEXTCRAFT}"):
                how(env)
        env.step("inventory")  # the original still plays
    finally:
        env.close()


# ---- fourth hardening pass (#61): tokens stay with their host; slow, trickling and lying hosts ----------
class FakeHost:
    """A loopback HTTP server that answers the /v1 protocol as a test scripts it: it records each request's path
    and ``Authorization`` header, and may trickle its answers a byte at a time or lie about their shape."""

    def __init__(self, env_ids: Sequence[str] = (MAZE,)):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.seen: list[tuple[str, str | None]] = []
        self.replies: dict[str, tuple[int, bytes]] = {}  # "POST /v1/sessions/s/step" -> (status, body)
        self.health: dict[str, Any] = {"status": "ok", "env_ids": list(env_ids), "default_env_id": env_ids[0]}
        self.trickle = 0.0  # seconds between the bytes of every answer (0: at once)
        self.stopped = __import__("threading").Event()
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the pooled client expects

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                host.seen.append((self.path, self.headers.get("authorization")))
                status, body = host.reply(f"{method} {self.path.split('?')[0]}")
                head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
                data = head.encode() + body
                if not host.trickle:
                    self.wfile.write(data)
                    return
                for index in range(len(data)):
                    if host.stopped.wait(host.trickle):
                        return
                    self.wfile.write(data[index:index + 1])
                    self.wfile.flush()

            def do_GET(self) -> None:  # noqa: N802 (http.server's names)
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._answer("POST")

            def do_DELETE(self) -> None:  # noqa: N802
                self._answer("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = __import__("threading").Thread(target=self.server.serve_forever, daemon=True)

    def reply(self, call: str) -> tuple[int, bytes]:
        if call in self.replies:
            return self.replies[call]
        env_id = self.health["env_ids"][0] if isinstance(self.health.get("env_ids"), list) else MAZE
        answers = {
            "GET /v1/health": self.health,
            "POST /v1/sessions": {"session": "s", "server_id": "fake", "env_id": env_id, "max_turns": 5,
                                  "observation_max_length": 64000, "action_max_length": 4000},
            "POST /v1/sessions/s/reset": {"observation": "start", "info": {}},
            "POST /v1/sessions/s/step": {"observation": "next", "reward": 0.0, "terminated": False, "truncated": False,
                                         "info": {}},
            "DELETE /v1/sessions/s": {"session": "s", "closed": True},
        }
        return (200, json.dumps(answers[call]).encode()) if call in answers else (404, b'{"error": "not_found"}')

    def __enter__(self) -> FakeHost:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_token_given_as_a_remote_option_reaches_the_health_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """#61: ``--env-kwargs token=T`` (Remote-v0's, or with --servers) is the router's too: its health checks send
    it, so a token-protected server is not taken for down."""
    monkeypatch.delenv("AGENTGYM_SERVER_TOKEN", raising=False)
    with LocalServer("textcraft", token="s3cret") as server:
        for ids, options, servers in (([REMOTE_ENV_ID], {"url": server.url, "env_id": TEXTCRAFT, "token": "s3cret"},
                                       None),
                                      ([TEXTCRAFT], {"token": "s3cret"}, f"{TEXTCRAFT}={server.url}")):
            played, kwargs, make = served_envs(ids, options, servers)
            assert played == [TEXTCRAFT] and kwargs == {} and "token" not in make.remote_options
            env = make(TEXTCRAFT, max_episode_steps=3)
            try:
                assert env.reset(seed=0, options={"item_id": 1})[0]
                assert env.unwrapped.url == server.url and make.router.status()[0]["up"]
            finally:
                env.close()
        with pytest.raises(ValueError, match="HostRouter sends its own token"):
            RemoteEnvFactory(HostRouter(server.url), token="s3cret")


def test_a_remote_v0_token_goes_to_its_url_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """#61: with ``--env Maze Remote-v0 --env-kwargs url=A token=T --servers '*=B'``, B never sees T."""
    monkeypatch.delenv("AGENTGYM_SERVER_TOKEN", raising=False)
    with LocalServer("textcraft", token="T0K") as first, FakeHost([MAZE]) as other:
        ids, _, make = served_envs([MAZE, REMOTE_ENV_ID], {"url": first.url, "env_id": TEXTCRAFT, "token": "T0K"},
                                   f"*={other.url}")
        assert ids == [MAZE, TEXTCRAFT] and "token" not in make.remote_options
        assert make.router.token_for(first.url) == "T0K" and make.router.token_for(other.url) is None
        envs = [make(MAZE), make(TEXTCRAFT)]
        try:
            for env in envs:
                assert env.reset(seed=0)[0]
            assert [env.unwrapped.url for env in envs] == [other.url, first.url]
        finally:
            for env in envs:
                env.close()
        assert {path for path, _ in other.seen} >= {"/v1/health", "/v1/sessions", "/v1/sessions/s/reset"}
        assert [auth for _, auth in other.seen] == [None] * len(other.seen)
    monkeypatch.setenv("AGENTGYM_SERVER_TOKEN", "shared")  # the variable is every other host's token
    _, _, make = served_envs([MAZE, REMOTE_ENV_ID], {"url": "http://127.0.0.1:9", "env_id": TEXTCRAFT,
                                                      "token": "T0K"}, "*=http://10.9.9.9:8000")
    assert make.router.token_for("http://10.9.9.9:8000") == "shared"
    assert make.router.token_for("http://127.0.0.1:9") == "T0K"


def slow_steps(server: Any, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """``server``'s env steps take ``seconds`` for the action ``slow`` (its health check still answers at once)."""
    step = server.manager.step

    def slow(session: Any, action: str, seq: int | None = None) -> Any:
        if action == "slow":
            time.sleep(seconds)
        return step(session, action, seq)

    monkeypatch.setattr(server.manager, "step", slow)


def test_a_slow_step_takes_no_live_host_out_of_service(two_servers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """#61 and docs/server.md's promise on a slow host: a step past ``timeout`` ends that episode (code
    ``timeout``), the host answers its health check and stays in service, nothing is replayed elsewhere, and
    the other episodes and the next ones go on."""
    first, second = two_servers
    for server in two_servers:
        slow_steps(server, monkeypatch, 1.2)
    router = HostRouter(f"{first.url},{second.url}", cooldown=30)
    make = RemoteEnvFactory(router, timeout=0.3)
    envs = [make(TEXTCRAFT, max_episode_steps=6) for _ in range(2)]
    try:
        for index, env in enumerate(envs):
            env.reset(seed=index, options={"item_id": index})
        assert sorted(hosts_of(envs)) == sorted([first.url, second.url])
        started = time.monotonic()
        with pytest.raises(ServerTimeoutError, match="within 0.3 s") as error:
            envs[0].step("slow")
        assert error.value.code == "timeout" and time.monotonic() - started < 3
        assert [host["up"] for host in router.status()] == [True, True]
        assert [host["failures"] for host in router.status()] == [0, 0]
        assert envs[0].unwrapped.failovers == 0 and sum(host["in_flight"] for host in router.status()) == 1
        with pytest.raises(gym.error.ResetNeeded):
            envs[0].step("inventory")
        assert envs[1].step("inventory")[0]  # the other host's episode goes on
        time.sleep(1.0)  # the slow step ends on its server
        envs[0].reset(seed=0, options={"item_id": 0})  # and new episodes go to either host
        assert envs[0].step("inventory")[0]
    finally:
        for env in envs:
            env.close()


def test_a_dead_host_is_marked_down_and_its_episode_replayed(two_servers: Any) -> None:
    """docs/server.md's promise on a dead host: marked down for the cooldown after one failed health check, its
    episode replayed on another host with nothing lost."""
    _, steady = two_servers
    with LocalServer("textcraft") as doomed:
        router = HostRouter(f"{doomed.url},{steady.url}", cooldown=30)
        env = RemoteEnvFactory(router)(TEXTCRAFT)
        local = gym.make(TEXTCRAFT)
        try:
            env.reset(seed=3, options={"item_id": 3})
            local.reset(seed=3, options={"item_id": 3})
            assert env.unwrapped.url == doomed.url
            doomed.stop()
            assert env.step("inventory") == local.step("inventory")
            assert env.unwrapped.url == steady.url and env.unwrapped.failovers == 1
            assert router.status()[0]["up"] is False and router.status()[0]["retry_in_s"] > 25
        finally:
            env.close()
            local.close()


def test_a_trickling_host_is_timed_out_per_request_and_holds_up_no_other() -> None:
    """#61: timeouts are for the whole request (a byte every 0.1 s never trips a per-read timeout), and a host
    whose health check trickles does not hold up new episodes on the others."""
    with FakeHost([TEXTCRAFT]) as slow, LocalServer("textcraft") as good:
        slow.trickle = 0.1
        for call in (lambda: server_health(slow.url, timeout=0.5),
                     lambda: RemoteEnv(slow.url, TEXTCRAFT, timeout=0.5, retries=0)):
            started = time.monotonic()
            with pytest.raises(ServerUnavailableError):
                call()
            assert time.monotonic() - started < 1.5
        router = HostRouter(f"{TEXTCRAFT}={good.url},{slow.url}", cooldown=0.2, health_timeout=0.5)
        make = RemoteEnvFactory(router)
        started = time.monotonic()
        first = make(TEXTCRAFT)  # the first choice waits for both first checks (bounded)
        try:
            assert first.unwrapped.url == good.url and time.monotonic() - started < 2
            assert [host["up"] for host in router.status()] == [True, False]
            time.sleep(0.3)  # past the cooldown: the trickler is checked again, in the background
            for index in range(5):
                started = time.monotonic()
                first.reset(seed=index)
                assert time.monotonic() - started < 0.3 and first.unwrapped.url == good.url
        finally:
            first.close()


@pytest.mark.parametrize("lie, reply", [
    ("not a JSON object", (200, b"<html>a proxy's page</html>")),
    ("'reward' is not int or float", (200, json.dumps({"observation": "o", "reward": "1", "terminated": False,
                                                       "truncated": False, "info": {}}).encode())),
    ("over the env's 64000", (200, json.dumps({"observation": "x" * 5_000_000, "reward": 0.0, "terminated": False,
                                               "truncated": False, "info": {}}).encode())),
])
def test_a_lying_host_is_a_bad_reply_error(lie: str, reply: tuple[int, bytes]) -> None:
    """docs/server.md's promise on a lying host: an answer that is not the protocol's is a ``BadReplyError``
    (code ``bad_reply``) for that call, never a TypeError or an unchecked 5 MB observation."""
    with FakeHost([TEXTCRAFT]) as liar:
        liar.replies["POST /v1/sessions/s/step"] = reply
        env = RemoteEnv(liar.url, TEXTCRAFT, retries=0)
        try:
            env.reset(seed=0)
            with pytest.raises(BadReplyError, match=lie) as error:
                env.step("inventory")
            assert error.value.code == "bad_reply" and len(str(error.value)) < 500
        finally:
            env.close()


def test_a_lying_host_is_taken_out_and_its_errors_are_bounded(two_servers: Any) -> None:
    """A host whose health record lies (``env_ids: 5``) is down, not a TypeError; one whose reset lies is marked
    down and the episode starts on another host; a 3 MB error detail is cut."""
    _, steady = two_servers
    with FakeHost([TEXTCRAFT]) as liar:
        liar.health["env_ids"] = 5
        router = HostRouter(liar.url, health_timeout=1)
        with pytest.raises(ServerUnavailableError, match="no healthy env server"):
            router.choose(TEXTCRAFT)
        liar.health["env_ids"] = [TEXTCRAFT]
        liar.replies["POST /v1/sessions/s/reset"] = (200, b'{"observation": 7, "info": {}}')
        router = HostRouter(f"{liar.url},{steady.url}", cooldown=30)
        env = RemoteEnvFactory(router)(TEXTCRAFT)  # equal loads: the liar first
        try:
            assert env.unwrapped.url == liar.url
            assert env.reset(seed=0, options={"item_id": 0})[0] and env.unwrapped.url == steady.url
            assert router.status()[0]["up"] is False
        finally:
            env.close()
        del liar.replies["POST /v1/sessions/s/reset"]
        huge = json.dumps({"error": "bad", "detail": "d" * 3_000_000}).encode()
        liar.replies["POST /v1/sessions/s/step"] = (400, huge)
        remote = RemoteEnv(liar.url, TEXTCRAFT, retries=0)
        try:
            remote.reset(seed=0)
            with pytest.raises(RemoteEnvError) as error:
                remote.step("inventory")
            assert len(str(error.value)) < 1200 and "3000000 characters" in str(error.value)
        finally:
            remote.close()
