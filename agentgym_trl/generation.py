"""Generation backends for the rollout: one batched call per turn over the still-active trajectories.

``HFGenerator`` runs ``model.generate`` (CPU, tests, single GPU). ``VLLMGenerator`` goes through
TRL's vLLM integration (``use_vllm=True``, server or colocate mode) on GPU machines. Both return,
per context, the sampled ids, their log-probabilities under the sampling temperature (from the raw
logits, the distribution the trainer scores) and whether the turn ended on a stop token.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import torch


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


def cut_turn(ids: Sequence[int], logprobs: Sequence[float], limit: int, stop_ids: Sequence[int]) -> TurnOutput:
    """Keep a sampled row up to its first stop id (inclusive) or its own token limit."""
    stops = set(stop_ids)
    for position, token in enumerate(ids[:limit]):
        if token in stops:
            return TurnOutput(list(ids[: position + 1]), list(logprobs[: position + 1]), True)
    return TurnOutput(list(ids[:limit]), list(logprobs[:limit]), False)


class HFGenerator:
    """Batched sampling with ``model.generate``; log-probs from raw logits / temperature.

    ``generation_config`` should be a copy of the trainer's (TRL sets ``top_k=0``; a fresh
    ``GenerationConfig`` would sample with top-k 50, another distribution than the one trained).
    ``unwrap`` yields the model to generate with for the whole rollout (TRL's
    ``unwrap_model_for_generation`` under DDP / DeepSpeed / FSDP); by default the model itself.
    """

    def __init__(
        self,
        model: Any,
        generation_config: Any,
        pad_token_id: int,
        stop_ids: Sequence[int],
        unwrap: Callable[[], AbstractContextManager[Any]] | None = None,
    ):
        self.model = model
        self.generation_config = copy.deepcopy(generation_config)
        self.generation_config.eos_token_id = list(stop_ids)
        self.generation_config.pad_token_id = pad_token_id
        self.generation_config.output_logits = True
        self.generation_config.return_dict_in_generate = True
        self.pad_token_id = pad_token_id
        self.stop_ids = tuple(stop_ids)
        sampling = bool(getattr(self.generation_config, "do_sample", False))
        temperature = getattr(self.generation_config, "temperature", None) or 1.0
        self.temperature = float(temperature) if sampling else 1.0
        self._unwrap = unwrap
        self._active_model: Any = None

    @contextmanager
    def session(self) -> Iterator[Any]:
        manager = self._unwrap() if self._unwrap is not None else nullcontext(self.model)
        with manager as model, torch.no_grad():
            self._active_model = model
            try:
                yield model
            finally:
                self._active_model = None

    def any_active(self, local_active: int) -> bool:
        return local_active > 0

    def generate(self, contexts: Sequence[Sequence[int]], max_new_tokens: Sequence[int]) -> list[TurnOutput]:
        if not contexts:
            return []
        model = self._active_model if self._active_model is not None else self.model
        device = next(model.parameters()).device
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, context in enumerate(contexts):  # left padding: every row's next token is at the end
            input_ids[row, width - len(context) :] = torch.tensor(context, dtype=torch.long)
            attention_mask[row, width - len(context) :] = 1
        config = copy.copy(self.generation_config)
        config.max_new_tokens = int(max(max_new_tokens))
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), generation_config=config
            )
        sampled = out.sequences[:, width:]
        steps = sampled.shape[1]
        logprobs = torch.zeros(sampled.shape, dtype=torch.float32)
        for step in range(steps):  # one (batch, vocab) slice at a time: never a (batch, steps, vocab) copy
            scores = torch.log_softmax(out.logits[step].float() / self.temperature, dim=-1)
            logprobs[:, step] = scores.gather(1, sampled[:, step : step + 1]).squeeze(1).cpu()
        sampled_rows = sampled.cpu().tolist()
        logprob_rows = logprobs.tolist()
        return [
            cut_turn(ids, lps, int(limit), self.stop_ids)
            for ids, lps, limit in zip(sampled_rows, logprob_rows, max_new_tokens, strict=True)
        ]


class VLLMGenerator:
    """Generation through TRL's ``VLLMGeneration`` (``use_vllm=True``; GPU only, not exercised on CPU CI).

    TRL's vLLM calls are collective (server mode gathers prompts from every rank and slices the
    answers by rank, assuming equal counts), so every rank calls ``generate`` the same number of
    times with the same number of prompts: finished slots are padded with a one-token dummy prompt,
    and the turn loop runs until no rank has an active trajectory.
    """

    def __init__(self, vllm_generation: Any, accelerator: Any, stop_ids: Sequence[int], slots: int, pad_token_id: int):
        self.vllm_generation = vllm_generation
        self.accelerator = accelerator
        self.stop_ids = tuple(stop_ids)
        self.slots = slots
        self.pad_token_id = pad_token_id

    def session(self) -> AbstractContextManager[Any]:
        return nullcontext()

    def any_active(self, local_active: int) -> bool:
        count = torch.tensor([local_active], device=self.accelerator.device)
        return bool(self.accelerator.reduce(count, reduction="sum").item() > 0)

    def generate(self, contexts: Sequence[Sequence[int]], max_new_tokens: Sequence[int]) -> list[TurnOutput]:
        if len(contexts) > self.slots:
            raise ValueError(f"{len(contexts)} contexts for {self.slots} vLLM slots")
        padded = [list(c) for c in contexts] + [[self.pad_token_id]] * (self.slots - len(contexts))
        self.vllm_generation.max_completion_length = int(max(max_new_tokens, default=1))
        _, completion_ids, logprobs, _ = self.vllm_generation.generate(prompts=padded, images=None, num_generations=1)
        outputs = []
        for row, limit in enumerate(max_new_tokens):
            row_logprobs = [lp[0] if lp and lp[0] is not None else 0.0 for lp in logprobs[row]]
            outputs.append(cut_turn(completion_ids[row], row_logprobs, int(limit), self.stop_ids))
        return outputs
