"""A Search-R1 compatible retrieval server over any of our retrievers (FastAPI, like the env server).

Protocol (as Search-R1's ``retrieval_server.py``)::

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
    ->  {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 12.3}, ...], ...]}

(with ``return_scores`` false each hit is the bare document); ``GET /health``; the OpenAPI schema at
``/openapi.json``. It needs the ``[server]`` extra. Run it with::

    python -m agentgym_envs.search.server --port 8000                      # fictional corpus, BM25
    python -m agentgym_envs.search.server --corpus wiki.jsonl --backend dense --model-path ./e5-base-v2

and point envs at it with ``gym.make(..., retriever="remote", retriever_url="http://host:8000/retrieve")``.
As the env server does, it bounds request bodies and answers mistakes with JSON errors
(``{"error", "detail"}``); ``RetrievalServer`` runs it in a thread on a loopback port (tests, notebooks).
"""

from __future__ import annotations

import argparse
import threading
from collections import Counter
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from agentgym_envs.search.retrievers import Retriever
from agentgym_envs.core.http import RequestGuard, ThreadedServer, deadline_protocol, install_json_errors

MAX_BODY_BYTES = 10 * 2**20
MAX_TOPK = 100


class RetrieveRequest(BaseModel):
    """A batch of queries, as Search-R1's clients send it."""

    queries: list[str] = Field(min_length=1)
    topk: int = Field(3, ge=1, le=MAX_TOPK)
    return_scores: bool = False


def create_retrieval_app(retriever: Retriever, *, delay: float = 0.0, stopping: threading.Event | None = None,
                         max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The retrieval API over ``retriever``. ``delay``: seconds to wait before answering (a slow server,
    for tests), cut short when ``stopping`` is set."""
    stopping = stopping or threading.Event()
    app = FastAPI(title="AgentGym retrieval server", description="Search-R1's retrieval protocol: POST /retrieve")
    app.add_middleware(RequestGuard, max_body_bytes=max_body_bytes, statuses=Counter())
    install_json_errors(app)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "retriever": retriever.name}

    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> dict[str, Any]:  # a plain def: FastAPI runs it in its thread pool
        if delay and stopping.wait(delay):
            raise HTTPException(503, "the server is stopping")
        results = retriever.search_batch(request.queries, request.topk)
        if request.return_scores:
            return {"result": [[{"document": hit.doc.to_row(), "score": hit.score} for hit in hits]
                               for hits in results]}
        return {"result": [[hit.doc.to_row() for hit in hits] for hits in results]}

    return app


class RetrievalServer(ThreadedServer):
    """Serves ``retriever`` on a loopback port from a background thread (``port=0`` picks a free port)."""

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 0, delay: float = 0.0):
        self.retriever = retriever
        self._stopping = threading.Event()
        super().__init__(create_retrieval_app(retriever, delay=delay, stopping=self._stopping), host, port,
                         name="retrieval-server")

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
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    if args.corpus:
        corpus = Corpus.from_file(args.corpus)
    else:
        from agentgym_envs.search.embedded import embedded_data

        corpus = embedded_data().corpus
    options = {"model_path": args.model_path} if args.backend == "dense" else {}
    app = create_retrieval_app(get_retriever(args.backend, corpus, **options))
    print(f"serving {len(corpus)} documents with {args.backend} at http://{args.host}:{args.port}/retrieve",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", http=deadline_protocol(10.0))


if __name__ == "__main__":
    main()
