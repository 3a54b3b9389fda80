"""What makes a training step fast and lean: thread count, LM head, micro-batches, memory.

Measured on a 2-core AVX512-BF16 machine (``benchmarks/bench_train_step.py``), a default GRPO step
lost its time to four things this module addresses (the micro-batches bound activations on GPUs too):

* ``accelerate launch`` exports ``OMP_NUM_THREADS=1`` when no config sets it, so torch used one
  core: ``cpu_threads`` gives each process its share of the cores instead;
* TRL's fused LM head scores only the completion positions when Triton is available and every
  position (prompt and padding too, onto the whole vocabulary) otherwise: on CPU nothing recompiles
  when the number of positions changes, so ``use_compact_lm_head`` lets CPUs take the compact route;
* the whole batch's activations were kept for one backward: ``plan_micro_batches`` and
  ``take_rows`` cut it into micro-batches under a padded-token budget, each trimmed of the padding
  its rows do not need, so activations are bounded by the budget, not by the batch;
  ``micro_batch_shares`` weighs their losses as each of TRL's loss types normalises (``LOSS_NORMALISERS``);
* glibc keeps freed memory: ``release_memory`` hands it back between the rollout and training, and
  ``return_freed_heap`` after each micro-batch's forward and backward.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)

PROMPT_KEYS = ("prompt_ids", "prompt_mask")  # left-padded (B, prompt width); every other (B, T) tensor is completion

# TRL's loss types (GRPOTrainer._compute_loss) and what each one's normaliser spans. "batch": the whole batch already
# (TRL's num_items_in_batch), so a micro-batch's loss is its share as it is; "rows" / "tokens": the batch the loss
# sees, so a micro-batch is weighted by its rows or its action tokens.
LOSS_NORMALISERS = {"grpo": "rows", "bnpo": "tokens", "dr_grpo": "rows", "dapo": "batch", "cispo": "batch",
                    "sapo": "rows", "luspo": "rows", "vespo": "batch"}


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_threads(num_processes: int, requested: int | None = None) -> int:
    """Threads per process: the cores divided among the processes of this machine, unless ``requested``."""
    if requested:
        return int(requested)
    return max(1, available_cores() // max(1, num_processes))


def use_cpu_threads(num_processes: int, requested: int | None = None) -> int:
    """Set torch's intra-op threads (``accelerate launch`` left them at 1 through ``OMP_NUM_THREADS``)."""
    threads = cpu_threads(num_processes, requested)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def use_compact_lm_head(enabled: bool = True) -> bool:
    """Let TRL's fused LM head score only completion positions on CPU too; returns whether it could.

    TRL (``trl.trainer.utils.add_fused_lm_head``) asks ``_use_triton(device)`` whether to score the
    positions whose label is set (compact) or all of them: the second keeps tile shapes fixed for
    compiled backends. CPUs run eager kernels, so compact is strictly less work (a third of the
    default run's training part here: 27.3 -> 18.4 s). The switch is process-wide, like TRL's own check.
    """
    try:
        from trl.trainer import utils as trl_utils
    except ImportError:  # pragma: no cover - trl is a requirement of this package
        return False
    current = getattr(trl_utils, "_use_triton", None)
    if current is None:
        logger.warning("this TRL has no _use_triton switch; the LM head scores every position on CPU")
        return False
    original = getattr(current, "original", current)
    if not enabled:
        trl_utils._use_triton = original
        return False

    def compact_on_cpu(device: torch.device) -> bool:
        return device.type == "cpu" or original(device)

    compact_on_cpu.original = original  # type: ignore[attr-defined]
    trl_utils._use_triton = compact_on_cpu
    return True


def checkpointing_arguments(enabled: bool) -> dict[str, bool]:
    """Activation checkpointing on or off as this transformers names it, to pass to a ``TrainingArguments`` subclass.

    transformers 5.23 (``[train]``) calls it ``activation_checkpointing`` (``gradient_checkpointing`` is a
    deprecated alias); 5.17 (``[gpu]``, vLLM's bound) knows only ``gradient_checkpointing``.

    Args:
        enabled: whether to recompute activations in the backward pass.

    Returns:
        ``{name: enabled}`` with the name this transformers' ``TrainingArguments`` has.
    """
    import dataclasses

    from transformers import TrainingArguments

    names = {field.name for field in dataclasses.fields(TrainingArguments)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": enabled}


def release_memory() -> None:
    """Collect garbage and return freed heap pages to the OS (glibc keeps them otherwise)."""
    gc.collect()
    return_freed_heap()


def return_freed_heap() -> None:
    """Return the heap's free pages to the OS (glibc's ``malloc_trim``), without a garbage collection: cheap enough
    between a micro-batch's forward and backward. Glibc otherwise keeps every page a freed tensor used, so the pieces
    one pass frees and the next cannot reuse stay resident; nothing happens where the C library is not glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def cast_where_used(accelerator: Any) -> None:
    """Make ``accelerator``'s bf16 autocast cast each weight where it is used, without autocast's cache, which keeps a
    bf16 copy of every weight it casts until the forward ends (0.25 GB for 135M parameters at a CPU step's peak). In
    a decoder each weight is used once per forward (once more where activation checkpointing recomputes a layer), so
    nothing is cast twice. Set before ``train()``: Accelerate wraps the model's forward with it when preparing it."""
    from accelerate.utils import AutocastKwargs

    accelerator.autocast_handler = AutocastKwargs(cache_enabled=False)


def release_memory_each_step() -> Any:
    """A ``TrainerCallback`` that calls ``release_memory`` after every optimizer step, and ``return_freed_heap``
    after each training forward and before each optimizer step: without them the warm-up's resident memory grew step
    after step with freed but kept heap (3.0 GB after 6 steps, 4.1 GB after 40)."""
    from transformers import TrainerCallback

    def after_forward(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if module.training:
            return_freed_heap()

    class ReleaseMemory(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            if model is not None:
                model.register_forward_hook(after_forward)

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            return_freed_heap()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            release_memory()

    return ReleaseMemory()


def plan_micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Group row indices so each group's padded size (rows x its longest row) stays within ``token_budget``.

    Rows are taken longest first, so rows of similar length share a group and little padding is
    computed; a row longer than the budget gets a group of its own.
    """
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        width = max(longest, lengths[index])
        if current and width * (len(current) + 1) > token_budget:
            groups.append(current)
            current, width = [], lengths[index]
        current.append(index)
        longest = width
    if current:
        groups.append(current)
    return groups


def completion_lengths(completion_mask: torch.Tensor) -> torch.Tensor:
    """Per row, the position after its last real completion token (completions are right-padded)."""
    positions = torch.arange(1, completion_mask.shape[1] + 1, device=completion_mask.device)
    return (completion_mask.bool() * positions).amax(dim=1)


def row_lengths(inputs: Mapping[str, Any]) -> list[int]:
    """Tokens each row needs once its padding is trimmed: its prompt (left-padded) plus its completion."""
    return (inputs["prompt_mask"].sum(dim=1) + completion_lengths(inputs["completion_mask"])).tolist()


def take_rows(inputs: Mapping[str, Any], rows: Sequence[int]) -> dict[str, Any]:
    """The micro-batch of ``rows``: every per-row field sliced, prompt and completion trimmed to its rows' need."""
    batch = int(inputs["prompt_ids"].shape[0])
    completion_width = int(inputs["completion_ids"].shape[1])
    index = torch.as_tensor(list(rows), device=inputs["prompt_ids"].device)
    prompt_need = int(inputs["prompt_mask"][index].sum(dim=1).max())
    completion_need = max(int(completion_lengths(inputs["completion_mask"][index]).max()), 1)
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == batch:
            value = value[index]
            if key in PROMPT_KEYS:
                value = value[:, value.shape[1] - prompt_need :]
            elif value.ndim == 2 and value.shape[1] == completion_width:
                value = value[:, :completion_need]
        elif isinstance(value, list) and len(value) == batch:
            value = [value[i] for i in rows]
        out[key] = value
    return out


def action_mask(batch: Mapping[str, Any]) -> torch.Tensor:
    """The tokens the loss trains on: completion tokens less the tool / observation tokens (TRL's ``tool_mask``)."""
    return batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]


def rows_that_teach(advantages: torch.Tensor) -> list[int]:
    """Rows with a non-zero advantage at some position (a zero-advantage row adds nothing to the policy gradient)."""
    per_row = advantages.reshape(advantages.shape[0], -1).abs().amax(dim=1)
    return torch.nonzero(per_row > 0).flatten().tolist()


def micro_batch_shares(loss_type: str, inputs: Mapping[str, Any], groups: Sequence[Sequence[int]]) -> list[float]:
    """The factor of each micro-batch's loss so that the factors times the losses sum to the batch's loss.

    The shares are of the whole batch, so rows left out of every group (zero advantage) count in the
    denominator as they do in TRL's loss, where their terms are zero.
    """
    normaliser = LOSS_NORMALISERS.get(loss_type)
    if normaliser == "batch":
        return [1.0] * len(groups)
    if normaliser == "tokens":
        mask = action_mask(inputs)
        weights = [float(mask[list(rows)].sum()) for rows in groups]
        total = float(mask.sum())
    elif normaliser == "rows":
        weights = [float(len(rows)) for rows in groups]
        total = float(inputs["completion_mask"].shape[0])
    else:
        raise ValueError(f"no micro-batch weighting for loss_type {loss_type!r}")
    return [w / total for w in weights] if total else [1.0 / len(groups)] * len(groups)


def bf16_is_fast() -> bool:
    """Whether bf16 autocast pays off here: a GPU with bf16, or a CPU of class ``avx512-bf16`` (AVX512-BF16 or AMX;
    there a 135M model's forward + backward runs ~3x faster than in fp32); on other CPUs bf16 is emulated and slower.

    The CPU's class honours ``ATEN_CPU_CAPABILITY`` / ``ONEDNN_MAX_CPU_ISA`` (``agentgym_envs.core.machine``), so a
    process forced onto the AVX2 kernels chooses fp32 as an AVX2-only machine does."""
    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    from agentgym_envs.core.machine import bf16_is_native

    return bf16_is_native()


def prepare_torch(args: Any) -> bool:
    """This process's torch settings for training (threads, LM head, attention kernels); returns whether on CPU."""
    from accelerate import PartialState

    on_cpu = args.use_cpu or not torch.cuda.is_available()
    if on_cpu:
        use_cpu_threads(PartialState().num_processes, args.cpu_threads)
    else:
        # cuDNN's SDPA backward (what bf16 sdpa ran on an H100, torch 2.11) returned NaN gradients for fully
        # masked query rows, which left-padded prompts have; the NaN reached every weight although those rows
        # are never scored (benchmarks/results/gpu_check_h100_nan.json). Eager attention and fp32 did not.
        torch.backends.cuda.enable_cudnn_sdp(False)
    use_compact_lm_head(args.compact_lm_head)
    return on_cpu
