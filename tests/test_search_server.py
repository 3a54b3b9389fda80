"""The retrieval server's hardening: caps on a request's work and reply, a bearer token, Host names from the
bind address; and the remote client that keeps within the caps and sends the token. Loopback only."""

from __future__ import annotations

import time

import gymnasium as gym
import pytest

pytest.importorskip("bm25s")
server_module = pytest.importorskip("agentgym_envs.search.server")  # the [server] extra
httpx = pytest.importorskip("httpx")

import agentgym_envs  # noqa: E402,F401  (registers the ids)
from agentgym_envs.search.embedded import embedded_data  # noqa: E402
from agentgym_envs.search.retrievers import (MAX_HITS, MAX_QUERIES, TOKEN_ENV_VAR, RemoteRetriever,  # noqa: E402
                                             RetrievalError, get_retriever, request_chunks)

RetrievalServer = server_module.RetrievalServer


@pytest.fixture(scope="module")
def local():
    return get_retriever("bm25", embedded_data().corpus)


def _titles(count: int) -> list[str]:
    documents = embedded_data().corpus.documents
    return [documents[i % len(documents)].title for i in range(count)]


def test_many_queries_are_refused_quickly_with_a_small_reply(local) -> None:
    with RetrievalServer(local) as server:
        for queries, topk in ((["a"] * 20000, 100), (["a"] * (MAX_QUERIES + 1), 1),
                              (["a"] * (MAX_HITS // 10 + 1), 10)):
            started = time.monotonic()
            answer = httpx.post(server.url, json={"queries": queries, "topk": topk}, timeout=10)
            assert time.monotonic() - started < 5
            assert answer.status_code == 422 and len(answer.content) < 4096
            assert set(answer.json()) == {"error", "detail"}
        full = httpx.post(server.url, json={"queries": _titles(MAX_HITS // 10), "topk": 10}, timeout=30)
        assert full.status_code == 200 and len(full.json()["result"]) == MAX_HITS // 10


def test_a_reply_over_the_response_cap_is_refused(local) -> None:
    with RetrievalServer(local, max_response_bytes=2000) as server:
        answer = httpx.post(server.url, json={"queries": _titles(5), "topk": 5}, timeout=10)
        assert answer.status_code == 413 and answer.json()["error"] == "response_too_large"
        assert httpx.post(server.url, json={"queries": ["zzzz-nothing"], "topk": 1}, timeout=10).status_code == 200


def test_the_client_splits_a_large_batch_within_the_caps(local) -> None:
    chunks = request_chunks(3000, 7)
    assert all(stop - start <= MAX_QUERIES and (stop - start) * 7 <= MAX_HITS for start, stop in chunks)
    assert request_chunks(0, 3) == [] and request_chunks(5, 3) == [(0, 5)]
    queries = _titles(MAX_QUERIES * 2 + 3)
    with RetrievalServer(local) as server:
        remote = RemoteRetriever(server.url, timeout=30)
        try:
            got = remote.search_batch(queries, 10)
        finally:
            remote.close()
    expected = local.search_batch(queries, 10)
    assert [[hit.doc.id for hit in hits] for hits in got] == [[hit.doc.id for hit in hits] for hits in expected]


def test_a_token_is_required_when_the_server_has_one(local, monkeypatch) -> None:
    monkeypatch.delenv(TOKEN_ENV_VAR, raising=False)
    body = {"queries": _titles(1), "topk": 2}
    with RetrievalServer(local, token="s3cret") as server:
        assert httpx.post(server.url, json=body, timeout=10).status_code == 401
        wrong = httpx.post(server.url, json=body, headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401 and wrong.json()["error"] == "unauthorized"
        right = httpx.post(server.url, json=body, headers={"Authorization": "Bearer s3cret"}, timeout=10)
        assert right.status_code == 200
        with pytest.raises(RetrievalError, match="401"):
            RemoteRetriever(server.url, timeout=5).search("x")
        assert RemoteRetriever(server.url, timeout=5, token="s3cret").search(_titles(1)[0], 2)
        monkeypatch.setenv(TOKEN_ENV_VAR, "s3cret")
        assert RemoteRetriever(server.url, timeout=5).search(_titles(1)[0], 2)
        monkeypatch.delenv(TOKEN_ENV_VAR)
        env = gym.make("AgentGym/Search-NQ-v0", retriever="remote", retriever_url=server.url, retriever_timeout=5,
                       retriever_token="s3cret")
        try:
            env.reset(seed=0, options={"split": "test", "index": 0})
            obs, *_, info = env.step("<search>anything</search>")
            assert obs.startswith("<information>") and "retrieval_error" not in info
        finally:
            env.close()


def test_the_bound_address_is_an_accepted_host() -> None:
    retriever = get_retriever("bm25", embedded_data().corpus)
    with RetrievalServer(retriever, host="127.0.0.2") as server:
        assert server.url.startswith("http://127.0.0.2:")
        answer = httpx.post(server.url, json={"queries": ["x"], "topk": 1}, timeout=10)  # Host: 127.0.0.2:<port>
        assert answer.status_code == 200
        foreign = httpx.post(server.url, json={"queries": ["x"], "topk": 1}, headers={"Host": "rebind.evil.example"},
                             timeout=10)
        assert foreign.status_code == 400 and foreign.json()["error"] == "host_not_allowed"


def test_the_command_refuses_a_non_loopback_bind_without_a_token(monkeypatch, capsys) -> None:
    monkeypatch.delenv(TOKEN_ENV_VAR, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        server_module.main(["--host", "10.0.0.5"])  # refused before anything is bound
    assert exit_info.value.code == 2 and TOKEN_ENV_VAR in capsys.readouterr().err
