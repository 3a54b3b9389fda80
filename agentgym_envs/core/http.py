"""The HTTP plumbing the project's FastAPI services share: the env server and the search family's
retrieval server both stand on it, so neither imports the other.

* ``RequestGuard``: the ASGI middleware every service puts in front of its routes (Host and Origin
  checks, bearer token, body size and body deadline, JSON 500s);
* ``RequestDeadlineProtocol`` / ``deadline_protocol``: uvicorn's HTTP/1.1 protocol with a deadline for headers;
* ``install_json_errors``: malformed requests, unknown routes and wrong methods as ``{"error", "detail"}`` JSON;
* ``ThreadedServer``: an app on a loopback port in a background thread (tests, notebooks, embedded services).

It needs the ``[server]`` extra.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import socket
import threading
import time
from collections import Counter
from typing import Any

from agentgym_envs.core.extras import require

require("fastapi", extra="server")
require("uvicorn", extra="server")

import anyio  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.exceptions import RequestValidationError  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from starlette.exceptions import HTTPException as StarletteHTTPException  # noqa: E402
from starlette.routing import Match  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402

from agentgym_envs.core.net import is_loopback, replaying_receive  # noqa: E402

#: The services log under the env server's name, as they did when this lived in ``server/app.py``.
logger = logging.getLogger("agentgym.server")

#: Seconds a client may take to send a request's headers (``RequestDeadlineProtocol``) or its body
#: (``RequestGuard``); a client that sends nothing, or a byte at a time, is dropped after this.
DEFAULT_REQUEST_TIMEOUT = 10.0
#: Host names every server accepts besides the address it is bound to.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
_WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")


def host_name(value: str) -> str:
    """The name in a ``Host`` header or an origin's authority, without the port, lower case
    (``[::1]:8000`` -> ``::1``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_ip(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class RequestGuard:
    """ASGI middleware in front of every route.

    * refuses a ``Host`` that is neither the bound address, a loopback name nor one of
      ``allowed_hosts`` (400): a web page whose name was re-pointed at this machine (DNS rebinding)
      reaches nothing; bound to a wildcard address, any IP address is accepted as Host;
    * refuses browser requests from another origin (403): an ``Origin`` header other than the
      server's own (or one of ``allowed_origins``), or ``Sec-Fetch-Site: cross-site``, so a page
      the user visits cannot drive the server, even with a "simple" text/plain POST;
    * without a token, refuses the ``loopback_only_paths`` (the env server's AgentGym-protocol routes,
      which reach envs by guessable integer ids) to clients that are not on loopback (403);
    * refuses bodies over ``max_body_bytes`` (413) and bodies that take longer than
      ``body_timeout`` seconds to arrive (408);
    * with a ``token``, refuses requests without ``Authorization: Bearer <token>`` (401);
    * turns an unexpected exception into a JSON 500 here, inside the app, so it is counted in
      ``statuses`` like every other response and the keep-alive connection stays open (Starlette's
      own 500 handler sits outside all middleware and makes the server drop the connection).
    """

    def __init__(self, app: Any, max_body_bytes: int, statuses: Counter, body_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 token: str | None = None, host: str = "127.0.0.1", allowed_hosts: tuple[str, ...] = (),
                 allowed_origins: tuple[str, ...] = (), loopback_only_paths: frozenset[str] = frozenset()):
        self.app = app
        self.loopback_only_paths = loopback_only_paths
        self.max_body_bytes = max_body_bytes
        self.statuses = statuses
        self.body_timeout = body_timeout
        self._expected_authorization = f"Bearer {token}".encode() if token else None
        self.hosts = frozenset(host_name(name) for name in (*LOOPBACK_HOSTS, host, *allowed_hosts) if name)
        self.any_ip_host = host_name(host) in _WILDCARD_ADDRESSES
        self.origins = frozenset(origin.rstrip("/").lower() for origin in allowed_origins)

    def _refusal(self, scope: dict, headers: dict[bytes, bytes]) -> tuple[int, str, str] | None:
        """(status, code, detail) when the request must not reach the app: wrong Host, cross-origin
        browser request, loopback-only path from another machine without a token."""
        raw_host = headers.get(b"host")
        host = raw_host.decode("latin-1") if raw_host is not None else ""
        if raw_host is not None:
            name = host_name(host)
            if name not in self.hosts and not (self.any_ip_host and _is_ip(name)):
                return (400, "host_not_allowed",
                        "this server does not answer to that Host name (start it with --allowed-host NAME to add one)")
        origin = headers.get(b"origin")
        if origin is not None:
            value = origin.decode("latin-1").rstrip("/").lower()
            same = raw_host is not None and value in (f"http://{host.lower()}", f"https://{host.lower()}")
            if not same and value not in self.origins:
                return (403, "cross_origin", "requests from web pages of other origins are refused")
        elif headers.get(b"sec-fetch-site") in (b"cross-site", b"same-site"):
            return (403, "cross_origin", "requests from web pages of other origins are refused")
        if self._expected_authorization is None and scope.get("path") in self.loopback_only_paths:
            client = scope.get("client") or ("", 0)
            if not is_loopback(str(client[0])):
                return (403, "loopback_only",
                        "AgentGym's protocol (integer env ids) answers this machine only unless the server has a token")
        return None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def counting_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self.statuses[str(message["status"])] += 1
            await send(message)

        try:
            await self._guarded(scope, receive, counting_send)
        except Exception as error:
            logger.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if started:  # the response is half sent: nothing left but to drop the connection
                raise
            await _send_error(counting_send, 500, "internal_error", f"{type(error).__name__}: {error}", close=False)

    async def _guarded(self, scope: dict, receive: Any, counting_send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _send_error(counting_send, *refusal)
            return
        if self._expected_authorization is not None and not secrets.compare_digest(
            headers.get(b"authorization", b""), self._expected_authorization
        ):
            await _send_error(counting_send, 401, "unauthorized", "this server needs the header "
                              "'Authorization: Bearer <token>' (the token it was started with)")
            return

        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _send_error(counting_send, 400, "bad_content_length", "Content-Length must be a whole number")
                return
            if int(declared) > self.max_body_bytes:
                await _send_error(counting_send, 413, "body_too_large", self._too_large(int(declared)))
                return
        body = bytearray()
        with anyio.move_on_after(self.body_timeout) as slow:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client went away before sending its body
                body += message.get("body", b"")
                if len(body) > self.max_body_bytes:
                    await _send_error(counting_send, 413, "body_too_large", self._too_large(len(body)))
                    return
                if not message.get("more_body", False):
                    break
        if slow.cancelled_caught:
            await _send_error(counting_send, 408, "request_timeout",
                              f"the request body did not arrive within {self.body_timeout:g} s")
            return
        await self.app(scope, replaying_receive(bytes(body), receive), counting_send)

    def _too_large(self, size: int) -> str:
        return f"the request body has {size} bytes; this server accepts at most {self.max_body_bytes}"


class RequestDeadlineProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's headers.

    uvicorn times out an idle keep-alive connection only after a response, and any byte received
    cancels that timer: a client that connects and sends nothing, or one header byte every few
    seconds, holds its socket forever (250 such sockets locked out /v1/health). Here a connection
    must deliver complete headers within ``request_timeout`` seconds of opening or of its last
    response, else it is closed. (Slow bodies are ``RequestGuard``'s; slow envs are not limited.)
    """

    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Arm the header deadline as the connection opens."""
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        """Re-arm the deadline for the next request on this keep-alive connection."""
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        """Cancel the pending deadline so a closed connection leaves no timer behind."""
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.request_timeout, self._expire)

    def _expire(self) -> None:
        cycle = getattr(self, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            return  # a request is being served; its response re-arms the deadline
        if not self.transport.is_closing():
            self.transport.close()


def deadline_protocol(request_timeout: float) -> type[RequestDeadlineProtocol]:
    """``RequestDeadlineProtocol`` with its own ``request_timeout`` (uvicorn takes a class)."""
    return type("RequestDeadlineProtocol", (RequestDeadlineProtocol,), {"request_timeout": float(request_timeout)})


async def _send_error(send: Any, status: int, code: str, detail: str, close: bool = True) -> None:
    """A JSON error response; ``close`` when the request body was not read (the stream is out of step)."""
    payload = json.dumps({"error": code, "detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def error_response(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """``{"error": code, "detail": detail}`` with ``status``: the shape of every error of these services."""
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


def _validation_detail(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors()[:10]:
        where = ".".join(str(part) for part in item.get("loc", ()))
        parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_json_errors(app: FastAPI) -> None:
    """Malformed requests (422), unknown routes (404) and wrong methods (405, with ``Allow``) answered as
    ``{"error", "detail"}`` JSON, like every other error of the project's HTTP services."""

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_request", _validation_detail(error))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        codes = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}
        headers = dict(error.headers or {})
        detail = str(error.detail)
        if error.status_code in (404, 405):
            detail = (f"{detail}: {request.method} {request.url.path} is not part of this API "
                      "(see /docs or /openapi.json)")
        if error.status_code == 405:  # Starlette names the methods of one route; a path may have several
            methods = {method for route in app.router.routes if getattr(route, "methods", None)
                       and route.matches(request.scope)[0] != Match.NONE for method in route.methods}
            headers["Allow"] = ", ".join(sorted(methods))
        code = codes.get(error.status_code, f"http_{error.status_code}")
        return error_response(error.status_code, code, detail, headers)


class ThreadedServer:
    """A FastAPI app on a loopback port (``port=0``: a free one) in a background thread, with the
    ``serve`` command's protocol settings: for tests, benchmarks, notebooks and embedded services."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT, name: str = "agentgym-server"):
        if not is_loopback(host):
            raise ValueError(f"{type(self).__name__} binds loopback addresses only, not {host!r}")
        self.app = app
        # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the listening
        # socket says it is TCP; without it every response waits ~40 ms for a delayed ACK
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = host, self._socket.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, timeout_graceful_shutdown=5,
                                http=deadline_protocol(request_timeout))
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._name = name

    @property
    def url(self) -> str:
        """The server's base URL (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Any:
        """Start serving in a background thread and wait until it accepts connections.

        Args:
            timeout: seconds to wait for the start.

        Returns:
            The server itself, for ``server = ThreadedServer(app).start()``.

        Raises:
            RuntimeError: the server thread died or did not start in time.
        """
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True,
                                        name=f"{self._name}-{self.port}")
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{type(self).__name__} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Ask uvicorn to exit, wait for the thread, and close the listening socket."""
        if self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._thread = None
        self._socket.close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
