"""Serves an embedded site (a Starlette app) on a free port of 127.0.0.1 with uvicorn, from a daemon thread.

WebShop's browser mode and WebArena's five sites are plain server-rendered HTML written as Starlette apps
(routes, requests, responses); this module owns what is the same for all of them: the loopback socket, the
server thread and its shutdown, the response headers every page carries, and the decoding of form fields.
The socket is bound to 127.0.0.1 before uvicorn sees it, so no site is ever reachable from another machine;
``loopback_guard`` (in front of every site) answers only loopback Host names, so a web page whose name was
re-pointed at 127.0.0.1 (DNS rebinding) reaches nothing, and refuses bodies over ``MAX_BODY_BYTES`` (413),
counted as they stream in, so a huge POST cannot grow the env's process.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from agentgym_envs.core.net import replaying_receive

LOOPBACK_HOST = "127.0.0.1"
#: Headers of every page: the pages change with every action, so a browser must never reuse one.
PAGE_HEADERS = {"Cache-Control": "no-store"}
HTML_MEDIA_TYPE = "text/html"  # Starlette appends "; charset=utf-8"
#: The largest request body a site reads (its forms are a few hundred bytes).
MAX_BODY_BYTES = 2 * 2**20
#: The Host names (without the port) a site answers: loopback only.
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def parse_fields(encoded: str) -> dict[str, str]:
    """``a=1&b=&a=2`` -> ``{"a": "2", "b": ""}``: the last value of each field, blanks kept."""
    return {key: values[-1] for key, values in parse_qs(encoded, keep_blank_values=True).items()}


def strip_trailing_slash(app: ASGIApp) -> ASGIApp:
    """``/cart/`` is ``/cart``: the sites always answered both with the same page, not with a redirect
    (Starlette's ``redirect_slashes`` would send a 307 first)."""

    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/":
            scope = {**scope, "path": scope["path"].rstrip("/") or "/"}
        await app(scope, receive, send)

    return wrapped


def _host_name(raw: bytes) -> str:
    value = raw.decode("latin-1").strip().lower()
    if value.startswith("["):
        return value.split("]", 1)[0] + "]"
    return value.rsplit(":", 1)[0]


async def _refuse(send: Any, status: int, code: str, detail: str) -> None:
    payload = json.dumps({"error": code, "detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": payload})


def loopback_guard(app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES) -> ASGIApp:
    """``app`` behind the two rules every embedded site needs: a Host that is not a loopback name gets 400
    (DNS rebinding), and a body over ``max_body_bytes`` gets 413, declared or counted as it streams in, before
    the site sees any of it (a huge POST must not grow the env's process)."""

    too_large = f"this site accepts bodies of at most {max_body_bytes} bytes"

    async def guarded(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        raw_host = headers.get(b"host")
        if raw_host is None or _host_name(raw_host) not in LOOPBACK_NAMES:
            await _refuse(send, 400, "host_not_allowed", "this site answers loopback Host names only")
            return
        declared = headers.get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > max_body_bytes:
            await _refuse(send, 413, "body_too_large", too_large)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > max_body_bytes:
                await _refuse(send, 413, "body_too_large", too_large)
                return
            if not message.get("more_body", False):
                break
        await app(scope, replaying_receive(bytes(body), receive), send)

    return guarded


class LoopbackServer:
    """Serves ``app`` on ``base_url`` (``http://127.0.0.1:<free port>``) until ``shutdown()``."""

    #: Seconds an idle keep-alive connection is kept open.
    IDLE_TIMEOUT = 30
    START_TIMEOUT = 30.0

    def __init__(self, app: ASGIApp, name: str):
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK_HOST, 0))
        self.base_url = f"http://{LOOPBACK_HOST}:{sock.getsockname()[1]}"
        # log_config=None: a site starting must not reconfigure the host process's logging
        config = uvicorn.Config(loopback_guard(app), host=LOOPBACK_HOST, lifespan="off", log_config=None,
                                log_level="warning", access_log=False, timeout_keep_alive=self.IDLE_TIMEOUT,
                                timeout_graceful_shutdown=5, server_header=False, date_header=False)
        self._server = uvicorn.Server(config)
        self._socket = sock
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.START_TIMEOUT
        while not self._server.started:  # the port is bound already; wait until requests are answered
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.shutdown()
                raise RuntimeError(f"the {name} site did not start on {self.base_url}")
            time.sleep(0.005)

    def shutdown(self) -> None:
        """Stop serving and end every open connection: a browser (perhaps pooled for the next env) keeps its
        keep-alive connections open, and uvicorn closes them on the way out."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
