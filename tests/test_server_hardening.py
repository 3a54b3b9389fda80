"""The env server against hostile and careless clients: odd keys, engine errors, silent sockets,
heavy envs, and other machines (token auth).

Every server here listens on 127.0.0.1 (``LocalServer`` in a thread).
"""

from __future__ import annotations

import socket
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from agentgym_envs.server.app import LocalServer, serve  # noqa: E402
from agentgym_envs.server.client import RemoteEnv, RemoteEnvError  # noqa: E402
from agentgym_envs.server.sessions import Session, SessionManager, env_weight  # noqa: E402

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"


def test_odd_session_keys_get_4xx_and_keep_the_connection() -> None:
    with LocalServer("textcraft") as server, httpx.Client(base_url=server.url, timeout=10) as client:
        server_id = client.get("/v1/health").json()["server_id"]
        for key in (f"{server_id}-\u00b2", f"{server_id}-\u1369", f"{server_id}-{'9' * 5000}", f"{server_id}--1",
                    f"{server_id}-\u0661", "-", "%00", "\u202e-1", "x" * 3000):
            response = client.get(f"/v1/sessions/{key}")
            assert response.status_code in (404, 410), (key[:40], response.status_code, response.text[:200])
            assert response.json()["error"] in ("unknown_session", "stale_session")
            assert response.headers.get("connection") != "close"


def test_engine_errors_are_counted_json_500s_and_the_connection_stays_open(monkeypatch: pytest.MonkeyPatch) -> None:
    with LocalServer("textcraft") as server, httpx.Client(base_url=server.url, timeout=10) as client:
        monkeypatch.setattr(SessionManager, "describe", lambda self, session: 1 / 0)
        key = client.post("/v1/sessions", json={"env_id": TEXTCRAFT}).json()["session"]
        response = client.get(f"/v1/sessions/{key}")
        assert response.status_code == 500 and response.json()["error"] == "internal_error"
        assert "ZeroDivisionError" in response.json()["detail"]
        assert response.headers.get("connection") != "close"
        assert client.get("/v1/health").status_code == 200  # same pooled connection
        metrics = client.get("/v1/metrics").json()
        assert metrics["responses_by_status"].get("500") == 1


def test_silent_and_slow_clients_are_dropped() -> None:
    with LocalServer("textcraft", request_timeout=0.5) as server:
        host, port = server.host, server.port
        silent = [socket.create_connection((host, port)) for _ in range(50)]
        slow = socket.create_connection((host, port))
        slow.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        started = time.monotonic()
        assert httpx.get(f"{server.url}/v1/health", timeout=5).status_code == 200
        time.sleep(1.5)
        for connection in [*silent, slow]:
            connection.settimeout(2)
            assert connection.recv(1024) == b"", "the server should have closed an idle connection"
            connection.close()
        assert time.monotonic() - started < 10
        # a client that never finishes its body gets 408
        body = socket.create_connection((host, port))
        body.sendall(b"POST /create HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{")
        body.settimeout(5)
        assert b" 408 " in body.recv(4096).split(b"\r\n")[0]
        body.close()
        assert httpx.get(f"{server.url}/v1/health", timeout=5).status_code == 200


def test_session_cap_counts_engine_weight() -> None:
    assert env_weight("AgentGym/SciWorld-v0") == 8 and env_weight("AgentGym/WebShop-Browser-v0") == 8
    assert env_weight(TEXTCRAFT) == 1 and env_weight("AgentGym/WebShop-v0") == 1
    manager = SessionManager([TEXTCRAFT, "AgentGym/SciWorld-v0"], max_envs=9)
    try:
        # a SciWorld session, without starting a JVM
        manager._sessions[99] = Session(number=99, env_id="AgentGym/SciWorld-v0", max_turns=None, env=None, weight=8)
        manager.create(TEXTCRAFT)
        with pytest.raises(Exception, match="maximum of 9 envs"):
            manager.create(TEXTCRAFT)
        assert manager.metrics()["env_load"] == 9
    finally:
        manager._sessions.pop(99, None)
        manager.shutdown()


def test_token_auth() -> None:
    with LocalServer("textcraft", token="s3cret") as server:
        assert httpx.get(f"{server.url}/v1/health").status_code == 401
        wrong = httpx.post(f"{server.url}/create", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"] == "unauthorized"
        with pytest.raises(RemoteEnvError, match="Authorization"):
            RemoteEnv(server.url, retries=0)
        env = RemoteEnv(server.url, env_id=TEXTCRAFT, token="s3cret")
        try:
            env.reset(seed=0)
        finally:
            env.close()


def test_serve_refuses_other_interfaces_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTGYM_SERVER_TOKEN", raising=False)
    with pytest.raises(SystemExit, match="without authentication"):
        serve("textcraft", host="0.0.0.0", port=0)
