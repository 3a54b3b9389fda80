"""The ``vllm-trl`` engine: multi-turn rollouts on TRL's own vLLM integration (the GPU path).

TRL builds its ``VLLMGeneration`` from the config (``vllm_mode='colocate'``: an in-process engine per
rank, with tensor parallelism and sleep mode; ``vllm_mode='server'``: ``trl vllm-serve`` on GPUs of their
own, weights sent over NCCL, or ``vllm serve`` with what TRL 1.16's client needs of it:
``VLLM_SERVER_DEV_MODE=1`` in its environment, ``--weight-transfer-config '{"backend": "nccl"}'``,
``--logprobs-mode processed_logprobs`` and ``--max-logprobs -1``, as ``trl vllm-serve`` passes them;
docs/engines.md) and syncs its weights before each rollout, under DDP, DeepSpeed and FSDP alike.
``TRLVLLMGenerator`` drives that object one turn at a time through the project's ``Generator`` interface,
so the episode loop, the env masks and the log-probs stay as they are.

What one turn needs that TRL's single-turn call does not give on its own:

* ``max_new_tokens`` per context: the call samples up to the largest, and each row is cut at its own
  limit (``cut_turn``), as the other engines do. The engine's context must hold a full context plus a
  full turn (``required_model_len``).
* the chat template's end-of-turn ids stop a turn (``stop_token_ids``), not only the model's eos.
* collective calls: in server mode (and colocate with tensor parallelism) TRL gathers every rank's
  prompts and slices the answers back by rank, assuming each rank sent as many. So, where the call is
  collective, every rank pads its contexts to the largest count with a one-token filler, and keeps
  generating (``any_active``) until no rank has an episode left.
* sleep mode: TRL puts the engine to sleep after every call; a rollout of several turns wakes it once
  when it starts and puts it to sleep once when it ends.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from agentgym_trl.engines.base import Sampling, TurnOutput, cut_turn

def check_server_context(vllm_generation: Any, needed: int) -> None:
    """Fail at start, with the fix, when a ``vllm serve`` engine's context cannot hold a whole context plus a turn
    (its completions API would refuse those requests in the middle of training). Main process only: it holds the
    client."""
    client = getattr(vllm_generation, "vllm_client", None)
    if client is None:
        return
    served = client.get_server_info().get("model_config", {}).get("max_model_len")
    if served is not None and int(served) < needed:
        raise ValueError(f"the vLLM server's max_model_len is {served}; a turn may need {needed} tokens "
                         f"(max_context_tokens + max_turn_tokens): restart it with --max-model-len {needed} or lower "
                         "max_context_tokens")


class TRLVLLMGenerator:
    """The ``Generator`` over TRL's ``VLLMGeneration`` (``trainer.vllm_generation``), one batched call per turn.

    ``collective``: whether TRL's call is a collective over ranks (server mode with several processes, or
    colocate with tensor parallelism); then every rank calls it every turn with as many contexts.
    ``filler_id``: the one token of a padding context. ``sampling``: the trainer's, or greedy (ReMax's baseline).
    """

    def __init__(self, vllm_generation: Any, sampling: Sampling, stop_ids: Sequence[int], *, collective: bool,
                 filler_id: int, device: torch.device | str = "cpu"):
        self.vllm = vllm_generation
        self.stop_ids = tuple(stop_ids)
        self.collective = collective
        self.filler_id = int(filler_id)
        self.device = torch.device(device)
        self.sampling = {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k}
        self.calls = 0
        self.padded_rows = 0  # filler rows sent so that every rank's call held as many contexts

    # ---- the Generator interface ---------------------------------------------------------------------
    @contextmanager
    def session(self) -> Iterator[Any]:
        """The rollout's hold on the engine: with sleep mode, awake (weights and KV cache) for all its turns and
        asleep after, instead of TRL's sleep after every call."""
        vllm = self.vllm
        sleeps = getattr(vllm, "mode", None) == "colocate" and bool(getattr(vllm, "enable_sleep_mode", False))
        if not sleeps:
            yield vllm
            return
        if getattr(vllm, "_llm_weights_sleeping", False):
            vllm.sync_weights()  # sleep level 2 dropped them: the current policy's weights go back in (wakes them)
        vllm.llm.wake_up(tags=["kv_cache"])
        vllm.enable_sleep_mode = False  # TRL's generate would sleep after each turn and re-push weights before the next
        try:
            yield vllm
        finally:
            vllm.enable_sleep_mode = True
            vllm.llm.sleep(level=2)
            vllm._llm_weights_sleeping = True

    def any_active(self, local_active: int) -> bool:
        """Whether to play another turn: while any rank has an episode, where the call is collective.

        Args:
            local_active: this process's episodes still playing.

        Returns:
            Whether to generate again.
        """
        return self._largest_over_ranks(local_active) > 0 if self.collective else local_active > 0

    def reseed(self, seed: int) -> None:
        """TRL's engine seeds itself once per rank (colocate) or per server; its calls take no per-request seeds,
        so a replayed batch samples anew (the process engine replays alike)."""

    def generate(self, contexts: Sequence[Sequence[int]], max_new_tokens: Sequence[int]) -> list[TurnOutput]:
        """One turn for every context in one call to TRL's engine.

        Args:
            contexts: each trajectory's whole token stream so far.
            max_new_tokens: per context, the most tokens this turn may sample.

        Returns:
            Per context, the ids up to the first stop id or its limit, the engine's log-probs (NaN where it gave none)
            and whether a stop id ended the turn.
        """
        rows = [list(map(int, context)) for context in contexts]
        limits = [int(limit) for limit in max_new_tokens]
        width = self._largest_over_ranks(len(rows)) if self.collective else len(rows)
        if width == 0:
            return []
        padding = width - len(rows)
        self.padded_rows += padding
        prompts = rows + [[self.filler_id]] * padding
        largest = max(limits) if limits else 1
        completions, logprobs = self._call(prompts, largest)
        outputs = []
        for row, limit in enumerate(limits):
            row_logprobs = logprobs[row] if logprobs is not None else None
            values = [nan_if_missing(step) for step in row_logprobs] if row_logprobs is not None else []
            values += [math.nan] * (len(completions[row]) - len(values))
            outputs.append(cut_turn(list(completions[row]), values, limit, self.stop_ids))
        return outputs

    # ---- helpers -------------------------------------------------------------------------------------
    def _call(self, prompts: list[list[int]], max_tokens: int) -> tuple[list[list[int]], list | None]:
        """TRL's ``generate`` with this turn's token limit, sampling settings and stop ids (restored after)."""
        vllm = self.vllm
        saved = {name: getattr(vllm, name) for name in ("max_completion_length", *self.sampling, "generation_kwargs")}
        vllm.max_completion_length = max_tokens
        for name, value in self.sampling.items():
            setattr(vllm, name, value)
        vllm.generation_kwargs = {**(saved["generation_kwargs"] or {}), "stop_token_ids": list(self.stop_ids)}
        try:
            _, completion_ids, logprobs, _ = vllm.generate(prompts, None, num_generations=1)
        finally:
            for name, value in saved.items():
                setattr(vllm, name, value)
        self.calls += 1
        return completion_ids, logprobs

    def _largest_over_ranks(self, value: int) -> int:
        """``value``'s maximum over every rank (the value itself outside a distributed run)."""
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return value
        tensor = torch.tensor([value], dtype=torch.long, device=self.device)
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
        return int(tensor.item())


def nan_if_missing(step: Any) -> float:
    """One token's log-prob from TRL's ``(num_logprobs,)`` list (the sampled token first), NaN where vLLM gave
    none (TRL's importance correction skips NaN)."""
    if isinstance(step, (list, tuple)):
        step = step[0] if step else None
    return math.nan if step is None else float(step)
