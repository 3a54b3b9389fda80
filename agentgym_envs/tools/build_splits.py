"""Regenerate ``splits.json``: ``python -m agentgym_envs.tools.build_splits``.

Every env's items are generated from its local index: the test split is local 0-19 (20 items
like AgentGym; the templates rotate with the index, so every template appears twice), the train
split the next 400 items. A train item that asks the same question as a test item (same text and,
for Weather, the same day and place; for Sheet and TODOList, the same data too) is skipped, and an item the oracle
cannot solve is left out
of both splits, so the table only lists episodes that are known to be solvable.
"""

from __future__ import annotations

import json

import gymnasium as gym
from tqdm import tqdm

import agentgym_envs  # noqa: F401  (registers the ids)
from agentgym_envs.core.tasks import NAMESPACE, write_splits
from agentgym_envs.tools.tasks import ENVS

TEST_SIZE = 20
TRAIN_SIZE = 400


def solve(env: gym.Env, item_id: int) -> tuple[bool, str]:
    """Play the oracle on one item; returns (success, the question's identity)."""
    obs, info = env.reset(options={"item_id": item_id})
    base = env.unwrapped
    context = getattr(getattr(base, "current", None), "context", {}) or {}
    key = obs + json.dumps(context, sort_keys=True)
    if getattr(base, "stateful", False):  # per-item data: the same wording over other data is another task
        key += repr(base.service.state())
    for _ in range(50):
        obs, _, terminated, truncated, info = env.step(base.oracle_action())
        if terminated or truncated:
            break
    return bool(info["success"]), key


def build() -> dict[str, dict[str, list[int]]]:
    """The tool envs' splits: for each env, the first ``TEST_SIZE`` items the oracle solves as the test split, then
    ``TRAIN_SIZE`` more solved items whose question is none of the test questions (so none leaks into training).

    Returns:
        {env name: {"train": item ids, "test": item ids}}.
    """
    splits = {}
    for name, (offset, _, _, _) in ENVS.items():
        env = gym.make(f"{NAMESPACE}/{name}-v0", max_episode_steps=50)
        test, seen = [], set()
        local = 0
        while len(test) < TEST_SIZE:
            ok, key = solve(env, offset + local)
            if ok:
                test.append(offset + local)
                seen.add(key)
            local += 1
        train = []
        with tqdm(total=TRAIN_SIZE, desc=name) as bar:
            while len(train) < TRAIN_SIZE:
                ok, key = solve(env, offset + local)
                if ok and key not in seen:
                    train.append(offset + local)
                    bar.update()
                local += 1
        env.close()
        splits[name] = {"train": train, "test": test}
    return splits


if __name__ == "__main__":
    print(f"wrote {write_splits(__file__, build())}")
