"""Trajectory logs: one JSON object per episode, appended as soon as the episode ends.

Appending line by line is what makes an interrupted evaluation resumable: whatever reached the file
is kept, and a rerun skips the episodes whose key (env id, item id, sample, turn budget) is
already there. A line cut off by a crash is ignored on load.

A record is ``Trajectory.to_record()``: the one episode schema, documented in
``agentgym_envs/core/episode.py``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from agentgym_envs.core.jsonl import append_lines, finite_json, read_jsonl
from agentgym_envs.core.safety import valid_utf8

logger = logging.getLogger(__name__)

TRAJECTORIES_FILE = "trajectories.jsonl"
EpisodeKey = tuple[str, int, int, int]


def episode_key(record: Mapping[str, Any]) -> EpisodeKey:
    """What identifies an episode of a run: env id, item id, sample index and turn budget."""
    return (str(record["env_id"]), int(record["item_id"]), int(record["sample"]), int(record["max_turns"]))


def usable_key(record: Mapping[str, Any], where: str = "") -> EpisodeKey | None:
    """``episode_key(record)`` for a record an evaluation can resume from, else ``None`` with a warning
    (a hand-edited or foreign record: ``"max_turns": null``, no ``info`` dict...); its episode is played again."""
    try:
        key = episode_key(record)
        if not isinstance(record.get("info"), dict):
            raise TypeError("info is not an object")
        return key
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        logger.warning("%s: a record without a usable env_id / item_id / sample / max_turns / info (%s: %s); "
                       "skipped, its episode is played again", where or "trajectories", type(error).__name__, error)
        return None


def trajectory_files(run: str | os.PathLike) -> list[Path]:
    """The JSONL files of a run folder (``trajectories*.jsonl``: one per training rank), or the file itself."""
    path = Path(run)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no run at {path}: neither a folder nor a .jsonl file")
    return sorted(path.glob("trajectories*.jsonl"))


def read_records(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Records of one JSONL file; a line cut off (an interrupted write) or damaged (not UTF-8) is
    skipped with a warning, as is a line that is not a JSON object."""
    for number, record in read_jsonl(path):
        if isinstance(record, dict):
            yield record
        else:
            logger.warning("%s line %d is not a JSON object; skipped", path, number)


def load_run(run: str | os.PathLike) -> list[dict[str, Any]]:
    """Every record of a run folder (all its trajectory files) or of one JSONL file."""
    return [record for path in trajectory_files(run) for record in read_records(path)]


class TrajectoryLog:
    """Append-only JSONL of episodes; thread-safe, flushed after every record."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()

    def records(self) -> list[dict[str, Any]]:
        """Every record in the log (a damaged line costs that line only); empty when there is no file yet."""
        return list(read_records(self.path)) if self.path.is_file() else []

    def append(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Append records, one JSON line each, under the log's lock (valid UTF-8 whatever the text held, strict JSON
        whatever the numbers were)."""
        # valid UTF-8 whatever a model or endpoint produced (a lone surrogate would make the write
        # raise and cost the whole batch); NaN / infinities as strings (strict readers reject bare NaN);
        # default=str for values json cannot encode
        lines = "".join(json.dumps(finite_json(valid_utf8(record)), ensure_ascii=False, default=str) + "\n"
                        for record in records)
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:  # a line cut off by a crash must not swallow the next record
            append_lines(self.path, lines)


@cache
def _subtask_table(env_id: str) -> dict[int, str]:
    from agentgym_envs.core.tasks import get_task, load_splits

    spec = get_task(env_id)
    splits = load_splits(spec.family)
    return {item: subtask for subtask in spec.subtasks for items in splits.get(subtask, {}).values() for item in items}


def subtask_of(env_id: str, item_id: int) -> str | None:
    """The sub-task an item belongs to (for logs written where no env ``info`` is at hand, e.g. training)."""
    try:
        return _subtask_table(env_id).get(int(item_id))
    except (KeyError, FileNotFoundError, ModuleNotFoundError):
        return None
