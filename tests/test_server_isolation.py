"""What one client of the env server can reach of another's, and what a web page can reach at all.

* /v1 session keys are random and never listed or echoed: a key is its client's credential;
* AgentGym's integer ids reach envs made by ``/create`` only, and, without a token, loopback clients only;
* a foreign ``Host`` (DNS rebinding) and cross-origin browser requests are refused;
* a rejected reset keeps the episode in progress, on a served env as on a local one.
"""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from agentgym_envs.server.app import LocalServer, create_app  # noqa: E402

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"


@pytest.fixture(scope="module")
def server() -> LocalServer:
    with LocalServer("textcraft") as running:
        yield running


def test_session_keys_are_random_unlisted_and_never_echoed(server: LocalServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        health = client.get("/v1/health").json()
        keys = [client.post("/v1/sessions", json={"env_id": TEXTCRAFT}).json()["session"] for _ in range(3)]
        try:
            assert len(set(keys)) == 3
            for key in keys:
                assert len(key) >= 20 and health["server_id"] not in key, key
            listed = client.get("/v1/sessions")
            assert listed.status_code == 200 and len(listed.json()) >= 3
            for key in keys:
                assert key not in listed.text
            assert all("session" not in row and "id" not in row and "observation" not in row for row in listed.json())
            # guesses built from what any client sees get one answer that helps no further guess
            guesses = [f"{health['server_id']}-0", f"{health['server_id']}-1", f"{health['server_id']}--1",
                       keys[0][:-1] + ("A" if keys[0][-1] != "A" else "B"), "0", "x" * 300]
            for guess in guesses:
                for method, path in (("GET", ""), ("POST", "/step"), ("POST", "/reset"), ("DELETE", "")):
                    body = {"action": "inventory"} if path == "/step" else None
                    answer = client.request(method, f"/v1/sessions/{guess}{path}", json=body)
                    assert answer.status_code == 404 and answer.json()["error"] == "unknown_session", answer.text
                    assert health["server_id"] not in answer.text and guess[:12] not in answer.text
                    assert "earlier run" not in answer.text
            for key in keys:  # the sessions are untouched
                assert client.get(f"/v1/sessions/{key}").json()["episode_active"] is False
        finally:
            for key in keys:
                client.delete(f"/v1/sessions/{key}")


def test_agentgym_ids_reach_envs_made_by_create_only(server: LocalServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        created = client.post("/v1/sessions", json={"env_id": TEXTCRAFT}).json()
        assert "id" not in created
        key = created["session"]
        try:
            client.post(f"/v1/sessions/{key}/reset", json={"options": {"split": "test", "index": 0}})
            number = server.manager.lookup(key).number
            for path, body in (("/step", {"id": number, "action": "inventory"}),
                               ("/reset", {"id": number, "data_idx": 0}), ("/close", {"id": number})):
                answer = client.post(path, json=body)
                assert answer.status_code == 404 and answer.json()["error"] == "unknown_session", (path, answer.text)
            assert client.get("/observation", params={"id": number}).status_code == 404
            assert client.get(f"/v1/sessions/{key}").json()["episode_active"] is True
            # AgentGym's own clients keep working, by integer id
            upstream = client.post("/create", json={}).json()["id"]
            assert client.post("/reset", json={"id": upstream, "data_idx": 0}).status_code == 200
            assert client.post("/step", json={"id": upstream, "action": "inventory"}).status_code == 200
            assert client.post("/close", json={"id": upstream}).json()["closed"] is True
        finally:
            client.delete(f"/v1/sessions/{key}")


def _asgi(app: object, method: str, path: str, client: tuple[str, int], **kwargs: object) -> httpx.Response:
    """One request to ``app`` as if from ``client`` (an address, port), without a socket."""

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as asgi:
            return await asgi.request(method, path, **kwargs)

    return asyncio.run(run())


def test_agentgym_routes_answer_other_machines_only_with_a_token() -> None:
    open_app = create_app("textcraft")
    remote, local = ("10.1.2.3", 40000), ("127.0.0.1", 40000)
    refused = _asgi(open_app, "POST", "/create", remote, json={})
    assert refused.status_code == 403 and refused.json()["error"] == "loopback_only"
    assert _asgi(open_app, "POST", "/step", remote, json={"id": 0, "action": "x"}).status_code == 403
    assert _asgi(open_app, "GET", "/v1/health", remote).status_code == 200  # /v1 keys are unguessable
    assert _asgi(open_app, "POST", "/create", local, json={}).status_code == 200
    open_app.state.manager.shutdown()
    with_token = create_app("textcraft", token="s3cret", host="0.0.0.0")
    headers = {"Authorization": "Bearer s3cret"}
    assert _asgi(with_token, "POST", "/create", remote, json={}, headers=headers).status_code == 200
    assert _asgi(with_token, "POST", "/create", remote, json={}).status_code == 401
    with_token.state.manager.shutdown()


def test_web_pages_and_foreign_host_names_are_refused(server: LocalServer) -> None:
    live = server.manager.metrics()["live_envs"]
    # a page on evil.example posting a CORS "simple" request (no preflight)
    for body in (b"", b'{"env_id": "AgentGym/TextCraft-Depth1-v0"}'):
        answer = httpx.post(f"{server.url}/create", content=body,
                            headers={"content-type": "text/plain", "origin": "http://evil.example"})
        assert answer.status_code == 403 and answer.json()["error"] == "cross_origin", answer.text
    answer = httpx.post(f"{server.url}/v1/sessions", json={}, headers={"sec-fetch-site": "cross-site"})
    assert answer.status_code == 403
    # DNS rebinding: evil.example re-pointed at 127.0.0.1, the page's requests name evil.example as Host
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example"):
        answer = httpx.get(f"{server.url}/v1/health", headers={"host": host})
        assert answer.status_code == 400 and answer.json()["error"] == "host_not_allowed", (host, answer.text)
        assert httpx.post(f"{server.url}/create", json={}, headers={"host": host}).status_code == 400
    assert server.manager.metrics()["live_envs"] == live
    # the server's own address, loopback names and same-origin pages (/docs) work
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "localhost"):
        assert httpx.get(f"{server.url}/v1/health", headers={"host": host}).status_code == 200
    same_origin = httpx.get(f"{server.url}/v1/health", headers={"origin": server.url})
    assert same_origin.status_code == 200


def test_allowed_hosts_and_origins_are_configurable() -> None:
    app = create_app("textcraft", allowed_hosts=["envs.lab.internal"], allowed_origins=["http://dash.lab.internal"])
    local = ("127.0.0.1", 40000)
    assert _asgi(app, "GET", "/v1/health", local, headers={"host": "envs.lab.internal:8000"}).status_code == 200
    assert _asgi(app, "GET", "/v1/health", local, headers={"host": "other.internal"}).status_code == 400
    assert _asgi(app, "GET", "/v1/health", local, headers={"origin": "http://dash.lab.internal"}).status_code == 200
    assert _asgi(app, "GET", "/v1/health", local, headers={"origin": "http://evil.example"}).status_code == 403
    app.state.manager.shutdown()


def test_a_rejected_reset_keeps_the_episode_remote_as_local(server: LocalServer) -> None:
    local = gym.make(TEXTCRAFT)
    remote = gym.make("AgentGym/Remote-v0", url=server.url, env_id=TEXTCRAFT)
    try:
        turns = []
        for env in (local, remote):
            env.reset(seed=0, options={"split": "test", "index": 0})
            env.step("inventory")
            with pytest.raises(ValueError):
                env.reset(options={"item_id": 10**9})
            _, _, _, _, info = env.step("inventory")  # the episode goes on
            turns.append(info["turn"])
        assert turns == [2, 2]
    finally:
        local.close()
        remote.close()
