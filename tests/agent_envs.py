"""Small text envs registered with Gymnasium for the trainer tests (no engine, fully deterministic).

``AgentGymTest/Countdown-v0``: item ``i`` needs ``1 + i % 3`` turns; the last turn succeeds (reward 1)
when the response has an even number of characters, so a random model gets mixed rewards within a
group; the oracle answers "ok", which succeeds. Item 999 raises on its first step (an engine crash).
``AgentGymTest/SlowCountdown-v0`` sleeps ``0.3`` s per step (a slow engine or remote server).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from agentgym_envs.core import TextSpace

COUNTDOWN = "AgentGymTest/Countdown-v0"
SLOW_COUNTDOWN = "AgentGymTest/SlowCountdown-v0"
CRASHING_ITEM = 999
INSTRUCTION = "Reply once per turn. The episode ends after the announced number of turns."


class CountdownEnv(gym.Env[str, str]):
    metadata = {"render_modes": []}

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.observation_space = TextSpace(10_000)
        self.action_space = TextSpace(100_000)
        self.item_id = 0
        self.target = 1
        self.turn = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.item_id = int((options or {}).get("item_id", 0))
        self.target = 1 + self.item_id % 3
        self.turn = 0
        info = {"instruction": INSTRUCTION, "item_id": self.item_id, "success": False, "valid_action": True}
        return f"Item {self.item_id}: reply {self.target} times.", info

    def step(self, action: str):
        if self.delay:
            time.sleep(self.delay)
        if self.item_id == CRASHING_ITEM:
            raise RuntimeError("engine crashed")
        self.turn += 1
        valid = bool(action.strip())
        if self.turn >= self.target:
            success = len(action) % 2 == 0
            info = {"success": success, "valid_action": valid, "item_id": self.item_id}
            return "Episode over.", float(success), True, False, info
        info = {"success": False, "valid_action": valid, "item_id": self.item_id}
        return f"Tick {self.turn} of {self.target}.", 0.0, False, False, info

    def oracle_action(self) -> str:
        """An even-length reply: every turn of the oracle's solution (``target`` of them) plays it."""
        return "ok"


def register() -> None:
    if COUNTDOWN not in gym.registry:
        gym.register(COUNTDOWN, entry_point=CountdownEnv, max_episode_steps=30)
    if SLOW_COUNTDOWN not in gym.registry:
        gym.register(SLOW_COUNTDOWN, entry_point=CountdownEnv, kwargs={"delay": 0.3}, max_episode_steps=30)


register()
