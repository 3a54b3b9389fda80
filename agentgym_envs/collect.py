"""Expert trajectories for behaviour cloning: play episodes with an agent and keep them as chat conversations.

Each kept episode is one record of the episode schema (``Trajectory.to_record``, see
``agentgym_envs/core/episode.py``): ``messages`` (the opening, AgentGym's instruction /
acknowledgement / first observation turns or with ``merged_first_turn`` one user turn holding both;
then the agent's responses verbatim as assistant turns and every later observation as a user turn,
up to the last response), ``prompt_messages`` (how many leading messages are the opening: the
prompt, never trained on), ``final_observation`` (the env's answer to the last response, which the
rollout never feeds to the model), ``env_id``, ``item_id``, ``seed``, ``split``, ``agent``,
``return``, ``turns``, ``info`` and the per-step ``rewards`` / ``valid`` / ``scores``. The episode
is played by the same loop as the trainer's rollout, so the conversation is exactly what the
rollout shows the model for the same episode. Episodes reset with ``seed=item_id`` on the first
pass over the items, as the rollout does, so a row can be replayed.

Only train items are played unless the caller explicitly allows another split: the test split is
the held-out evaluation set. This module needs no torch; ``datasets`` (the ``[collect]`` extra, also
part of ``[train]``) is imported only to save or load.

Nothing played is lost: with a ``journal`` (``agentgym collect`` keeps ``<out>/episodes.jsonl``)
every episode is appended as it ends, and a rerun with the same settings replays the journal
instead of the episodes, so a killed collection resumes where it stopped and a larger ``--n``
or another ``--env`` only plays what is new.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import agentgym_envs
from agentgym_envs.agents import make_agent
from agentgym_envs.core import MissingExtraError
from agentgym_envs.core.episode import ENV_ERROR
from agentgym_envs.core.jsonl import append_lines, read_jsonl
from agentgym_envs.core.loop import close_quietly, run_episode
from agentgym_envs.core.safety import valid_utf8

logger = logging.getLogger(__name__)

TRAIN_SPLIT = "train"
#: The episode schema the journal's rows follow (a journal of an older schema is not resumed).
RECORD_VERSION = 2
#: The journal of played episodes inside an ``agentgym collect`` output folder.
JOURNAL_FILE = "episodes.jsonl"
#: The dataset's columns: the record's fields that SFT and a reader need (``success`` is the record's info's).
COLUMNS = (
    "messages",
    "prompt_messages",
    "env_id",
    "item_id",
    "seed",
    "split",
    "agent",
    "return",
    "success",
    "turns",
    "final_observation",
)


class HeldOutSplitError(ValueError):
    """Collecting training data from a split other than ``train`` without the explicit override."""


@dataclass(frozen=True)
class KeepRule:
    """Which played episodes become rows.

    Default: successful episodes only. ``min_reward``: episodes whose return reaches it, successful
    or not (e.g. 0.5 keeps half-solved crafting trees). ``keep_failures``: every episode.
    """

    min_reward: float | None = None
    keep_failures: bool = False

    def keeps(self, reward: float, success: bool) -> bool:
        """Whether an episode goes into the dataset: every one with ``keep_failures``, else those reaching
        ``min_reward`` when it is set, else the successful ones.
        """
        if self.keep_failures:
            return True
        if self.min_reward is not None:
            return reward >= self.min_reward - 1e-9
        return success


def check_split(split: str, allow_held_out: bool = False) -> None:
    """Refuse to turn evaluation items into training data unless asked to explicitly."""
    if split != TRAIN_SPLIT and not allow_held_out:
        raise HeldOutSplitError(
            f"refusing to collect training data from the {split!r} split: it is held out for evaluation. "
            "Collect from --split train, or pass --allow-held-out-split if you really mean it"
        )


def episode_plan(env_id: str, split: str, episodes: int, seed: int = 0,
                 items: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """``(item_id, reset_seed)`` pairs: a seeded permutation of the split's items (or ``items``, in their order),
    cycled if ``episodes`` exceeds it.

    The first pass resets with ``seed=item_id`` (the rollout's default); each later pass offsets the
    seed so envs with seed-dependent randomness play a different episode.
    """
    if env_id in gym.registry and env_id not in {task.env_id for task in agentgym_envs.list_tasks()}:
        raise ValueError(f"{env_id} has no splits (it is registered with gym.register alone) and collect draws its "
                         "items from them: register it as a family (agentgym_envs.register_family, "
                         "docs/development.md)")
    spec = agentgym_envs.get_task(env_id)
    known = list(spec.split(split))
    if not known:
        raise ValueError(f"{env_id} has no {split!r} items")
    if items is None:
        items, order = known, np.random.default_rng(seed).permutation(len(known))
    else:
        items = spec.named_items(split, items)
        if not items:
            raise ValueError(f"{env_id}: no items given of its {split!r} split")
        order = np.arange(len(items))
    plan = []
    for index in range(episodes):
        item = int(items[order[index % len(items)]])
        repeat = index // len(items)
        plan.append((item, item + repeat * 1_000_003))
    return plan


class Journal:
    """Append-only JSONL of played episodes, keyed by (env id, position in its plan).

    The first line holds the settings that fix every plan (split, agent, seed, keep rule); a
    journal written with other settings is refused, since its episodes belong to another collection.
    """

    def __init__(self, path: str | os.PathLike, settings: dict[str, Any]):
        self.path = Path(path)
        self.settings = settings
        self.entries: dict[tuple[str, int], dict[str, Any]] = {}
        if self.path.is_file():
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._write({"settings": settings})

    def _load(self) -> None:
        lines = read_jsonl(self.path)  # cut (a kill) or damaged lines are skipped with a warning
        first = next(lines, None)
        if first is None:  # nothing readable (a header cut by a full disk or a kill): no episode to keep, start over
            self.path.write_text("", encoding="utf-8")
            self._write({"settings": self.settings})
            return
        header = first[1] if first is not None and first[0] == 1 and isinstance(first[1], dict) else {}
        if header.get("settings") != self.settings:
            raise ValueError(
                f"{self.path} belongs to a collection with other settings ({header.get('settings')}, now "
                f"{self.settings}); pass --overwrite to start over, or another --out"
            )
        for number, entry in lines:
            try:
                self.entries[(str(entry["env_id"]), int(entry["index"]))] = entry
            except (TypeError, KeyError, ValueError):
                logger.warning("%s line %d is not a journal entry; skipped", self.path, number)

    def add(self, env_id: str, index: int, kept: bool, row: dict[str, Any]) -> None:
        """Record one played episode (kept or not) and write it to the journal at once, so a restart skips it."""
        entry = {"env_id": env_id, "index": index, "kept": kept, "row": row}
        self.entries[(env_id, index)] = entry
        self._write(entry)

    def _write(self, entry: dict[str, Any]) -> None:
        # after a line a kill cut off, a new line first (else that line swallows this entry)
        append_lines(self.path, json.dumps(valid_utf8(entry), ensure_ascii=False) + "\n")


def collect(
    env_ids: str | Sequence[str],
    episodes: int,
    *,
    split: str = TRAIN_SPLIT,
    agent: str = "oracle",
    keep: KeepRule | None = None,
    seed: int = 0,
    allow_held_out: bool = False,
    progress: bool = True,
    journal: str | os.PathLike | None = None,
    merged_first_turn: bool = False,
    env_kwargs: dict[str, Any] | None = None,
    items: dict[str, Sequence[int]] | None = None,
    make_env: Callable[..., Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    """Play ``episodes`` episodes per env id with ``agent`` and return the kept rows plus per-env counts.

    The counts (``played``, ``kept``, ``success``, ``seconds``, ``resumed``) say how much the keep
    rule dropped and how fast the env plays. With ``journal`` (a JSONL path) every episode is
    appended as it ends and the episodes already there are taken from it instead of replayed.
    ``merged_first_turn`` opens each conversation with one user turn (instruction + first
    observation) instead of AgentGym's three opening turns; it must match the trainer's setting.
    ``env_kwargs`` go to every ``gym.make`` (and into the journal's settings: they change the episodes).
    ``items`` ({env id: item ids}) plays those items of the split, in that order, instead of a seeded shuffle.
    ``make_env`` makes the envs instead of ``gym.make`` (``server.hosts.RemoteEnvFactory``: on env servers).
    """
    from tqdm import tqdm

    check_split(split, allow_held_out)
    keep = keep or KeepRule()
    if isinstance(env_ids, str):
        env_ids = [env_ids]
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    plans = {env_id: episode_plan(env_id, split, episodes, seed, (items or {}).get(env_id)) for env_id in env_ids}
    log = None
    if journal is not None:
        settings = {"split": split, "agent": agent, "seed": seed, "keep": [keep.min_reward, keep.keep_failures],
                    "merged_first_turn": merged_first_turn, "record": RECORD_VERSION}
        if env_kwargs:
            settings["env_kwargs"] = env_kwargs
        if items:
            settings["items"] = {env_id: list(map(int, ids)) for env_id, ids in items.items()}
        log = Journal(journal, settings)
    rows: list[dict[str, Any]] = []
    counts: dict[str, dict[str, float]] = {}
    with tqdm(total=episodes * len(env_ids), desc=f"{agent} episodes", disable=not progress) as bar:
        for env_id, plan in plans.items():
            session = _EnvCollection(env_id, split, make_agent(agent, seed=seed), keep, log, env_kwargs or {},
                                     merged_first_turn, make_env or gym.make)
            try:
                for index, (item_id, reset_seed) in enumerate(plan):
                    rows += session.play(index, item_id, reset_seed)
                    bar.update(1)
                    bar.set_postfix(env=env_id.split("/")[-1], kept=len(rows), refresh=False)
            finally:
                session.close()
            counts[env_id] = session.counts()
    return rows, counts


class _EnvCollection:
    """One env id's part of a collection: its env, agent and counts; an episode at a time."""

    def __init__(self, env_id: str, split: str, agent: Any, keep: KeepRule, log: Journal | None,
                 env_kwargs: dict[str, Any], merged_first_turn: bool, make_env: Callable[..., Any]):
        self.env_id, self.agent, self.keep, self.log = env_id, agent, keep, log
        self.env_kwargs, self.merged_first_turn, self.make_env = env_kwargs, merged_first_turn, make_env
        self.items = len(agentgym_envs.get_task(env_id).split(split))
        self.env = make_env(env_id, **env_kwargs)
        self.started = time.perf_counter()
        self.played = self.kept = self.solved = self.crashed = self.resumed = 0

    def play(self, index: int, item_id: int, reset_seed: int) -> list[dict[str, Any]]:
        """The kept rows of the plan's ``index``-th episode (taken from the journal when it is there)."""
        saved = self.log.entries.get((self.env_id, index)) if self.log is not None else None
        if saved is not None and saved["row"]["item_id"] == item_id:
            self.resumed += 1
            return self._count(saved["row"], saved["kept"])
        try:
            trajectory = run_episode(self.env, self.agent, item_id, seed=reset_seed, sample=index // self.items,
                                     agentgym_order=not self.merged_first_turn)
            failure = trajectory.final_observation if trajectory.stop_reason == ENV_ERROR else None
        except Exception as error:  # noqa: BLE001 (an engine that cannot even reset)
            failure = error
        if failure is not None:  # an engine crash costs this episode, not what was collected
            logger.warning("%s item %s crashed (%s); the episode is skipped", self.env_id, item_id, failure)
            self.crashed += 1
            close_quietly(self.env)
            self.env = self.make_env(self.env_id, **self.env_kwargs)
            return []
        row = trajectory.to_record()
        keeps = self.keep.keeps(trajectory.reward, trajectory.success)
        if self.log is not None:
            self.log.add(self.env_id, index, keeps, row)
        return self._count(row, keeps)

    def _count(self, row: dict[str, Any], kept: bool) -> list[dict[str, Any]]:
        self.played += 1
        self.solved += int(row["info"]["success"])
        self.kept += int(kept)
        return [row] if kept else []

    def counts(self) -> dict[str, float]:
        return {"played": self.played, "kept": self.kept, "success": self.solved, "crashed": self.crashed,
                "resumed": self.resumed, "seconds": round(time.perf_counter() - self.started, 3)}

    def close(self) -> None:
        close_quietly(self.env)


DATASETS_MISSING = ("saving and loading trajectory datasets needs the Hugging Face 'datasets' package, which is not "
                    "installed. Install it with: pip install 'agentgym-rl[collect]'")


def check_datasets_installed() -> None:
    """``MissingExtraError`` unless ``datasets`` can be imported: ``agentgym collect`` checks before playing."""
    import importlib.util

    try:
        found = importlib.util.find_spec("datasets") is not None
    except ValueError:  # in sys.modules without a spec
        found = True
    if not found:
        raise MissingExtraError(DATASETS_MISSING)


def _datasets_module():
    try:
        import datasets
    except ImportError as error:
        raise MissingExtraError(DATASETS_MISSING) from error
    return datasets


def rows_to_dataset(rows: Sequence[dict[str, Any]]):
    """A ``datasets.Dataset`` with the columns of ``COLUMNS`` (in that order)."""
    datasets = _datasets_module()
    flat = [dataset_row(row) for row in rows]
    return datasets.Dataset.from_dict({column: [row[column] for row in flat] for column in COLUMNS})


def dataset_row(record: dict[str, Any]) -> dict[str, Any]:
    """A record's ``COLUMNS`` (its info's ``success`` as a column of its own)."""
    flat = {**record, "success": bool(record["info"]["success"])}
    return {column: flat[column] for column in COLUMNS}


def save_trajectories(rows: Sequence[dict[str, Any]], out: str | os.PathLike) -> Path:
    """Write the rows with ``Dataset.save_to_disk``; refuses an empty collection (nothing to train on)."""
    if not rows:
        raise ValueError("no episode passed the keep rule, so there is nothing to save")
    rows_to_dataset(rows).save_to_disk(str(out))
    return Path(out)


def load_trajectories(path: str | os.PathLike):
    """The dataset written by ``save_trajectories`` / ``agentgym collect``."""
    return _datasets_module().load_from_disk(str(path))
