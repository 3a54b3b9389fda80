"""Training rows from the envs' splits: one row per (env id, item id), mixtures of several env ids allowed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import agentgym_envs
from agentgym_envs.core.tasks import NAMESPACE


def check_env_ids(env_ids: Sequence[str]) -> None:
    """Fail early, with the list of valid ids, on an id Gymnasium does not know or whose extra is missing."""
    if isinstance(env_ids, str):
        env_ids = [env_ids]
    if not env_ids:
        raise ValueError("no env ids given; pass at least one, e.g. --env_ids AgentGym/TextCraft-Depth1-v0")
    for env_id in env_ids:
        try:
            gym.spec(env_id)
        except gym.error.Error:
            known = [spec.env_id for spec in agentgym_envs.list_tasks()]
            raise ValueError(
                f"unknown env id {env_id!r}: it is not registered with Gymnasium. Registered AgentGym ids: "
                f"{', '.join(known)}"
            ) from None
        spec = _task_or_none(env_id)
        if spec is not None and not spec.extra_installed():
            raise ValueError(f"{env_id} needs an optional dependency that is not installed: {spec.install_hint}")


def _task_or_none(env_id: str):
    try:
        return agentgym_envs.get_task(env_id)
    except KeyError:
        return None


def placeholder_prompt(env_id: str, item_id: int) -> list[dict[str, str]]:
    """What TRL logs as the row's prompt; the real first turn comes from ``env.reset`` in the rollout."""
    return [{"role": "user", "content": f"[{env_id} item {item_id}]"}]


def env_rows(
    env_ids: Sequence[str],
    split: str = "train",
    max_items_per_env: int | None = None,
    seed: int = 0,
    only_items: dict[str, list[int]] | None = None,
) -> list[dict[str, Any]]:
    """Rows ``{"prompt", "env_id", "item_id"}`` for every item of ``split`` of each env id (or, with
    ``only_items``, for those of its items only; an item outside ``split`` is an error)."""
    check_env_ids(env_ids)
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for env_id in env_ids:
        spec = _task_or_none(env_id)
        if spec is None:
            raise ValueError(
                f"{env_id} is not an {NAMESPACE} task, so it has no item splits: pass a train_dataset with "
                "'env_id' and 'item_id' columns for it (docs/own_env.md: train on your own env)"
            )
        items = spec.split(split)
        if not items:
            raise ValueError(f"{env_id} has no {split!r} items")
        if only_items is not None:
            items = sorted(set(spec.named_items(split, only_items[env_id])))
        if max_items_per_env is not None and len(items) > max_items_per_env:
            items = sorted(rng.choice(items, size=max_items_per_env, replace=False).tolist())
        rows.extend({"prompt": placeholder_prompt(env_id, i), "env_id": env_id, "item_id": int(i)} for i in items)
    return rows


def build_env_dataset(
    env_ids: Sequence[str],
    split: str = "train",
    max_items_per_env: int | None = None,
    seed: int = 0,
    only_items: dict[str, list[int]] | None = None,
):
    """A ``datasets.Dataset`` of ``env_rows`` (TRL's sampler shuffles it and repeats each row per generation)."""
    from datasets import Dataset

    return Dataset.from_list(env_rows(env_ids, split, max_items_per_env, seed, only_items))


def prepare_rows_dataset(dataset: Any) -> Any:
    """Check a user dataset's ``env_id`` / ``item_id`` columns and add TRL's ``prompt`` column if missing."""
    columns = set(dataset.column_names)
    missing = {"env_id", "item_id"} - columns
    if missing:
        raise ValueError(
            f"the dataset lacks the column(s) {sorted(missing)}; each row must name an env id and an item id "
            "(agentgym_trl.data.build_env_dataset builds one from the envs' splits)"
        )
    check_env_ids(sorted(set(dataset["env_id"])))
    if "prompt" not in columns:
        dataset = dataset.map(lambda row: {"prompt": placeholder_prompt(row["env_id"], row["item_id"])})
    return dataset
