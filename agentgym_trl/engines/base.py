"""What every generation engine shares: the ``Generator`` interface, one turn's output, and the sampling record.

An engine samples one turn for a batch of episodes: token ids in (each episode's whole stream so far), the
sampled ids out, with their log-probs under the sampling temperature (the distribution the trainer scores) and
whether a stop id ended the turn. ``Sampling`` is what it samples with, the same record for every engine; the HF
engine alone turns it into a transformers ``GenerationConfig``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class TurnOutput:
    """One model turn: sampled ids, their log-probs, and whether it ended on a stop id."""

    ids: list[int]
    logprobs: list[float]
    stopped: bool


class Generator(Protocol):
    stop_ids: tuple[int, ...]

    def session(self) -> AbstractContextManager[Any]:
        """Context held for a whole rollout (e.g. gathered weights under ZeRO-3)."""

    def generate(self, contexts: Sequence[Sequence[int]], max_new_tokens: Sequence[int]) -> list[TurnOutput]:
        """One turn for every context; ``max_new_tokens[i]`` caps context ``i``."""

    def any_active(self, local_active: int) -> bool:
        """Whether another turn is needed (across ranks when the backend needs every rank to join each call)."""

    def reseed(self, seed: int) -> None:
        """Make the next calls' sampling a function of ``seed`` (a resumed evaluation replays alike)."""


def cut_turn(ids: Sequence[int], logprobs: Sequence[float], limit: int, stop_ids: Sequence[int]) -> TurnOutput:
    """Keep a sampled row up to its first stop id (inclusive) or its own token limit."""
    stops = set(stop_ids)
    for position, token in enumerate(ids[:limit]):
        if token in stops:
            return TurnOutput(list(ids[: position + 1]), list(logprobs[: position + 1]), True)
    return TurnOutput(list(ids[:limit]), list(logprobs[:limit]), False)


@dataclass(frozen=True)
class Sampling:
    """How a turn is sampled, for every engine: ``temperature`` 0 is greedy; ``top_k`` 0 and ``top_p`` 1 sample
    from the whole distribution (the one TRL trains on: transformers' own default would be top-k 50)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"bad sampling: temperature {self.temperature} (>= 0), top_p {self.top_p} (in (0, 1]), "
                             f"top_k {self.top_k} (>= 0)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @classmethod
    def of(cls, generation_config: Any) -> Sampling:
        """The sampling a transformers ``GenerationConfig`` (TRL's or a model's) describes."""
        if not getattr(generation_config, "do_sample", False):
            return cls(temperature=0.0)
        return cls(temperature=float(getattr(generation_config, "temperature", None) or 1.0),
                   top_p=float(getattr(generation_config, "top_p", None) or 1.0),
                   top_k=int(getattr(generation_config, "top_k", None) or 0))

    @classmethod
    def at(cls, temperature: float) -> Sampling:
        """Sampling at ``temperature`` from the whole distribution (top-k 0, top-p 1); 0 is greedy."""
        return cls(temperature=float(temperature))

    def generation_config(self, base: Any) -> Any:
        """``base`` (the model's or TRL's ``GenerationConfig``, with its ids and other settings) set to sample so."""
        config = copy.deepcopy(base)
        if self.greedy:
            config.do_sample, config.temperature, config.top_k, config.top_p = False, None, None, None
        else:
            config.do_sample, config.temperature = True, float(self.temperature)
            config.top_k, config.top_p = self.top_k, self.top_p
        return config
