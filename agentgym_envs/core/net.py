"""HTTP rules for every client that talks to a configured server (an OpenAI-compatible endpoint, a
retrieval server, an env server).

Redirects are never followed: a client that follows one copies the request's headers,
``Authorization`` included, to wherever the ``Location`` points, so a server (or whoever answers in
its place) could collect the API key that way. These clients only ever talk to the URL they were
given (httpx's default); a 3xx answer is an error, and ``redirect_hint`` says what to do. A loopback
server is reached directly, never through the environment's proxies (``is_loopback``).

A request has a deadline for the whole of it (``deadline_transport`` and ``deadline``): httpx's
timeouts bound each read, so a server that trickles its answer a byte at a time would hold a client
(and a health check) for as long as it likes.
"""

from __future__ import annotations

import contextlib
import ipaddress
import threading
import time
from collections.abc import Iterator
from typing import Any


def redirect_hint(response: Any) -> str:
    """For a 3xx answer (an ``httpx.Response``): where it pointed and that it was not followed; else ''."""
    if response is None or not 300 <= response.status_code < 400:
        return ""
    location = response.headers.get("location", "?")
    return (f" (a redirect to {location}; redirects are not followed so credentials stay with the configured "
            "host: use the final URL)")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP address) is this machine: ``localhost`` or a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def replaying_receive(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that hands the app a body already read (and checked) by a guard, then passes the
    connection's own messages (a disconnect) through."""
    delivered = False

    async def replay() -> dict:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


# ---- a deadline for the whole request ------------------------------------------------------------------
_DEADLINE = threading.local()  # per thread: a pooled connection is read by the thread whose request it carries


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Requests made inside the block on a ``deadline_transport`` end within ``seconds`` from now, connect to last
    byte (``httpx.ConnectTimeout`` / ``ReadTimeout`` / ``WriteTimeout`` after it); blocks nest (the sooner wins)."""
    previous = getattr(_DEADLINE, "at", None)
    at = None if seconds is None else time.monotonic() + max(0.0, float(seconds))
    _DEADLINE.at = at if previous is None else previous if at is None else min(at, previous)
    try:
        yield
    finally:
        _DEADLINE.at = previous


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` shortened to what is left of the thread's deadline (``error`` once it has passed)."""
    at = getattr(_DEADLINE, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """An httpcore network stream whose reads and writes never outlast the thread's deadline."""

    def __init__(self, stream: Any, httpcore: Any):
        self._stream, self._httpcore = stream, httpcore

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, self._httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, self._httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        stream = self._stream.start_tls(ssl_context, server_hostname, _left(timeout, self._httpcore.ConnectTimeout))
        return _DeadlineStream(stream, self._httpcore)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend:
    """httpcore's network backend, with ``_DeadlineStream`` connections."""

    def __init__(self, backend: Any, httpcore: Any):
        self._backend, self._httpcore = backend, httpcore

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> _DeadlineStream:
        stream = self._backend.connect_tcp(host, port, _left(timeout, self._httpcore.ConnectTimeout), local_address,
                                           socket_options)
        return _DeadlineStream(stream, self._httpcore)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        stream = self._backend.connect_unix_socket(path, _left(timeout, self._httpcore.ConnectTimeout),
                                                   socket_options)
        return _DeadlineStream(stream, self._httpcore)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def deadline_transport(**settings: Any) -> Any:
    """An ``httpx.HTTPTransport`` (``settings`` are its arguments) whose requests keep the ``deadline`` of the
    thread that makes them.

    httpx has no deadline for a whole request; its connection pool (httpcore) takes a network backend, which
    this wraps. ``tests/test_hosts.py`` holds a trickling server to it, so an httpx release that moves the
    pool fails there.
    """
    import httpcore
    import httpx

    transport = httpx.HTTPTransport(**settings)
    pool = transport._pool  # httpcore's ConnectionPool (or its proxy subclass): where the backend lives
    pool._network_backend = _DeadlineBackend(pool._network_backend, httpcore)
    return transport
