"""A toy generation engine, added as any engine is: this one module and one ``register_engine``.

``ScriptedGenerator`` needs no model: every turn it answers with the same token ids (log-prob 0 each), cut at the
turn's limit, ended with the first stop id. Nothing in ``agentgym_trl`` names it; ``AgentGRPOConfig(engine=KIND)``
trains with it and ``make_generator(KIND, ...)`` builds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

from agentgym_trl.engines import ENGINES, Engine, Sampling, TurnOutput, cut_turn, register_engine

KIND = "toy-scripted"
REPLY_IDS = (5, 6, 7)


class ScriptedGenerator:
    def __init__(self, sampling: Sampling, stop_ids: Sequence[int], reply_ids: Sequence[int] = REPLY_IDS):
        self.sampling, self.stop_ids, self.reply_ids = sampling, tuple(stop_ids), tuple(reply_ids)
        self.calls = 0

    def session(self) -> Any:
        return nullcontext(self)

    def any_active(self, local_active: int) -> bool:
        return local_active > 0

    def reseed(self, seed: int) -> None:
        pass

    def generate(self, contexts: Sequence[Sequence[int]], max_new_tokens: Sequence[int]) -> list[TurnOutput]:
        self.calls += 1
        reply = [*self.reply_ids, self.stop_ids[0]]
        return [cut_turn(reply, [0.0] * len(reply), int(limit), self.stop_ids) for limit in max_new_tokens]


def build(sampling: Sampling, stop_ids: tuple[int, ...], **_: Any) -> ScriptedGenerator:
    return ScriptedGenerator(sampling, stop_ids)


if KIND not in ENGINES:  # imported by several test modules in one process: registered once
    register_engine(Engine(kind=KIND, summary="the same reply every turn (tests)", build=build))
