"""The env server and ``RemoteEnv``: protocol, conformance, fuzzing, load and faults.

Every server here listens on 127.0.0.1 only: in-process (``LocalServer``, a thread) where the test
needs to reach inside, or an ``agentgym serve`` subprocess where it needs to kill or restart it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
requests = pytest.importorskip("requests")

import agentgym_envs  # noqa: E402
from agentgym_envs import testing  # noqa: E402
from agentgym_envs.core import TextSpace  # noqa: E402
from agentgym_envs.core import tasks as task_table  # noqa: E402
from agentgym_envs.server.app import LocalServer, create_app  # noqa: E402
from agentgym_envs.server.client import (  # noqa: E402
    _POOL,
    EnvCrashedError,
    RemoteEnv,
    RemoteResetNeeded,
    ServerBusyError,
    ServerUnavailableError,
    SessionLostError,
)
from agentgym_envs.server.sessions import jsonable  # noqa: E402
from agentgym_envs.sciworld.catalog import agentgym_data_idx  # noqa: E402

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"
ORACLE_STEPS = 40
FAMILY_STEPS = 10  # per-family checks: enough turns to compare, few enough for slow engines


def first_id_per_family() -> list[str]:
    """One id per family whose extra is installed (the family-wide id where there is one)."""
    seen: dict[str, str] = {}
    for spec in agentgym_envs.list_tasks():
        if spec.family not in seen and spec.extra_installed():
            seen[spec.family] = spec.env_id
    return list(seen.values())


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen | None = None, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            return httpx.get(f"{url}/v1/health", timeout=1.0).json()
        except httpx.TransportError:
            time.sleep(0.1)
    raise TimeoutError(f"no server at {url} after {timeout} s")


@contextlib.contextmanager
def server_process(port: int, *options: str, env: str = "textcraft") -> Iterator[tuple[subprocess.Popen, Any]]:
    """``agentgym serve`` in a subprocess; yields the process and its log file."""
    log = tempfile.TemporaryFile(mode="w+")
    command = [sys.executable, "-m", "agentgym_envs.cli", "serve", "--env", env, "--port", str(port), *options]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process)
        yield process, log
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        log.close()


def read_log(log: Any) -> str:
    log.seek(0)
    return log.read()


def local_action(env: gym.Env, step: int) -> str:
    """The next action from the local twin: its oracle, else a seeded random action."""
    return testing.expert_or_random(env, step)


@pytest.fixture(scope="module")
def textcraft_server() -> Iterator[LocalServer]:
    with LocalServer("textcraft", max_envs=512) as server:
        yield server


# ---- a client written to AgentGym's documented protocol ----------------------------------------
def sent_by_agentgym_client(family: str, response: str) -> str:
    """What the family's AgentGym client (``agentenv/envs/*.py``, ``step``) sends ``/step`` for a model
    response: TextCraft's and BabyAI's the rest of the last ``Action:`` line, letters, digits and commas
    kept; SciWorld's, ALFWorld's and WebShop's the text after the last ``Action:`` (WebShop's, without one, the
    response if it holds ``search[`` or ``click[``); the others the response."""
    if family in ("textcraft", "babyai"):
        found = re.findall(r"Action:\s*(.*?)(?=\n|$)", response, re.DOTALL)
        return " ".join(re.sub(r"[^A-Za-z0-9, ]+", "", found[-1] if found else "").split())
    if family in ("sciworld", "alfworld", "webshop"):
        if "Action:" not in response:
            return response.strip() if family == "webshop" and ("search[" in response or "click[" in response) else ""
        return response.rpartition("Action:")[2].strip()
    return response


class AgentGymProtocolClient:
    """What AgentGym's ``BaseEnvClient`` subclasses do: plain ``requests`` calls, the id in every body.

    ``create_args`` is sent as the ``/create`` body the way AgentGym's TextCraft client sends its
    extras; without it ``/create`` has no body, like AgentGym's BabyAI client.
    """

    def __init__(self, env_server_base: str, timeout: float = 30, **create_args: Any):
        self.base, self.timeout = env_server_base, timeout
        created = requests.post(f"{self.base}/create", json=create_args or None, timeout=timeout)
        assert created.status_code == 200, created.text
        self.env_id = created.json()["id"]

    def _post(self, path: str, data: dict[str, Any]) -> dict[str, Any]:
        data["id"] = self.env_id
        response = requests.post(f"{self.base}/{path}", json=data, timeout=self.timeout)
        assert response.status_code == 200, response.text
        return response.json()

    def observe(self) -> str:
        response = requests.get(f"{self.base}/observation?id={self.env_id}", timeout=self.timeout)
        assert response.status_code == 200, response.text
        return response.json()

    def reset(self, data_idx: int) -> dict[str, Any]:
        return self._post("reset", {"data_idx": data_idx})

    def step(self, action: str) -> dict[str, Any]:
        return self._post("step", {"action": action})

    def close(self) -> dict[str, Any]:
        return self._post("close", {})


@pytest.mark.parametrize("env_id", first_id_per_family())
def test_agentgym_protocol_client_plays_the_same_episode_as_the_local_env(env_id: str) -> None:
    spec = agentgym_envs.get_task(env_id)
    item = spec.split("test")[0]
    with LocalServer(spec.family) as server:
        # extra create fields (AgentGym's TextCraft client sends some) are ignored
        client = AgentGymProtocolClient(server.url, env_id=env_id, minecraft_dir="ignored", goal=None)
        local = gym.make(env_id)
        try:
            local_obs, _ = local.reset(seed=0, options={"item_id": item})
            reset = client.reset(agentgym_data_idx(item) if spec.family == "sciworld" else item)
            # AgentGym's SciWorld client joins the task description and the first look itself
            shown = "\n".join(reset[key] for key in ("task_description", "observation") if key in reset)
            if spec.family == "alfworld":  # AgentGym's ALFWorld client appends the action list itself
                shown += "\nAVAILABLE ACTIONS: " + ",".join(reset["available_actions"])
            if spec.family == "maze":  # LMRL-Gym's Maze client puts its own copy of the rules first
                from agentgym_envs.maze.env import FIRST_OBSERVATION

                shown = FIRST_OBSERVATION + "\n" + shown
            assert shown == local_obs and reset["done"] is False and reset["reward"] == 0
            assert client.observe() == local_obs
            remote_return = local_return = 0.0
            for step in range(FAMILY_STEPS):
                action = local_action(local, step)
                local_obs, reward, terminated, truncated, info = local.step(action)
                reply = client.step(sent_by_agentgym_client(spec.family, action))
                assert reply["observation"] == local_obs and reply["reward"] == pytest.approx(reward)
                assert reply["done"] == (terminated or truncated) and reply["valid_action"] == info["valid_action"]
                remote_return, local_return = remote_return + reply["reward"], local_return + reward
                if reply["done"]:
                    break
            assert client.observe() == local_obs and remote_return == pytest.approx(local_return)
            assert reply["success"] == info["success"] and reply["score"] == pytest.approx(info["score"])
            assert client.close() == {"id": client.env_id, "closed": True}
            gone = requests.post(f"{server.url}/step", json={"id": client.env_id, "action": "inventory"}, timeout=10)
            assert gone.status_code == 410 and gone.json()["error"] == "session_closed"
        finally:
            local.close()
        assert server.manager.metrics()["live_envs"] == 0


def test_agentgym_client_solves_textcraft_with_the_default_id(textcraft_server: LocalServer) -> None:
    """``/create`` without a body gives the server's first id (here the family-wide TextCraft-v0)."""
    client = AgentGymProtocolClient(textcraft_server.url)
    item = agentgym_envs.get_task("AgentGym/TextCraft-Depth3-v0").split("test")[0]
    assert client.reset(item) == client.reset(item)  # the same data_idx gives the same episode
    local = gym.make("AgentGym/TextCraft-v0")
    local.reset(seed=0, options={"item_id": item})
    try:
        for _ in range(ORACLE_STEPS):  # the expert's responses, sent the way AgentGym's client would
            action = local.unwrapped.oracle_action()
            local.step(action)
            reply = client.step(sent_by_agentgym_client("textcraft", action))
            if reply["done"]:
                break
    finally:
        local.close()
    assert reply["done"] and reply["success"] is True and reply["reward"] == 1.0
    client.close()


# ---- /v1 and RemoteEnv --------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", first_id_per_family())
def test_remote_env_returns_the_full_step_result_of_the_local_env(env_id: str) -> None:
    spec = agentgym_envs.get_task(env_id)
    with LocalServer(spec.family) as server:
        remote = gym.make("AgentGym/Remote-v0", url=server.url, env_id=env_id)
        local = gym.make(env_id)
        try:
            item = spec.split("test")[0]
            local_trace: list[tuple] = []
            remote_trace = testing.play(remote, item, local_twin_policy(local, item, local_trace), FAMILY_STEPS)
            assert remote_trace == [tuple(jsonable(list(entry))) for entry in local_trace]
            assert remote.unwrapped.env_id == env_id and remote.unwrapped.server_id == server.manager.server_id
        finally:
            remote.close()
            local.close()
        assert server.manager.metrics()["live_envs"] == 0


def local_twin_policy(local: gym.Env, item: int, trace: list[tuple]):
    """A policy for the remote env that plays the local env's expert in lockstep, recording the local episode."""
    obs, info = local.reset(seed=0, options={"item_id": item})
    trace.append((obs, 0.0, False, False, testing._stable(info)))

    def policy(remote: gym.Env, step: int) -> str:
        action = testing.expert_or_random(local, step)
        obs, reward, terminated, truncated, info = local.step(action)
        trace.append((obs, reward, terminated, truncated, testing._stable(info)))
        return action

    return policy


@pytest.fixture
def remote_textcraft_id(textcraft_server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A temporary id whose entry point is RemoteEnv on a TextCraft task, for the public conformance checks."""
    remote_id = "AgentGym/RemoteTextCraft-Depth1-v0"
    spec = agentgym_envs.get_task(TEXTCRAFT)
    monkeypatch.setitem(task_table._TASKS, remote_id, dataclasses.replace(spec, env_id=remote_id))
    gym.register(id=remote_id, entry_point="agentgym_envs.server.client:RemoteEnv", max_episode_steps=spec.max_turns,
                 kwargs={"url": textcraft_server.url, "env_id": TEXTCRAFT})
    try:
        yield remote_id
    finally:
        del gym.registry[remote_id]


def test_remote_env_passes_the_public_conformance_checks(remote_textcraft_id: str,
                                                         textcraft_server: LocalServer) -> None:
    """check_env, determinism, bad and foreign actions, close twice, flat memory: all over HTTP."""
    before = textcraft_server.manager.metrics()["live_envs"]
    testing.check_text_env(remote_textcraft_id, memory_resets=60)
    assert textcraft_server.manager.metrics()["live_envs"] == before


def test_remote_env_contract_details(textcraft_server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    env = gym.make("AgentGym/Remote-v0", url=textcraft_server.url, env_id=TEXTCRAFT, render_mode="ansi")
    try:
        assert env.spec.max_episode_steps == 30  # the served env's cap, as the local id's TimeLimit
        assert isinstance(env.observation_space, TextSpace) and env.action_space.max_length == 16_000
        with pytest.raises(gym.error.ResetNeeded):
            env.step("inventory")
        obs, info = env.reset(seed=0, options={"split": "test", "index": 0})
        assert info["split"] == "test" and info["instruction"] and obs.startswith("Crafting commands:")
        with pytest.raises(ValueError, match="unknown reset options"):
            env.reset(options={"item": 3})
        with pytest.raises(ValueError, match="out of range"):
            env.reset(options={"split": "test", "index": 10**9})
        env.reset(seed=0, options={"split": "test", "index": 0})
        env.step("Thought: look.\nAction: inventory")
        assert env.render().startswith("> Thought: look.")
        with pytest.raises(TypeError):
            env.step(3)  # type: ignore[arg-type]
        for turn in range(40):  # the served env's TimeLimit (30 turns) truncates
            *_, terminated, truncated, info = env.step("inventory")
            if truncated:
                break
        assert truncated and turn == 28 and info["turn"] == 30
    finally:
        env.close()
    # max_turns sets the served env's cap; max_episode_steps adds a local TimeLimit (shorter wins)
    longer = gym.make("AgentGym/Remote-v0", url=textcraft_server.url, env_id=TEXTCRAFT, max_turns=40)
    shorter = gym.make("AgentGym/Remote-v0", url=textcraft_server.url, env_id=TEXTCRAFT, max_episode_steps=5)
    try:
        assert longer.unwrapped.served_max_turns == 40 and shorter.unwrapped.served_max_turns == 30
        for env, cap in ((longer, 40), (shorter, 5)):
            env.reset(seed=0)
            truncations = [env.step("inventory")[3] for _ in range(cap)]
            assert truncations.index(True) == cap - 1
    finally:
        longer.close()
        shorter.close()
    monkeypatch.delenv("AGENTGYM_SERVER_URL", raising=False)
    with pytest.raises(ValueError, match="AGENTGYM_SERVER_URL"):
        RemoteEnv(env_id=TEXTCRAFT)
    monkeypatch.setenv("AGENTGYM_SERVER_URL", textcraft_server.url)
    RemoteEnv(env_id=TEXTCRAFT).close()
    with pytest.raises(ValueError, match="hosts"):
        RemoteEnv(textcraft_server.url, env_id="AgentGym/NoSuch-v0")


def test_remote_envs_share_one_pooled_client(textcraft_server: LocalServer) -> None:
    envs = [RemoteEnv(textcraft_server.url, env_id=TEXTCRAFT) for _ in range(3)]
    try:
        assert len({id(env._client) for env in envs}) == 1
        for env in envs:
            env.reset(seed=0)
    finally:
        for env in envs:
            env.close()
    assert not [key for key in _POOL if key[0] == textcraft_server.url]


def test_openapi_schema_documents_both_apis(textcraft_server: LocalServer) -> None:
    schema = httpx.get(f"{textcraft_server.url}/openapi.json").json()
    paths = schema["paths"]
    for path in ("/create", "/reset", "/step", "/observation", "/close", "/v1/health", "/v1/metrics", "/v1/envs",
                 "/v1/sessions", "/v1/sessions/{session}/reset", "/v1/sessions/{session}/step"):
        assert path in paths, path
    step = paths["/v1/sessions/{session}/step"]["post"]
    result = step["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert set(schema["components"]["schemas"][result]["properties"]) == {"observation", "reward", "terminated",
                                                                           "truncated", "info"}
    assert {"409", "410", "429", "500"} <= set(step["responses"])
    health = httpx.get(f"{textcraft_server.url}/v1/health").json()
    assert (health["status"] == "ok" and health["default_env_id"] == "AgentGym/TextCraft-v0"
            and TEXTCRAFT in health["env_ids"])
    served = httpx.get(f"{textcraft_server.url}/v1/envs").json()
    assert {"env_id": TEXTCRAFT, "family": "textcraft", "subtask": "Depth1", "max_turns": 30,
            "train_items": 94, "test_items": 31} in served


# ---- errors -------------------------------------------------------------------------------------
def test_bad_requests_get_clear_json_4xx(textcraft_server: LocalServer) -> None:
    url = textcraft_server.url
    key = httpx.post(f"{url}/v1/sessions", json={"env_id": TEXTCRAFT}).json()["session"]
    closed_key = httpx.post(f"{url}/v1/sessions", json={"env_id": TEXTCRAFT}).json()["session"]
    httpx.delete(f"{url}/v1/sessions/{closed_key}")
    number = httpx.post(f"{url}/create", json={"env_id": TEXTCRAFT}).json()["id"]
    closed = httpx.post(f"{url}/create", json={"env_id": TEXTCRAFT}).json()["id"]
    httpx.post(f"{url}/close", json={"id": closed})
    cases = [
        ("POST", "/step", {"json": {"id": 10**9, "action": "inventory"}}, 404, "unknown_session"),
        ("POST", "/step", {"json": {"id": closed, "action": "inventory"}}, 410, "session_closed"),
        ("POST", "/step", {"json": {"id": number}}, 422, "invalid_request"),
        ("POST", "/step", {"json": {"id": "zero", "action": "x"}}, 422, "invalid_request"),
        ("POST", "/step", {"json": {"id": -1, "action": "x"}}, 422, "invalid_request"),
        ("POST", "/step", {"content": b"{not json", "headers": {"content-type": "application/json"}},
         422, "invalid_request"),
        ("POST", "/step", {"json": [1, 2, 3]}, 422, "invalid_request"),
        ("POST", "/step", {"json": {"id": number, "action": "inventory"}}, 409, "reset_needed"),
        ("POST", "/reset", {"json": {"id": number, "data_idx": 10**6}}, 400, "bad_reset"),
        ("GET", "/observation", {"params": {"id": "x"}}, 422, "invalid_request"),
        ("POST", "/create", {"json": {"env_id": "AgentGym/BabyAI-v0"}}, 404, "env_not_served"),
        ("POST", f"/v1/sessions/{key}/reset", {"json": {"options": {"item": 1}}}, 400, "bad_reset"),
        ("POST", f"/v1/sessions/{key}/reset", {"json": {"seed": -1}}, 422, "invalid_request"),
        ("POST", f"/v1/sessions/{key}/reset", {"json": {"sead": 1}}, 422, "invalid_request"),
        ("POST", f"/v1/sessions/{key}/step", {"json": {"action": "inventory"}}, 409, "reset_needed"),
        ("GET", f"/v1/sessions/{key}/oracle", {}, 409, "reset_needed"),
        ("GET", "/v1/sessions/00000000-3", {}, 404, "unknown_session"),
        ("GET", "/v1/sessions/not-a-key", {}, 404, "unknown_session"),
        ("GET", f"/v1/sessions/{closed_key}", {}, 410, "session_closed"),
        ("POST", "/v1/sessions", {"json": {"env_id": "nope"}}, 404, "env_not_served"),
        ("POST", "/v1/sessions", {"json": {"max_turns": 0}}, 422, "invalid_request"),
        ("GET", "/no/such/route", {}, 404, "not_found"),
        ("PUT", "/step", {}, 405, "method_not_allowed"),
    ]
    for method, path, kwargs, status, code in cases:
        response = httpx.request(method, f"{url}{path}", timeout=10, **kwargs)
        assert (response.status_code, response.json().get("error")) == (status, code), (
            method, path, response.text[:300])
        assert response.headers["content-type"].startswith("application/json")
        assert len(response.json()["detail"]) > 10, response.text
    assert httpx.get(f"{url}/v1/health").json()["status"] == "ok"
    httpx.delete(f"{url}/v1/sessions/{key}")
    httpx.post(f"{url}/close", json={"id": number})


def test_request_bodies_are_bounded() -> None:
    with LocalServer("textcraft", max_body_bytes=4096) as server:
        number = httpx.post(f"{server.url}/create").json()["id"]
        httpx.post(f"{server.url}/reset", json={"id": number, "data_idx": 0})
        declared = httpx.post(f"{server.url}/step", json={"id": number, "action": "x" * 5000})
        assert declared.status_code == 413 and declared.json()["error"] == "body_too_large"
        assert "4096" in declared.json()["detail"]
        streamed = httpx.post(f"{server.url}/step", content=(b"x" * 1024 for _ in range(6)))  # no Content-Length
        assert streamed.status_code == 413 and streamed.json()["error"] == "body_too_large"
        fits = httpx.post(f"{server.url}/step", json={"id": number, "action": "x" * 3000})
        assert fits.status_code == 200 and fits.json()["valid_action"] is False
        assert server.manager.metrics()["live_envs"] == 1


def test_a_retried_step_is_not_applied_twice(textcraft_server: LocalServer) -> None:
    url = textcraft_server.url
    key = httpx.post(f"{url}/v1/sessions", json={"env_id": TEXTCRAFT}).json()["session"]
    try:
        httpx.post(f"{url}/v1/sessions/{key}/reset", json={"options": {"split": "test", "index": 0}})
        action = httpx.get(f"{url}/v1/sessions/{key}/oracle").json()["action"]
        first = httpx.post(f"{url}/v1/sessions/{key}/step", json={"action": action, "seq": 1}).json()
        again = httpx.post(f"{url}/v1/sessions/{key}/step", json={"action": action, "seq": 1}).json()
        assert again == first and first["info"]["turn"] == 1
        second = httpx.post(f"{url}/v1/sessions/{key}/step", json={"action": "inventory", "seq": 2}).json()
        assert second["info"]["turn"] == 2
    finally:
        httpx.delete(f"{url}/v1/sessions/{key}")


def test_hypothesis_actions_and_options_never_give_5xx(textcraft_server: LocalServer) -> None:
    """Arbitrary text actions and reset options on a live env: 2xx or a clear 4xx, never a 5xx."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    url = textcraft_server.url
    with httpx.Client(base_url=url, timeout=10) as client:
        key = client.post("/v1/sessions", json={"env_id": TEXTCRAFT}).json()["session"]
        json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
        json_values = st.recursive(json_scalars | st.text(),
                                   lambda inner: (st.lists(inner, max_size=3)
                                                  | st.dictionaries(st.text(), inner, max_size=3)),
                                   max_leaves=8)

        @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
        @hypothesis.given(options=st.dictionaries(st.sampled_from(["item_id", "split", "index", "x"]), json_values,
                                                  max_size=3),
                          action=st.text(max_size=300))
        def probe(options: dict, action: str) -> None:
            reset = client.post(f"/v1/sessions/{key}/reset", json={"options": options})
            assert reset.status_code in (200, 400, 422), reset.text
            step = client.post(f"/v1/sessions/{key}/step", json={"action": action})
            assert step.status_code in (200, 409), step.text

        probe()
        client.delete(f"/v1/sessions/{key}")


# ---- schemathesis: fuzz every operation of our OpenAPI schema -----------------------------------
try:
    import schemathesis
    from hypothesis import HealthCheck, settings
    from schemathesis.checks import positive_data_acceptance

    FUZZ_SCHEMA = schemathesis.openapi.from_dict(create_app("textcraft").openapi())
except ImportError:  # schemathesis is in the dev extra
    FUZZ_SCHEMA = None

if FUZZ_SCHEMA is not None:

    @FUZZ_SCHEMA.parametrize()
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    def test_schemathesis_fuzzing_finds_no_server_errors(case: Any, textcraft_server: LocalServer) -> None:
        """Every default check (no 5xx, responses match the schema, invalid data rejected, Allow headers).

        ``positive_data_acceptance`` is left out: schema-valid bodies can still name an item that
        does not exist or an env that is closed, and those are rightly answered with 400 / 410.
        """
        case.call_and_validate(base_url=textcraft_server.url, excluded_checks=[positive_data_acceptance])

else:

    def test_schemathesis_fuzzing_finds_no_server_errors() -> None:
        pytest.skip("needs schemathesis: pip install 'agentgym-rl[dev]'")


# ---- capacity, idle reaping, vanished clients ---------------------------------------------------
def test_live_env_cap_gives_429_until_one_is_closed() -> None:
    with LocalServer("textcraft", max_envs=2) as server:
        first, second = (httpx.post(f"{server.url}/create").json()["id"] for _ in range(2))
        refused = httpx.post(f"{server.url}/create")
        assert refused.status_code == 429 and refused.json()["error"] == "too_many_envs"
        assert refused.headers["retry-after"] == "1" and "--max-envs" in refused.json()["detail"]
        with pytest.raises(ServerBusyError, match="maximum of 2 envs"):
            RemoteEnv(server.url, retries=1, backoff=0.01)
        httpx.post(f"{server.url}/close", json={"id": first})
        env = RemoteEnv(server.url, env_id=TEXTCRAFT)
        env.reset(seed=0)
        env.close()
        httpx.post(f"{server.url}/close", json={"id": second})
        metrics = httpx.get(f"{server.url}/v1/metrics").json()
        assert metrics["live_envs"] == 0 and metrics["rejected_full_total"] == 3


def test_envs_of_a_client_that_disappears_are_reaped() -> None:
    with LocalServer("textcraft", idle_timeout=1.5, reap_interval=0.1) as server:
        vanished = [AgentGymProtocolClient(server.url) for _ in range(3)]
        for client in vanished:
            client.reset(0)
            client.step("get 1 acacia logs")
        # a client that dies mid-request: headers promise 1000 bytes, 10 arrive, the socket closes
        with socket.create_connection(("127.0.0.1", server.port)) as raw:
            raw.sendall(b"POST /step HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000\r\n\r\n{\"id\": 0, ")
        remote = RemoteEnv(server.url, env_id=TEXTCRAFT)
        remote.reset(seed=0, options={"item_id": 0})
        deadline = time.monotonic() + 20
        while server.manager.metrics()["live_envs"] and time.monotonic() < deadline:
            time.sleep(0.1)
        metrics = server.manager.metrics()
        assert metrics["live_envs"] == 0 and metrics["reaped_total"] == 4
        gone = requests.post(f"{server.url}/step", json={"id": vanished[0].env_id, "action": "inventory"}, timeout=10)
        assert gone.status_code == 410 and "idle" in gone.json()["detail"]
        with pytest.raises(SessionLostError, match="idle"):
            remote.step("inventory")
        obs, info = remote.reset(seed=0, options={"item_id": 0})  # recovers on a fresh env
        assert info["item_id"] == 0 and remote.step("Action: inventory")[-1]["valid_action"]
        remote.close()
        assert httpx.get(f"{server.url}/v1/health").json()["status"] == "ok"


# ---- faults: a killed engine, a restarted server, shutdown --------------------------------------
class EchoEngineEnv(gym.Env[str, str]):
    """A text env whose engine is a child process (``cat``): killing it is what a dead JVM looks like."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = TextSpace(1000)
        self.action_space = TextSpace(1000)
        self.process: subprocess.Popen | None = None
        self.closed = False

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if self.process is None:
            self.process = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                            bufsize=1)
        return self._ask("hello"), {"engine_pid": self.process.pid}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        reply = self._ask(action.replace("\n", " ")[:200])
        return reply, float(action == "stop"), action == "stop", False, {"engine_pid": self.process.pid}

    def _ask(self, line: str) -> str:
        assert self.process is not None and self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("the echo engine is gone")
        return "echo: " + reply.rstrip("\n")

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                with contextlib.suppress(Exception):
                    stream.close()
            self.process = None
        self.closed = True


@pytest.fixture
def echo_env_id() -> Iterator[str]:
    env_id = "ServerTest/EchoEngine-v0"
    gym.register(id=env_id, entry_point=EchoEngineEnv)
    try:
        yield env_id
    finally:
        del gym.registry[env_id]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(FileNotFoundError):
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    return True


def test_killed_engine_mid_episode_gives_a_clear_error_and_reset_recovers(echo_env_id: str) -> None:
    with LocalServer(echo_env_id) as server:
        env = RemoteEnv(server.url)
        obs, info = env.reset(seed=0)
        assert obs == "echo: hello"
        assert env.step("ping")[0] == "echo: ping"
        first_engine = info["engine_pid"]
        os.kill(first_engine, signal.SIGKILL)
        with pytest.raises(EnvCrashedError, match="crashed during step.*reset to start a new episode"):
            env.step("are you there?")
        with pytest.raises(RemoteResetNeeded):
            env.step("still there?")
        obs, info = env.reset(seed=0)
        assert obs == "echo: hello" and info["engine_pid"] != first_engine
        assert env.step("back")[0] == "echo: back"
        assert not pid_alive(first_engine)

        # killed between episodes: the reset itself recovers on a fresh engine
        os.kill(info["engine_pid"], signal.SIGKILL)
        obs, again = env.reset(seed=0)
        assert obs == "echo: hello" and again["engine_pid"] != info["engine_pid"]

        # the same over AgentGym's protocol: 500 env_crashed, then 409 until reset
        number = httpx.post(f"{server.url}/create").json()["id"]
        httpx.post(f"{server.url}/reset", json={"id": number, "data_idx": 0})
        os.kill(server.manager.get(number).env.unwrapped.process.pid, signal.SIGKILL)
        crashed = httpx.post(f"{server.url}/step", json={"id": number, "action": "x"})
        assert crashed.status_code == 500 and crashed.json()["error"] == "env_crashed"
        assert httpx.post(f"{server.url}/step", json={"id": number, "action": "x"}).json()["error"] == "reset_needed"
        assert httpx.post(f"{server.url}/reset",
                          json={"id": number, "data_idx": 0}).json()["observation"] == "echo: hello"
        metrics = server.manager.metrics()
        assert metrics["crashed_total"] == 3 and metrics["replaced_total"] == 3 and metrics["live_envs"] == 2
        engines = [session.env.unwrapped for session in server.manager.live()]
        env.close()
    assert all(engine.closed and engine.process is None for engine in engines)  # shutdown closed every env


def test_server_restart_while_a_remote_env_is_in_use() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first_item = agentgym_envs.get_task(TEXTCRAFT).split("test")[0]
    with LocalServer("textcraft", port=port):
        env = RemoteEnv(url, env_id=TEXTCRAFT, retries=2, backoff=0.05, timeout=10)
        env.reset(seed=0, options={"item_id": first_item})
        env.step(env.oracle_action())
        old_session = env.session
    # the server restarted between two steps: the session belongs to its earlier run
    with LocalServer("textcraft", port=port):
        with pytest.raises(SessionLostError, match="restarted"):
            env.step("inventory")
        assert env.reset(seed=0, options={"item_id": first_item})[1]["turn"] == 0
        assert env.session != old_session
        env.step(env.oracle_action())
    # the server is down while the episode runs: a clear error, then reset works once it is back
    with pytest.raises(ServerUnavailableError, match="did not answer.*call reset\\(\\) once the server is back"):
        env.step("inventory")
    with server_process(port) as (process, _):
        info = testing.play(env, first_item, testing.expert_or_random, ORACLE_STEPS)[-1][-1]
        assert info["success"]
        env.reset(seed=0, options={"item_id": first_item})
        process.kill()  # killed outright, mid-episode
        process.wait(timeout=30)
        with pytest.raises(ServerUnavailableError):
            env.step("inventory")
    env.close()


def test_graceful_shutdown_closes_every_env() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with server_process(port) as (process, log):
        for item in range(3):
            number = httpx.post(f"{url}/create").json()["id"]
            httpx.post(f"{url}/reset", json={"id": number, "data_idx": item})
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)
        output = read_log(log)
    assert "closed 3 env(s) on shutdown" in output and "Application shutdown complete" in output


# ---- load ----------------------------------------------------------------------------------------
def test_64_concurrent_sessions_without_errors_or_leaks() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sessions, duration = 64, 4.0
    errors: list[str] = []
    episodes = [0] * sessions
    items = agentgym_envs.get_task("AgentGym/TextCraft-v0").split("test")
    start = threading.Barrier(sessions)

    def worker(index: int) -> None:
        try:
            env = RemoteEnv(url, env_id="AgentGym/TextCraft-v0", timeout=30)
            rng = np.random.default_rng(index)
            start.wait(timeout=60)
            stop = time.monotonic() + duration
            while time.monotonic() < stop:
                env.reset(seed=index, options={"item_id": items[int(rng.integers(len(items)))]})
                for _ in range(6):
                    *_, terminated, truncated, _info = env.step(env.random_action(rng))
                    if terminated or truncated:
                        break
                episodes[index] += 1
            env.close()
        except Exception as error:  # collected, so one failure does not hide the others
            start.abort()
            errors.append(f"session {index}: {error!r}")

    with server_process(port, "--max-envs", "64"):
        threads = [threading.Thread(target=worker, args=(index,)) for index in range(sessions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        metrics = httpx.get(f"{url}/v1/metrics").json()
    assert not errors, errors[:5]
    assert all(count > 0 for count in episodes), episodes
    assert metrics["live_envs"] == 0 and metrics["created_total"] == metrics["closed_total"] == sessions
    assert not any(status.startswith("5") for status in metrics["responses_by_status"]), metrics["responses_by_status"]
    assert not [key for key in _POOL if key[0] == url]  # every pooled client was released


def test_serve_command_line() -> None:
    from agentgym_envs.cli import build_parser, main

    args = build_parser().parse_args(["serve", "--env", "textcraft", "--max-envs", "8", "--port", "9001"])
    assert (args.env, args.host, args.port, args.max_envs) == ("textcraft", "127.0.0.1", 9001, 8)
    assert main(["serve", "--env", "NoSuchFamily"]) == 2
