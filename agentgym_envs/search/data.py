"""Documents, questions, answer normalisation, and loaders for the formats the RAG community uses.

* Questions: FlashRAG's JSON-lines rows ``{"id", "question", "golden_answers", "metadata"}``
  (a JSON list of such rows works too). Search-R1's parquet files carry the same two fields.
* Corpus: Search-R1's JSON-lines rows ``{"id", "contents"}`` where ``contents`` is the title on
  the first line (often in double quotes) and the passage text after it; rows with separate
  ``title`` and ``text`` fields (DPR / FlashRAG style) are accepted too.

The embedded fictional dataset is written in exactly these formats (see ``embedded.py``), so one
loader serves both.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import string
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from agentgym_envs.core.cache import CACHE_ENV_VAR, cache_root  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class Document:
    """One retrievable passage."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Search-R1's ``contents`` field: the quoted title line, then the text."""
        return f'"{self.title}"\n{self.text}'

    def to_row(self) -> dict[str, str]:
        """The document as a corpus row (``{"id", "contents"}``, Search-R1's format)."""
        return {"id": self.id, "contents": self.contents}

    @classmethod
    def from_row(cls, row: dict[str, Any], index: int = 0) -> "Document":
        """A document from a corpus row: Search-R1's ``contents`` (title on the first line) or ``title`` and ``text``.

        Args:
            row: the parsed JSON line.
            index: its line number, the id when the row has none and the error's position.

        Returns:
            The document.
        """
        doc_id = str(row.get("id", row.get("_id", index)))
        if "contents" in row:
            title, _, text = str(row["contents"]).partition("\n")
            return cls(doc_id, title.strip().strip('"').strip(), text.strip())
        if "text" in row:
            return cls(doc_id, str(row.get("title", "")).strip(), str(row["text"]).strip())
        raise ValueError(f"corpus row {index} has neither 'contents' nor 'text': keys {sorted(row)}")


@dataclass
class Question:
    """One question with its gold answers; ``metadata`` holds the supporting-fact annotations."""

    id: str
    question: str
    golden_answers: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_row(self) -> dict[str, Any]:
        """The question as a row of the questions file."""
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": self.golden_answers,
            "metadata": self.metadata,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any], index: int = 0) -> "Question":
        """A question from a row: ``question`` and ``golden_answers`` (or ``answers`` / ``answer``)."""
        if "question" not in row:
            raise ValueError(f"question row {index} has no 'question' field: keys {sorted(row)}")
        answers = row.get("golden_answers", row.get("answers", row.get("answer")))
        if answers is None:
            raise ValueError(f"question row {index} has no 'golden_answers' field: keys {sorted(row)}")
        if isinstance(answers, str):
            answers = [answers]
        answers = [str(a) for a in answers if str(a).strip()]
        if not answers:
            raise ValueError(f"question row {index} has an empty 'golden_answers' list")
        return cls(str(row.get("id", index)), str(row["question"]).strip(), answers, dict(row.get("metadata") or {}))


# ---- answers ----------------------------------------------------------------------------------

_BOXED = re.compile(r"\\(?:boxed|text|textbf|mathrm)\{([^{}]*)\}")
_ASCII_PUNCTUATION = frozenset(string.punctuation)
_PUNCTUATION = set(string.punctuation) | {"“", "”", "‘", "’", "«", "»", "–", "—", "…"}


def _fold(text: str) -> str:
    text = _BOXED.sub(r"\1", unicodedata.normalize("NFKC", text))
    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch)).lower()


def normalize_answer(text: str) -> str:
    """Search-R1's ``normalize_answer`` (SQuAD's): lower case, ASCII punctuation
    (``string.punctuation``) dropped, the articles a/an/the dropped, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _ASCII_PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def normalize_answer_lenient(text: str) -> str:
    """``normalize_answer`` made forgiving (``lenient_answers=True``): NFKC, accents folded,
    LaTeX wrappers such as ``\\boxed{...}`` and ``\\text{...}`` unwrapped, curly quotes, guillemets,
    dashes and the ellipsis dropped as punctuation, so "**Kestrel**.", "\\boxed{1843}" and
    "Dvořák" match "Kestrel", "1843" and "Dvorak"."""
    text = "".join(ch for ch in _fold(text) if ch not in _PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def normalize_text(text: str) -> str:
    """Normalisation for finding a phrase inside a passage: like ``normalize_answer_lenient``, but
    punctuation other than apostrophes and digit-group commas becomes a space, so "(1843–1901)"
    still holds the words 1843 and 1901."""
    text = re.sub(r"(?<=\d),(?=\d)", "", _fold(text)).replace("'", "").replace("’", "")
    text = "".join(" " if ch in _PUNCTUATION else ch for ch in text)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def exact_match(prediction: str, golden_answers: Iterable[str], lenient: bool = False) -> bool:
    """Search-R1's ``em_check``: the normalised prediction equals a normalised gold answer (so an
    answer that normalises to nothing matches a gold that does too, as there). ``lenient=True``:
    ``normalize_answer_lenient`` on both sides, and an empty normalised answer never matches."""
    normalize = normalize_answer_lenient if lenient else normalize_answer
    predicted = normalize(prediction)
    if lenient and not predicted:
        return False
    return any(predicted == normalize(gold) for gold in golden_answers)


def contains_phrase(normalized_text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs as whole words in a text already passed through ``normalize_text``."""
    needle = normalize_text(phrase)
    return bool(needle) and f" {needle} " in f" {normalized_text} "


# ---- files ------------------------------------------------------------------------------------


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import pandas
        except ImportError as error:  # pragma: no cover - pandas comes with datasets
            raise ImportError("reading parquet question files needs pandas (pip install pandas pyarrow)") from error
        for row in pandas.read_parquet(path).to_dict("records"):
            yield _from_search_r1_parquet(row)
        return
    with path.open("r", encoding="utf-8") as handle:
        first = handle.read(1)
        while first and first.isspace():
            first = handle.read(1)
        handle.seek(0)
        if first == "[":
            yield from json.load(handle)
            return
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{number}: not a JSON line ({error.msg})") from None


def _from_search_r1_parquet(row: dict[str, Any]) -> dict[str, Any]:
    """Search-R1's parquet rows keep the answers under ``reward_model.ground_truth.target``."""
    if "golden_answers" in row:
        answers = row["golden_answers"]
    else:
        answers = row["reward_model"]["ground_truth"]["target"]
    return {
        "id": row.get("id", row.get("index")),
        "question": row["question"],
        "golden_answers": [str(a) for a in list(answers)],
    }


def load_questions(path: str | os.PathLike) -> list[Question]:
    """FlashRAG-style questions from ``.jsonl`` / ``.json`` (or Search-R1 ``.parquet``)."""
    return _load_rows(path, "question file", "questions", Question.from_row)


def load_corpus(path: str | os.PathLike) -> list[Document]:
    """A Search-R1 style corpus (``{"id", "contents"}`` JSON lines) from a local path."""
    return _load_rows(path, "corpus file", "documents", Document.from_row)


def _load_rows(path: str | os.PathLike, what: str, items: str, make: Callable[[dict[str, Any], int], Any]) -> list[Any]:
    """Every row of a local file as ``make(row, index)``; a missing or empty file is an error that names it."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    loaded = [make(row, i) for i, row in enumerate(_rows(path))]
    if not loaded:
        raise ValueError(f"{what} {path} holds no {items}")
    return loaded


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write ``rows`` as JSON lines (UTF-8, non-ASCII kept)."""
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def file_fingerprint(path: str | os.PathLike) -> str:
    """Identifies a corpus file for the index cache without reading gigabytes: path, size, mtime."""
    stat = Path(path).expanduser().resolve().stat()
    key = f"{Path(path).expanduser().resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


@dataclass
class Corpus:
    """Documents plus a stable fingerprint that names their cached indexes."""

    documents: list[Document]
    fingerprint: str

    def __len__(self) -> int:
        return len(self.documents)

    @classmethod
    def from_documents(cls, documents: list[Document]) -> "Corpus":
        """A corpus of ``documents``, its fingerprint a hash of their ids and contents."""
        digest = hashlib.sha1()
        for doc in documents:
            digest.update(doc.id.encode() + b"\0" + doc.contents.encode() + b"\0")
        return cls(documents, digest.hexdigest()[:16])

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Corpus":
        """The corpus in a JSON-lines file, its fingerprint the file's path, size and time."""
        return cls(load_corpus(path), file_fingerprint(path))
