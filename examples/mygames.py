"""docs/own_env.md's guessing game as a module: importing it registers ``MyGames/Guess-v0``, so Gymnasium's
``module:EnvId`` form reaches it from any tool (``agentgym eval --env examples.mygames:MyGames/Guess-v0``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentgym_envs.core import TextSpace


class GuessEnv(gym.Env):
    """Guess a number from 1 to 9; each wrong guess says higher or lower."""

    def __init__(self):
        self.observation_space, self.action_space = TextSpace(1000), TextSpace(10_000)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self.secret = 1 + int((options or {}).get("item_id", 0)) % 9
        info = {"instruction": "Guess my number from 1 to 9. Reply with the number only."}
        return "Your first guess?", info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        digits = [c for c in action if c in "0123456789"]  # not isdigit(): "²" is a digit int() refuses
        guess = int(digits[0]) if digits else 0
        if guess == self.secret:
            return "Right!", 1.0, True, False, {"success": True}
        return ("Higher." if guess < self.secret else "Lower."), 0.0, False, False, {"success": False}


if "MyGames/Guess-v0" not in gym.registry:
    gym.register("MyGames/Guess-v0", entry_point=GuessEnv, max_episode_steps=5)
