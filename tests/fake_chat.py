"""A fake OpenAI-compatible chat server on 127.0.0.1, for the tests and benchmarks of ``agentgym eval --endpoint``.

It records every request (path and JSON body) and its headers, counts requests in flight, and can answer busy,
slowly, or with an error after a number of calls. Not part of the installed packages: the tests import it from
``tests/`` (pytest puts that folder on ``sys.path``), the benchmarks add ``tests/`` to ``sys.path`` themselves.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: What the server answers unless told otherwise: one ReAct turn that TextCraft accepts.
INVENTORY = "Thought: look.\n\nAction:\ninventory"
#: The token counts it reports with that answer.
USAGE = {"prompt_tokens": 100, "completion_tokens": 7}


class FakeChatServer:
    """A tiny ``/v1/chat/completions`` on 127.0.0.1, started and stopped as a context manager.

    Args:
        content: the assistant message every successful request gets.
        usage: the ``usage`` object sent with it; None leaves it out of the answer.
        fail_after: after this many requests, every further one is refused with HTTP 400 (None: never).
        failure: the message of that refusal.
        delay: seconds each request waits before it is answered (a model thinking), so that concurrent
            requests overlap and ``most_in_flight`` shows how many did.
        busy_first: how many first requests are answered HTTP 503 with ``Retry-After: 0`` (a busy server).
        finish_reason: the choice's ``finish_reason`` ("length": ``max_tokens`` cut the reply).

    The server's ``url`` ends in ``/v1``; ``requests`` holds each request's ``path`` and JSON body, ``headers`` its
    headers (as sent), in arrival order.
    """

    def __init__(self, content: str = INVENTORY, usage: dict[str, int] | None = USAGE, *,
                 fail_after: int | None = None, failure: str = "model overloaded", delay: float = 0.0,
                 busy_first: int = 0, finish_reason: str = "stop"):
        self.content, self.usage, self.finish_reason = content, usage, finish_reason
        self.fail_after, self.failure, self.delay, self.busy_first = fail_after, failure, delay, busy_first
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self) -> bytes:
        """The JSON body of a successful answer."""
        reply: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": self.content},
                                              "finish_reason": self.finish_reason}]}
        if self.usage is not None:
            reply["usage"] = self.usage
        return json.dumps(reply).encode()


def _handler_for(server: FakeChatServer) -> type[BaseHTTPRequestHandler]:
    """The request handler class of one server (``http.server`` wants a class, not an instance)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with server.lock:
                server.requests.append({"path": self.path, **body})
                server.headers.append(dict(self.headers))
                count = len(server.requests)
                server.in_flight += 1
                server.most_in_flight = max(server.most_in_flight, server.in_flight)
            time.sleep(server.delay)
            with server.lock:
                server.in_flight -= 1
            if count <= server.busy_first:
                self.send_response(503)
                self.send_header("Retry-After", "0")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if server.fail_after is not None and count > server.fail_after:
                self.send_error(400, server.failure)
                return
            payload = server.answer()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    return Handler
