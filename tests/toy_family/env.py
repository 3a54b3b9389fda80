"""A frog on stone 0 hops to stone ``item_id``: the smallest complete ``TextEnv``."""

from __future__ import annotations

import numpy as np

from agentgym_envs.core import Outcome, Start, TextEnv

ACTIONS = ("hop", "wait")
INSTRUCTION = ("A frog sits on stone 0 of a row of stones. Reach the stone you are told. Each turn answer with\n"
               "Thought:\n<your reasoning>\n\nAction:\n<hop or wait>")


class FrogEnv(TextEnv):
    family = "toy"

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        self._stone, self._goal = 0, item_id
        return Start(INSTRUCTION, f"You are on stone 0. Reach stone {item_id}.")

    def _act(self, action: str) -> Outcome:
        if action not in ACTIONS:
            return Outcome(f"{action!r} is not an action here. Choose one of: {', '.join(ACTIONS)}.", valid=False,
                           progress=self._stone / self._goal)
        self._stone += action == "hop"
        reached = self._stone == self._goal
        return Outcome(f"You are on stone {self._stone} of {self._goal}.", progress=self._stone / self._goal,
                       score=float(self._stone), done=reached, success=reached)

    def available_actions(self) -> list[str]:
        return list(ACTIONS)

    def oracle_action(self) -> str:
        return "Thought: closer.\nAction: hop"
