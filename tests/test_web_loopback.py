"""The embedded sites' server (``web/loopback.py``): loopback Host names only, and a body cap counted as it streams."""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from agentgym_envs.web.loopback import MAX_BODY_BYTES, LoopbackServer  # noqa: E402

EXTRA = 3 * 2**20  # a few MB over the cap


@pytest.fixture
def site():
    seen: list[int] = []

    async def echo(request: Request) -> PlainTextResponse:
        body = await request.body()
        seen.append(len(body))
        return PlainTextResponse(str(len(body)))

    server = LoopbackServer(Starlette(routes=[Route("/", echo, methods=["GET", "POST"])]), name="test-site")
    server.seen = seen
    yield server
    server.shutdown()


def _raw(site: LoopbackServer, head: bytes, body_chunks=(), timeout: float = 10.0) -> bytes:
    """Send ``head`` then ``body_chunks`` from a thread while reading the answer here (at most 64 kB)."""
    parts = urlsplit(site.base_url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)

    def send_body() -> None:
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except OSError:
            pass  # the server refused and closed: expected

    try:
        sock.sendall(head)
        sender = threading.Thread(target=send_body, daemon=True)
        sender.start()
        answer = b""
        deadline = time.monotonic() + timeout
        while not _complete(answer) and len(answer) < 65536 and time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:  # the server refused mid-body and closed: what arrived is the answer
                break
            if not data:
                break
            answer += data
        sender.join(timeout)
        return answer
    finally:
        sock.close()


def _complete(answer: bytes) -> bool:
    """Whether ``answer`` holds the headers and as much body as their Content-Length says."""
    head, separator, body = answer.partition(b"\r\n\r\n")
    if not separator:
        return False
    lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    return len(body) >= int(lengths[0]) if lengths else False


def _port(site: LoopbackServer) -> int:
    return urlsplit(site.base_url).port


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_loopback_host_names_are_answered(site, host: str) -> None:
    answer = _raw(site, f"GET / HTTP/1.1\r\nHost: {host}:{_port(site)}\r\nConnection: close\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("host", ["rebind.evil.example", "rebind.evil.example:80", "10.0.0.5"])
def test_a_foreign_host_is_refused(site, host: str) -> None:
    answer = _raw(site, f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 400")
    assert b"host_not_allowed" in answer
    assert site.seen == []


def test_a_declared_body_over_the_cap_is_refused_before_it_is_sent(site) -> None:
    size = MAX_BODY_BYTES + EXTRA
    head = f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{_port(site)}\r\nContent-Length: {size}\r\n\r\n".encode()
    started = time.monotonic()
    answer = _raw(site, head)
    assert answer.startswith(b"HTTP/1.1 413")
    assert time.monotonic() - started < 5
    assert site.seen == []


def test_a_chunked_body_over_the_cap_is_counted_and_refused(site) -> None:
    chunk = b"x" * 2**16
    framed = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    count = (MAX_BODY_BYTES + EXTRA) // len(chunk)
    head = f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{_port(site)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    answer = _raw(site, head, [framed] * count + [b"0\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 413")
    assert site.seen == []


def test_a_body_under_the_cap_reaches_the_site(site) -> None:
    body = b"a=1&b=2" * 1000
    head = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{_port(site)}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    answer = _raw(site, head + body)
    assert answer.startswith(b"HTTP/1.1 200")
    assert site.seen == [len(body)]
