"""A stdlib HTTP server for the embedded sites, on a free port of 127.0.0.1, served from a daemon thread.

WebShop's browser mode and WebArena's five sites are plain server-rendered HTML; they differ only
in how they answer a request, so each passes a ``respond`` callable and this module owns the
sockets, the thread, form decoding and the response headers. Standard library only: no web
framework is needed for pages a browser under test reads.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs


@dataclass
class HtmlResponse:
    """What a site answers: a status, an HTML body and, for redirects, where to go."""

    status: int
    body: str
    location: str | None = None


#: ``respond(method, path with query, form fields of a POST) -> HtmlResponse``
Responder = Callable[[str, str, dict[str, str]], HtmlResponse]


def parse_fields(encoded: str) -> dict[str, str]:
    """``a=1&b=&a=2`` -> ``{"a": "2", "b": ""}``: the last value of each field, blanks kept."""
    return {key: values[-1] for key, values in parse_qs(encoded, keep_blank_values=True).items()}


class LoopbackHtmlServer:
    """Serves ``respond`` on ``base_url`` (``http://127.0.0.1:<free port>``) until ``shutdown()``."""

    #: Seconds an idle keep-alive connection is kept open (its handler thread waits that long).
    IDLE_TIMEOUT = 30.0

    def __init__(self, respond: Responder, name: str):
        connections: set[socket.socket] = set()
        lock = threading.Lock()
        self._connections, self._lock = connections, lock

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = self.IDLE_TIMEOUT

            def setup(self) -> None:
                super().setup()
                with lock:
                    connections.add(self.connection)

            def finish(self) -> None:
                with lock:
                    connections.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                self._answer(respond("GET", self.path, {}))

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                self._answer(respond("POST", self.path, parse_fields(raw)))

            def _answer(self, response: HtmlResponse) -> None:
                data = response.body.encode("utf-8")
                self.send_response(response.status)
                if response.location is not None:
                    self.send_header("Location", response.location)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
        )
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def shutdown(self) -> None:
        """Stop serving and end every open connection: a browser (perhaps pooled for the next env)
        keeps its keep-alive connections, and each holds a handler thread and a descriptor."""
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            open_connections = list(self._connections)
        for connection in open_connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)  # the handler's read returns, its thread ends
            except OSError:
                pass
        self._thread.join(timeout=5)
