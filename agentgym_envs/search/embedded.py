"""The embedded dataset: the fictional encyclopedia and its seven question sets, cached on disk.

The first use in a fresh cache generates everything (about 5 s) and writes it in the formats the
loaders read: ``corpus.jsonl`` (Search-R1 rows, so a real retrieval server can serve it too) and
``questions/<subtask>.jsonl`` (FlashRAG rows). Later processes only read the files; within a
process the data is loaded once and shared by every env.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from agentgym_envs.search.data import Corpus, Question, cache_root, load_corpus, load_questions, write_jsonl
from agentgym_envs.search.tasks import SUBTASKS, TEST_SIZES, TRAIN_SIZE
from agentgym_envs.search.world import GENERATOR_VERSION

_LOCK = threading.Lock()


@dataclass
class SearchData:
    """A corpus and question lists per sub-task (index ``i`` of a list is item ``i`` of that sub-task)."""

    corpus: Corpus
    questions: dict[str, list[Question]]


def dataset_dir(seed: int = 0) -> Path:
    """Where the generated fictional dataset of ``seed`` is cached."""
    return cache_root() / "search" / f"fictional-v{GENERATOR_VERSION}-seed{seed}"


def build_dataset(directory: Path, seed: int = 0, scale: float = 1.0, train_size: int = TRAIN_SIZE) -> None:
    """Generate the world, its articles and its questions into ``directory`` (written atomically)."""
    from agentgym_envs.search.articles import write_encyclopedia
    from agentgym_envs.search.questions import generate_questions
    from agentgym_envs.search.world import generate_world

    encyclopedia = write_encyclopedia(generate_world(seed, scale))
    questions = generate_questions(encyclopedia, seed, train_size)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=directory.name + ".", dir=directory.parent))
    try:
        write_jsonl(staging / "corpus.jsonl", (doc.to_row() for doc in encyclopedia.documents))
        (staging / "questions").mkdir()
        for subtask, rows in questions.items():
            write_jsonl(staging / "questions" / f"{subtask}.jsonl", (q.to_row() for q in rows))
        manifest = {
            "generator_version": GENERATOR_VERSION,
            "seed": seed,
            "scale": scale,
            "documents": len(encyclopedia.documents),
            "articles": len(encyclopedia.world.entities),
            "questions": {subtask: len(rows) for subtask, rows in questions.items()},
            "test_sizes": {subtask: TEST_SIZES[subtask] for subtask in questions},
        }
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
        try:
            os.rename(staging, directory)
        except OSError:  # another process finished first: keep its copy
            if not (directory / "manifest.json").is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


@lru_cache(maxsize=4)
def embedded_data(seed: int = 0) -> SearchData:
    """The fictional dataset for ``seed``: generated on first use, then read from the cache."""
    with _LOCK:
        directory = dataset_dir(seed)
        if not (directory / "manifest.json").is_file():
            build_dataset(directory, seed)
        corpus = Corpus(load_corpus(directory / "corpus.jsonl"), f"fictional-v{GENERATOR_VERSION}-seed{seed}")
        questions = {subtask: load_questions(directory / "questions" / f"{subtask}.jsonl") for subtask in SUBTASKS}
        return SearchData(corpus, questions)
