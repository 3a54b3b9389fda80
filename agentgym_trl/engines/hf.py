"""The HF engine: ``model.generate`` in the trainer's (or evaluator's) own process.

One batched call per turn over the episodes still playing, with each episode's key/value states kept from one
turn to the next, what the first turn's rows share (a family's instruction, a group's prompt) prefilled once,
a bf16 sampling copy of the weights on CPUs that run bf16 natively, and every rank in step under ZeRO-3 / FSDP.
Log-probs come from the raw logits over the sampling temperature, the distribution the trainer scores.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import torch

from agentgym_trl.engines.base import TurnOutput, cut_turn

logger = logging.getLogger(__name__)

def cache_layers(cache: Any) -> list[tuple[Any, Any]]:
    """Per layer (keys, values) of a transformers cache, ``(None, None)`` where a layer keeps none."""
    return [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in getattr(cache, "layers", [])]


@dataclass
class CachedPrefix:
    """Key/value states of one trajectory's tokens so far (``ids``), kept between its turns."""

    ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values, (heads, len(ids), head_dim)


@dataclass
class GenerationTiming:
    """Where a generator's time went, summed over its calls: the model's forwards that encode prompts (prefills)
    and those that feed back one sampled token per row (decode steps), and the rest of ``generate`` (sampling from
    the logits, stopping checks, the cache's bookkeeping). Positions count rows times tokens, padding included, so a
    rate per position can be set against the machine's matmul peak (``benchmarks/bench_cpu_class.py``)."""

    prefill_s: float = 0.0
    prefill_positions: int = 0
    decode_s: float = 0.0
    decode_steps: int = 0
    decode_positions: int = 0
    #: whole ``generate`` calls and the shared prefixes' forwards (before them): all the generator's model time
    generator_s: float = 0.0

    @property
    def other_generator_s(self) -> float:
        """The generator's time outside the model's forwards (sampling, stopping checks, cache bookkeeping)."""
        return max(self.generator_s - self.prefill_s - self.decode_s, 0.0)

    def to_dict(self) -> dict[str, float]:
        """The sums, and the rest of the generator's time, rounded for a result file."""
        return {key: round(value, 3) if isinstance(value, float) else value
                for key, value in {**asdict(self), "other_generator_s": self.other_generator_s}.items()}

    @contextmanager
    def measuring(self, model: torch.nn.Module) -> Iterator[None]:
        """Add the block's wall time to ``generator_s`` and each forward of ``model`` inside it to the sums: the
        first is a prefill (a ``generate`` call's encoding of the uncached tokens, however few, or a shared
        prefix's forward), each later one a decode step. Two hooks and no sync: on a GPU the times are those of
        the launches."""
        started: list[tuple[float, int]] = []
        calls = 0

        def before(_module: Any, args: tuple, kwargs: dict) -> None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            ids = kwargs.get("inputs_embeds") if ids is None else ids
            started.append((time.perf_counter(), int(ids.shape[0]) * int(ids.shape[1]) if ids is not None else 0))

        def after(_module: Any, _args: tuple, _kwargs: dict, _output: Any) -> None:
            nonlocal calls
            begun, positions = started.pop()
            seconds = time.perf_counter() - begun
            calls += 1
            if calls == 1:
                self.prefill_s += seconds
                self.prefill_positions += positions
            else:
                self.decode_s += seconds
                self.decode_steps += 1
                self.decode_positions += positions

        handles = [model.register_forward_pre_hook(before, with_kwargs=True),
                   model.register_forward_hook(after, with_kwargs=True)]
        block_started = time.perf_counter()
        try:
            yield
        finally:
            self.generator_s += time.perf_counter() - block_started
            for handle in handles:
                handle.remove()


def common_length(first: Sequence[int], second: Sequence[int]) -> int:
    """How many leading tokens two contexts share, leaving each at least one token of its own to encode (the
    turn's first sampled token comes from the logits of a context's last token)."""
    limit = min(len(first), len(second)) - 1
    length = 0
    while length < limit and first[length] == second[length]:
        length += 1
    return length


def shared_prefixes(contexts: Sequence[Sequence[int]], min_tokens: int) -> list[tuple[int, ...]]:
    """The prefixes worth encoding once for a batch: contexts sorted, cut into runs whose neighbours share at least
    ``min_tokens`` leading tokens, and per run of two rows or more the prefix all of it shares.

    Sorting puts contexts with long common prefixes next to each other, so one pass over neighbours finds
    each family's instruction and opening in a batch of several families, and a GRPO group's whole prompt
    (less its last token) where the batch is one item's samples.
    """
    ordered = sorted(tuple(context) for context in contexts)
    prefixes: list[tuple[int, ...]] = []
    start, shortest = 0, None
    for index in range(1, len(ordered) + 1):
        shared = common_length(ordered[index - 1], ordered[index]) if index < len(ordered) else 0
        if shared >= min_tokens:
            shortest = shared if shortest is None else min(shortest, shared)
            continue
        if shortest is not None and index - start >= 2:
            prefixes.append(ordered[start][:shortest])
        start, shortest = index, None
    return prefixes


def cast_tensors(model: torch.nn.Module, dtype: torch.dtype) -> dict[int, torch.Tensor]:
    """A ``copy.deepcopy`` memo that puts a ``dtype`` copy of each floating-point parameter and buffer in place of
    the original, so the model's copy is made in ``dtype`` directly: ``deepcopy(model).to(dtype)`` would first hold a
    second full-precision model (0.5 GB at 135M parameters, while the optimizer's state is resident). Tied weights
    stay tied (one entry per tensor); gradients are not copied."""
    memo: dict[int, torch.Tensor] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point() and id(tensor) not in memo:
            cast = tensor.detach().to(dtype, copy=True)
            memo[id(tensor)] = torch.nn.Parameter(cast, requires_grad=tensor.requires_grad) \
                if isinstance(tensor, torch.nn.Parameter) else cast  # as ``.to(dtype)`` leaves them (hooks need it)
    return memo


def progress_wanted(progress: bool | None) -> bool | None:
    """tqdm's ``disable`` for a rollout bar: never on a rank but the first (one bar per launch); otherwise as
    asked, and by default (``None``) only where stderr is a terminal, so logs and CI stay clean."""
    if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        return True
    return None if progress is None else not progress


class DecodeProgress:
    """A tqdm bar over the decode steps of one turn's batched ``generate`` (with its ETA), as a streamer.

    transformers hands a streamer the prompt first, then each step's new tokens: so a turn that takes
    a minute on a CPU shows which turn of the rollout it is, how many episodes it decodes, and how far.
    """

    def __init__(self, turn: int, episodes: int, max_new_tokens: int, disable: bool | None):
        from tqdm import tqdm

        self.bar = tqdm(total=max_new_tokens, desc=f"rollout turn {turn}: {episodes} episodes", unit="tok",
                        leave=False, disable=disable, dynamic_ncols=True)
        self._prompt_seen = False

    @property
    def shown(self) -> bool:
        """Whether the bar is displayed (the caller skips the streamer's per-step copy when nobody watches)."""
        return not self.bar.disable

    def put(self, value: torch.Tensor) -> None:
        """The streamer hook: count one decode step (the first call carries the prompt, not a new token)."""
        if self._prompt_seen:
            self.bar.update(1)
        self._prompt_seen = True

    def end(self) -> None:
        """The streamer hook at the end of ``generate``: close the turn's bar."""
        self.bar.close()


def generation_synced(model: Any) -> bool:
    """Whether ``model.generate`` must run in step on every rank (transformers' ``synced_gpus``): DeepSpeed ZeRO-3,
    or a model managed by FSDP (FSDP1, transformers' FSDP2, or ``fully_shard`` as Accelerate applies it, whose
    forward all-gathers), with more than one process. Then a rank that stops calling ``generate`` early, or calls
    its model once more, leaves the others waiting in a collective.

    transformers 5.23 checks only its own FSDP2 marker, so an Accelerate ``fully_shard`` model would be sampled
    unsynced; ``HFGenerator`` passes this decision to ``generate`` explicitly instead.

    Args:
        model: the model that generates (unwrapped for generation).

    Returns:
        Whether every rank must take part in each generation step.
    """
    distributed = torch.distributed
    if not (distributed.is_available() and distributed.is_initialized()) or distributed.get_world_size() < 2:
        return False
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        return True
    try:
        from transformers.distributed.fsdp import is_fsdp_managed_module
    except ImportError:  # transformers before 5.x kept it under integrations
        from transformers.integrations.fsdp import is_fsdp_managed_module
    if is_fsdp_managed_module(model):
        return True
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return any(isinstance(module, FSDPModule) for module in model.modules())


class HFGenerator:
    """Batched sampling with ``model.generate``; log-probs from raw logits / temperature.

    With ``prefix_cache`` (the default) each trajectory's key/value states are kept from one turn to
    the next, so a turn encodes only the tokens added since (the last reply and the new observation)
    instead of the whole conversation again; on CPU that is most of a rollout's time. The states are
    dropped when the ``session`` ends, i.e. before the weights change.

    ``generation_config`` should be a copy of the trainer's (TRL sets ``top_k=0``; a fresh
    ``GenerationConfig`` would sample with top-k 50, another distribution than the one trained).
    ``unwrap`` yields the model to generate with for the whole rollout (TRL's
    ``unwrap_model_for_generation`` under DDP / DeepSpeed / FSDP); by default the model itself.

    With ``share_prompt_prefill`` (and the prefix cache), on a turn whose rows keep no states yet (the first),
    what several rows share is encoded once and its states copied to each row, instead of once per row: the
    longest token prefix common to a batch's items (a family's instruction and opening, at least
    ``min_shared_prefix`` tokens; per family when a batch mixes several), then on top of it the rest of each
    context that several rows share whole (a GRPO group's prompt). ``prefilled_tokens`` counts the positions
    run through the model in prefills (padding included, decode steps not), so the saving can be measured.

    With ``reserve_cache`` (the default) a turn's batch cache is a ``reserved_cache``: buffers sized for the
    context and the turn's most tokens, written in place at each decode step, instead of transformers'
    ``DynamicCache``, which concatenates, copying every layer's whole cache per step (22.5 of 56 s of a 4-turn,
    16-episode rollout in fp32 on 2 CPU cores, and a second copy of the cache at the memory peak).
    ``timing`` (``GenerationTiming``) sums the time of prefills, decode steps and the rest of ``generate``.

    ``progress`` shows a bar per turn (``DecodeProgress``): ``None`` (the default) where stderr is a
    terminal, ``True`` always, ``False`` never; only the first rank of a distributed run shows one.

    ``sampling_dtype`` (e.g. ``torch.bfloat16`` on a CPU with AVX512-BF16): sample from a copy of the weights
    in that dtype, refreshed when each session opens, instead of casting fp32 weights under autocast at every
    decode step (1.1-1.2x faster on 2 cores; the copy costs 2 bytes per parameter).

    ``logprobs=False`` (an evaluation, which records no log-probs): the turn's log-probs are zeros and ``generate``
    keeps no logits, which otherwise hold a fp32 row of the vocabulary per episode and decode step (290 MB for the
    main job's 31 evaluation episodes at 48 tokens) until the turn ends.

    Under ZeRO-3 or FSDP with several processes (``generation_synced``) every rank must join each generation step:
    ``any_active`` then asks all ranks (another turn while any has episodes), ``generate`` with no contexts still
    steps the model on a one-token dummy row, and neither the shared prompt prefill (an extra forward on some ranks
    only) nor the ``sampling_dtype`` copy (a second, unsynced model) is used.
    """

    def __init__(
        self,
        model: Any,
        generation_config: Any,
        pad_token_id: int,
        stop_ids: Sequence[int],
        unwrap: Callable[[], AbstractContextManager[Any]] | None = None,
        prefix_cache: bool = True,
        share_prompt_prefill: bool = True,
        progress: bool | None = None,
        sampling_dtype: torch.dtype | None = None,
        logprobs: bool = True,
        min_shared_prefix: int = 16,
        reserve_cache: bool = True,
    ):
        self.model = model
        self.logprobs = logprobs
        self.progress = progress
        self.sampling_dtype = sampling_dtype
        self._sampling_copy: Any = None
        self._turn = 0
        self.generation_config = copy.deepcopy(generation_config)
        self.generation_config.eos_token_id = list(stop_ids)
        self.generation_config.pad_token_id = pad_token_id
        self.generation_config.output_logits = logprobs  # a (batch, vocab) fp32 row per decode step, kept all turn
        self.generation_config.return_dict_in_generate = True
        self.pad_token_id = pad_token_id
        self.stop_ids = tuple(stop_ids)
        sampling = bool(getattr(self.generation_config, "do_sample", False))
        temperature = getattr(self.generation_config, "temperature", None) or 1.0
        self.temperature = float(temperature) if sampling else 1.0
        self._unwrap = unwrap
        self._active_model: Any = None
        self.prefix_cache = prefix_cache
        self.share_prompt_prefill = share_prompt_prefill
        self.min_shared_prefix = min_shared_prefix  # shorter common prefixes are not worth a forward of their own
        self.prefilled_tokens = 0  # positions run through the model in prefills (padding included), never reset
        self.reserve_cache = reserve_cache
        self.timing = GenerationTiming()  # never reset, like prefilled_tokens
        self._prefixes: list[CachedPrefix] = []
        self._synced: bool | None = None  # generation_synced of the session's model, decided once per session

    @property
    def synced(self) -> bool:
        """Whether generation runs in step across ranks (``generation_synced`` of the model that generates)."""
        if self._synced is None:
            return generation_synced(self._active_model if self._active_model is not None else self.model)
        return self._synced

    @contextmanager
    def session(self) -> Iterator[Any]:
        """Hold the model (unwrapped for generation, in ``sampling_dtype``) for a whole rollout, without
        gradients; the prefix cache lives only inside it, so states are never reused after the weights change.
        """
        manager = self._unwrap() if self._unwrap is not None else nullcontext(self.model)
        with manager as model, torch.no_grad():
            self._synced = generation_synced(model)
            self._active_model = model if self._synced else self._in_sampling_dtype(model)
            self._prefixes = []
            self._turn = 0
            try:
                yield model
            finally:
                self._active_model = None
                self._synced = None
                self._prefixes = []  # states of these weights: never reused after an optimizer step

    def any_active(self, local_active: int) -> bool:
        """Whether to generate another turn: while this process still has episodes playing, or, when generation is
        synced across ranks, while any rank has (the maximum over ranks, one all-reduce per turn; none otherwise).

        Args:
            local_active: this process's episodes still playing.

        Returns:
            Whether to generate again.
        """
        if not self.synced:
            return local_active > 0
        model = self._active_model if self._active_model is not None else self.model
        flag = torch.tensor(int(local_active > 0), device=next(model.parameters()).device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())

    def reseed(self, seed: int) -> None:
        """Seed torch's global generator, which ``model.generate`` samples from, so a batch replays alike.

        Args:
            seed: the batch's seed.
        """
        torch.manual_seed(seed)

    def drop_sampling_copy(self) -> None:
        """Free the ``sampling_dtype`` copy (2 bytes per parameter) until the next session makes it again: a trainer
        on a CPU drops it while it trains, where the memory peaks."""
        self._sampling_copy = None

    def _in_sampling_dtype(self, model: Any) -> Any:
        """``model`` itself, or its copy in ``sampling_dtype`` holding the current weights (made once, then
        refreshed in place: no allocation per rollout)."""
        if self.sampling_dtype is None or next(model.parameters()).dtype == self.sampling_dtype:
            return model
        if self._sampling_copy is None:
            sampler = copy.deepcopy(model, memo=cast_tensors(model, self.sampling_dtype)).eval()
            for patched in ("forward", "_original_forward"):  # accelerate's autocast wrapper: the copy runs as it is
                sampler.__dict__.pop(patched, None)
            self._sampling_copy = sampler
        else:
            self._sampling_copy.load_state_dict(model.state_dict())  # copy_ casts each tensor into the copy's dtype
        return self._sampling_copy

    def generate(self, contexts: Sequence[Sequence[int]], max_new_tokens: Sequence[int]) -> list[TurnOutput]:
        """One turn for every context in a batched ``model.generate``; with ``prefix_cache``, each context encodes
        only the tokens added since its cached prefix.

        Args:
            contexts: each trajectory's whole token stream so far (prompt and completion).
            max_new_tokens: per context, the most tokens this turn may sample.

        Returns:
            Per context, the sampled ids up to the first stop id or its limit, their log-probs under the sampling
            temperature (from the raw logits) and whether a stop id ended the turn.
        """
        model = self._active_model if self._active_model is not None else self.model
        synced = self.synced
        if not contexts:
            if synced:  # the other ranks still generate: step with them on a dummy row, keeping no state of it
                self._step_in_sync(model)
            return []
        device = next(model.parameters()).device
        # Layout of row i: [pad | cached ids_i | pad | new ids_i]; the pads are masked out, so row i's tokens see
        # exactly its own history, and positions (cumsum of the mask) continue where the cached ones stop.
        caching = self.prefix_cache and self._active_model is not None
        if caching and self.share_prompt_prefill and not synced:
            self._prefill_shared(model, contexts, device)
        cached = [self._cached_prefix(context) if caching else None for context in contexts]
        past_lengths = [len(prefix.ids) if prefix else 0 for prefix in cached]
        new_parts = [list(context[length:]) for context, length in zip(contexts, past_lengths, strict=True)]
        past_width, new_width = max(past_lengths), max(len(part) for part in new_parts)
        input_ids = torch.full((len(contexts), past_width + new_width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, (length, part) in enumerate(zip(past_lengths, new_parts, strict=True)):
            attention_mask[row, past_width - length : past_width] = 1
            input_ids[row, past_width + new_width - len(part) :] = torch.tensor(part, dtype=torch.long)
            attention_mask[row, past_width + new_width - len(part) :] = 1
        config = copy.copy(self.generation_config)
        config.max_new_tokens = int(max(max_new_tokens))
        config.use_cache = True
        # a reserved cache has room for the whole turn (handed over even empty); transformers' grows on its own
        capacity = past_width + new_width + config.max_new_tokens if self.reserve_cache else None
        extra = {"past_key_values": self._padded_cache(model, cached, past_width, capacity)} \
            if past_width or capacity else {}
        self.prefilled_tokens += len(contexts) * new_width  # generate runs only the uncached part before decoding
        cached, self._prefixes = [], []  # now in the batch cache: one copy of the states, not two, while generating
        self._turn += 1
        progress = DecodeProgress(self._turn, len(contexts), config.max_new_tokens, progress_wanted(self.progress))
        if progress.shown:  # a streamer costs a copy to the CPU per step: only when someone watches
            extra["streamer"] = progress
        try:
            with torch.no_grad(), self.timing.measuring(model):
                out = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                     generation_config=config, synced_gpus=synced, **extra)
        finally:
            progress.end()
        width = past_width + new_width
        sampled = out.sequences[:, width:]
        steps = sampled.shape[1]
        logprobs = torch.zeros(sampled.shape, dtype=torch.float32)
        for step in range(steps if self.logprobs else 0):  # one (batch, vocab) slice at a time, never a 3-d copy
            scores = torch.log_softmax(out.logits[step].float() / self.temperature, dim=-1)
            logprobs[:, step] = scores.gather(1, sampled[:, step : step + 1]).squeeze(1).cpu()
        sampled_rows = sampled.cpu().tolist()
        logprob_rows = logprobs.tolist()
        outputs = [
            cut_turn(ids, lps, int(limit), self.stop_ids)
            for ids, lps, limit in zip(sampled_rows, logprob_rows, max_new_tokens, strict=True)
        ]
        if self.prefix_cache and self._active_model is not None:
            self._keep_prefixes(out.past_key_values, contexts, outputs, past_lengths, new_parts, past_width, width)
        return outputs

    def _step_in_sync(self, model: Any) -> None:
        """Join the other ranks' synced ``generate`` with one pad token and one new token: transformers keeps a
        finished rank stepping until every rank is done, so each rank's model calls match (the output and its
        states are dropped; the prefix cache and the turn count are left as they are)."""
        config = copy.copy(self.generation_config)
        config.max_new_tokens = 1
        config.min_new_tokens = 0
        device = next(model.parameters()).device
        dummy = torch.full((1, 1), self.pad_token_id, dtype=torch.long, device=device)
        with torch.no_grad():
            model.generate(input_ids=dummy, attention_mask=torch.ones_like(dummy), generation_config=config,
                           synced_gpus=True)

    def _prefill_shared(self, model: Any, contexts: Sequence[Sequence[int]], device: torch.device) -> None:
        """Encode once what several rows without kept states share: first each run of items' common prefix (a
        family's instruction), then, on top of it, each context that several rows share whole (all but its last
        token). Rows with kept states (later turns) are left to them."""
        fresh = [context for context in contexts if self._cached_prefix(context) is None]
        for prefix in shared_prefixes(fresh, max(self.min_shared_prefix, 1)):
            if not self._encode_prefix(model, list(prefix), device):
                return
        for ids, count in Counter(tuple(context) for context in fresh).items():
            base = self._cached_prefix(ids)
            if count < 2 or len(ids) < 2 or (base is not None and len(base.ids) == len(ids) - 1):
                continue
            if not self._encode_prefix(model, list(ids[:-1]), device, base):
                return

    def _encode_prefix(self, model: Any, ids: list[int], device: torch.device, base: CachedPrefix | None = None
                       ) -> bool:
        """Keep the states of ``ids``, running the model only over what follows ``base`` (kept states of its start,
        copied into the forward's cache: ``base`` stays for the rows it alone covers). False, and sharing turned
        off, for a cache layout this cannot slice."""
        start = len(base.ids) if base is not None else 0
        past = self._padded_cache(model, [base], start) if base is not None else None
        with torch.no_grad(), self.timing.measuring(model):
            out = model(input_ids=torch.tensor([ids[start:]], device=device), past_key_values=past, use_cache=True,
                        logits_to_keep=1)
        self.prefilled_tokens += len(ids) - start
        layers = cache_layers(out.past_key_values)
        if not layers or any(keys is None or keys.shape[2] != len(ids) for keys, _ in layers):
            self.share_prompt_prefill = False  # a cache layout this cannot slice: encode per row as before
            return False
        self._prefixes.append(CachedPrefix(ids, [(keys[0], values[0]) for keys, values in layers]))
        return True

    def _cached_prefix(self, context: Sequence[int]) -> CachedPrefix | None:
        """The kept states whose ids start this context (the longest; at least one new token must remain)."""
        best = None
        for prefix in self._prefixes:
            size = len(prefix.ids)
            if size < len(context) and (best is None or size > len(best.ids)) and list(context[:size]) == prefix.ids:
                best = prefix
        return best

    @staticmethod
    def _padded_cache(model: Any, cached: Sequence[CachedPrefix | None], width: int, capacity: int | None = None
                      ) -> Any:
        """One batch cache, each row's states right-aligned at ``width`` (zeros, masked, before them); with a
        ``capacity``, a ``reserved_cache`` with room for that many positions (empty where ``width`` is 0)."""
        from transformers import DynamicCache

        from agentgym_trl.engines.reserved_cache import reserved_cache

        cache = DynamicCache(config=model.config) if capacity is None else reserved_cache(model.config, capacity)
        if not width:
            return cache
        template = next(prefix for prefix in cached if prefix is not None)
        for layer, (keys, values) in enumerate(template.layers):
            batch_keys = keys.new_zeros((len(cached), keys.shape[0], width, keys.shape[2]))
            batch_values = values.new_zeros((len(cached), values.shape[0], width, values.shape[2]))
            for row, prefix in enumerate(cached):
                if prefix is not None:
                    size = len(prefix.ids)
                    batch_keys[row, :, width - size :] = prefix.layers[layer][0]
                    batch_values[row, :, width - size :] = prefix.layers[layer][1]
            cache.update(batch_keys, batch_values, layer)
        return cache

    def _keep_prefixes(self, cache: Any, contexts: Sequence[Sequence[int]], outputs: Sequence[TurnOutput],
                       past_lengths: Sequence[int], new_parts: Sequence[Sequence[int]], past_width: int,
                       width: int) -> None:
        """Keep, per row, the states of its context plus its reply (minus the last sampled token, never fed)."""
        layers = cache_layers(cache)
        stored = layers[0][0].shape[2] if layers and layers[0][0] is not None else -1
        if stored < width or any(keys is None or keys.shape[2] != stored for keys, _ in layers):
            # sliding-window, recurrent or other cache layouts: encode whole contexts, as without the cache
            logger.warning("prefix cache off: %s keeps no full key/value states per layer", type(cache).__name__)
            self.prefix_cache, self._prefixes = False, []
            return
        kept = []
        for row, (context, output) in enumerate(zip(contexts, outputs, strict=True)):
            reply = min(len(output.ids), stored - width)
            spans = [(past_width - past_lengths[row], past_width), (width - len(new_parts[row]), width + reply)]
            kept.append(CachedPrefix(
                list(context) + output.ids[:reply],
                [(torch.cat([keys[row, :, a:b] for a, b in spans], dim=1),
                  torch.cat([values[row, :, a:b] for a, b in spans], dim=1)) for keys, values in layers],
            ))
        self._prefixes = kept  # finished trajectories do not come back; their states go
