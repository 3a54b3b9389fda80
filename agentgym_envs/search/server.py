"""A Search-R1 compatible retrieval server over any of our retrievers (FastAPI, like the env server).

Protocol (as Search-R1's ``retrieval_server.py``)::

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
    ->  {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 12.3}, ...], ...]}

(with ``return_scores`` false each hit is the bare document); ``GET /health``; the OpenAPI schema at
``/openapi.json``. It needs the ``[server]`` extra. Run it with::

    python -m agentgym_envs.search.server --port 8000                      # fictional corpus, BM25
    python -m agentgym_envs.search.server --corpus wiki.jsonl --backend dense --model-path ./e5-base-v2

and point envs at it with ``gym.make(..., retriever="remote", retriever_url="http://host:8000/retrieve")``.
It binds the way ``agentgym serve`` does: on loopback (the default) no token is needed; bound to any other
address it refuses to start without a token (``--token`` or ``$AGENTGYM_RETRIEVER_TOKEN``), which clients send
as ``Authorization: Bearer <token>`` (the env's ``retriever_token``, or the same variable); it answers the bound
address, loopback names and ``--allowed-host`` names as ``Host``. As the env server does, it bounds request
bodies and answers mistakes with JSON errors (``{"error", "detail"}``); it also caps a request's work and reply:
at most ``MAX_QUERIES`` queries and ``MAX_HITS`` passages (queries x topk), refused with 422 before any
search, and a reply over ``MAX_RESPONSE_BYTES`` is refused with 413 (our client splits large batches).
``RetrievalServer`` runs it in a thread on a loopback port (tests, notebooks).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections import Counter
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import Response
from pydantic import BaseModel, Field, model_validator

from agentgym_envs.core.http import (RequestGuard, ThreadedServer, deadline_protocol, error_response,
                                     install_json_errors)
from agentgym_envs.core.net import is_loopback
from agentgym_envs.search.retrievers import MAX_HITS, MAX_QUERIES, MAX_TOPK, TOKEN_ENV_VAR, Retriever

__all__ = ["MAX_BODY_BYTES", "MAX_HITS", "MAX_QUERIES", "MAX_RESPONSE_BYTES", "MAX_TOPK", "TOKEN_ENV_VAR",
           "RetrievalServer", "create_retrieval_app", "main"]

MAX_BODY_BYTES = 10 * 2**20
#: The largest reply the server sends; a larger one is refused with 413 (``MAX_HITS`` keeps normal ones far below).
MAX_RESPONSE_BYTES = 32 * 2**20


class RetrieveRequest(BaseModel):
    """A batch of queries, as Search-R1's clients send it, within the caps that bound the server's work."""

    queries: list[str] = Field(min_length=1, max_length=MAX_QUERIES)
    topk: int = Field(3, ge=1, le=MAX_TOPK)
    return_scores: bool = False

    @model_validator(mode="after")
    def _within_hits(self) -> RetrieveRequest:
        if len(self.queries) * self.topk > MAX_HITS:
            raise ValueError(f"{len(self.queries)} queries x topk {self.topk} asks for more than {MAX_HITS} "
                             "passages in one request; split the batch")
        return self


def create_retrieval_app(retriever: Retriever, *, delay: float = 0.0, stopping: threading.Event | None = None,
                         max_body_bytes: int = MAX_BODY_BYTES, max_response_bytes: int = MAX_RESPONSE_BYTES,
                         token: str | None = None, host: str = "127.0.0.1",
                         allowed_hosts: tuple[str, ...] = ()) -> FastAPI:
    """The retrieval API over ``retriever``, guarded like the env server so it can serve other machines.
    ``token``: if set, every request needs ``Authorization: Bearer <token>``; ``host`` (the bound address),
    loopback names and ``allowed_hosts`` are the ``Host`` names it answers. ``delay``: seconds to wait before
    answering (a slow server, for tests), cut short when ``stopping`` is set."""
    stopping = stopping or threading.Event()
    app = FastAPI(title="AgentGym retrieval server", description="Search-R1's retrieval protocol: POST /retrieve")
    app.add_middleware(RequestGuard, max_body_bytes=max_body_bytes, statuses=Counter(), token=token, host=host,
                       allowed_hosts=tuple(allowed_hosts))
    install_json_errors(app)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "retriever": retriever.name}

    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> Response:  # a plain def: FastAPI runs it in its thread pool
        if delay and stopping.wait(delay):
            raise HTTPException(503, "the server is stopping")
        results = retriever.search_batch(request.queries, request.topk)
        if request.return_scores:
            rows: list[Any] = [[{"document": hit.doc.to_row(), "score": hit.score} for hit in hits] for hits in results]
        else:
            rows = [[hit.doc.to_row() for hit in hits] for hits in results]
        payload = json.dumps({"result": rows}, ensure_ascii=False).encode()
        if len(payload) > max_response_bytes:
            return error_response(413, "response_too_large",
                                  f"the reply would have {len(payload)} bytes; this server sends at most "
                                  f"{max_response_bytes}: ask for fewer queries or a smaller topk")
        return Response(payload, media_type="application/json")

    return app


class RetrievalServer(ThreadedServer):
    """Serves ``retriever`` on a loopback port from a background thread (``port=0`` picks a free port)."""

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 0, delay: float = 0.0,
                 token: str | None = None, max_response_bytes: int = MAX_RESPONSE_BYTES):
        self.retriever = retriever
        self._stopping = threading.Event()
        app = create_retrieval_app(retriever, delay=delay, stopping=self._stopping, token=token, host=host,
                                   max_response_bytes=max_response_bytes)
        super().__init__(app, host, port, name="retrieval-server")

    @property
    def url(self) -> str:
        """The ``/retrieve`` endpoint's URL, what a search env's ``retrieval_url`` takes."""
        return f"{super().url}/retrieve"

    def close(self) -> None:
        """Stop the server, releasing any delayed answer at once instead of waiting it out."""
        self._stopping.set()  # a delayed answer returns now, so the server stops at once
        self.stop()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    """The command line: serve a corpus (by default the embedded fictional encyclopedia) with BM25 or a dense
    retriever over the Search-R1 protocol, so search envs can use a retrieval service like the original's.

    Args:
        argv: the arguments, or None for ``sys.argv``.
    """
    import uvicorn

    from agentgym_envs.search.data import Corpus
    from agentgym_envs.search.retrievers import get_retriever

    parser = argparse.ArgumentParser(
        description="Serve a corpus with the Search-R1 retrieval protocol (POST /retrieve)."
    )
    parser.add_argument(
        "--corpus", help="Search-R1 style corpus (JSON lines with id and contents); default: the fictional encyclopedia"
    )
    parser.add_argument("--backend", choices=("bm25", "dense"), default="bm25")
    parser.add_argument("--model-path", help="dense backend: a local sentence-transformers model directory")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to bind; any but loopback needs a token")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--token",
                        help=f"clients must send 'Authorization: Bearer <token>' (default: ${TOKEN_ENV_VAR})")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a Host name to answer besides the bound address and loopback (repeatable)")
    args = parser.parse_args(argv)
    token = args.token or os.environ.get(TOKEN_ENV_VAR) or None
    if not is_loopback(args.host) and not token:
        parser.exit(2, f"refusing to listen on {args.host} without authentication; pass --token or set "
                       f"${TOKEN_ENV_VAR} (clients send it as 'Authorization: Bearer <token>'), or bind 127.0.0.1\n")
    if args.corpus:
        corpus = Corpus.from_file(args.corpus)
    else:
        from agentgym_envs.search.embedded import embedded_data

        corpus = embedded_data().corpus
    options = {"model_path": args.model_path} if args.backend == "dense" else {}
    app = create_retrieval_app(get_retriever(args.backend, corpus, **options), token=token, host=args.host,
                               allowed_hosts=tuple(args.allowed_host))
    print(f"serving {len(corpus)} documents with {args.backend} at http://{args.host}:{args.port}/retrieve"
          f"{' with token auth' if token else ''}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", http=deadline_protocol(10.0))


if __name__ == "__main__":
    main()
