"""Which checkpoint a run resumes from: the newest *complete* ``checkpoint-N``.

HF's Trainer writes ``checkpoint-N/`` in place, so a run stopped (SIGTERM, OOM, a full disk) while saving
leaves a folder without its ``trainer_state.json`` or with cut weights. ``get_last_checkpoint`` would pick
that folder and every rerun would fail on it; here it is skipped, and a warning names it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
from typing import Any

logger = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"
_WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin", "adapter_model.bin")
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _readable_json(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as handle:
            json.load(handle)
        return True
    except (OSError, ValueError):
        return False


def _readable_weights(path: str) -> bool:
    """A weights file that is there and not cut: safetensors' header must parse and its data must all be there."""
    try:
        size = os.path.getsize(path)
        if size == 0:
            return False
        if not path.endswith(".safetensors"):
            return True
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length + 8 > size:
                return False
            header = json.loads(handle.read(length))
        ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
        return 8 + length + max(ends, default=0) <= size
    except (OSError, ValueError, KeyError, IndexError, TypeError, struct.error):
        return False


def incomplete_reason(folder: str) -> str | None:
    """Why ``folder`` cannot be resumed from (``None`` when it can): its trainer state and its model weights
    or adapter must be present and readable."""
    if not _readable_json(os.path.join(folder, TRAINER_STATE)):
        return f"{TRAINER_STATE} is missing or unreadable"
    for name in _WEIGHTS:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return None if _readable_weights(path) else f"{name} is empty or cut"
    for name in _INDEXES:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as handle:
                    shards = set(json.load(handle)["weight_map"].values())
            except (OSError, ValueError, KeyError, AttributeError):
                return f"{name} is unreadable"
            bad = sorted(s for s in shards if not _readable_weights(os.path.join(folder, s)))
            return f"weight shards {bad} are missing, empty or cut" if bad else None
    if any(name.startswith("pytorch_model_fsdp") for name in os.listdir(folder)):
        return None  # FSDP's sharded state dict: a folder of its own
    return "no model weights or adapter"


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir`` that a run can resume from, so a save cut short does not
    stop every later rerun; each newer incomplete one is skipped with a warning (and a printed line)."""
    if not os.path.isdir(output_dir):
        return None
    found = [(int(m.group(1)), name) for name in os.listdir(output_dir)
             if (m := _CHECKPOINT.match(name)) and os.path.isdir(os.path.join(output_dir, name))]
    for _, name in sorted(found, reverse=True):
        folder = os.path.join(output_dir, name)
        reason = incomplete_reason(folder)
        if reason is None:
            return folder
        message = f"skipping incomplete checkpoint {folder} ({reason}); it was probably cut short while saving"
        logger.warning(message)
        print(message, flush=True)
    return None


def finished_checkpoint(checkpoint: str | None, max_steps: int) -> bool:
    """Whether resuming from ``checkpoint`` has nothing left to train: its ``global_step`` reached ``max_steps``
    (the run's planned steps when ``max_steps`` is not positive: an epoch-based run). HF's Trainer resumed from
    one trains a step past the end and saves over the final model, so each rerun of the same command would change
    the run's models."""
    if checkpoint is None:
        return False
    try:
        with open(os.path.join(checkpoint, TRAINER_STATE), encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return False
    step, planned = state.get("global_step"), max_steps if max_steps and max_steps > 0 else state.get("max_steps")
    return isinstance(step, int) and isinstance(planned, int) and planned > 0 and step >= planned


def finished_run(args: Any) -> bool:
    """Whether the run that ``args`` (a training config: ``resume_from_checkpoint``, ``output_dir``,
    ``max_steps``) would resume has already finished; if so it says so, once, naming the checkpoint, and the
    caller trains nothing (a finished run, resumed, is a no-op: ``examples/learning.py`` reruns its commands).

    Args:
        args: the training arguments (``"last"`` resolves to the newest complete checkpoint).

    Returns:
        True when there is nothing to train.
    """
    point = getattr(args, "resume_from_checkpoint", None)
    if point == "last" or point is True:
        point = last_complete_checkpoint(args.output_dir)
    if not isinstance(point, str) or not finished_checkpoint(point, getattr(args, "max_steps", -1)):
        return False
    message = (f"the run in {args.output_dir} has finished: {point} reached max_steps={args.max_steps}; nothing to "
               "train (pass a larger --max_steps to train on, or another --output_dir to start a new run)")
    logger.warning(message)
    print(message, flush=True)
    return True


def complete_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """Every complete ``checkpoint-N`` in ``output_dir`` as ``(N, folder)``, oldest first (a run saved with
    ``--save_strategy steps --save_steps N`` and no ``save_total_limit`` keeps them all: a learning curve's
    points, ``agentgym_trl/learning_curve.py``); incomplete ones are skipped with a warning."""
    if not os.path.isdir(output_dir):
        return []
    found = sorted((int(m.group(1)), os.path.join(output_dir, name)) for name in os.listdir(output_dir)
                   if (m := _CHECKPOINT.match(name)) and os.path.isdir(os.path.join(output_dir, name)))
    complete = []
    for step, folder in found:
        reason = incomplete_reason(folder)
        if reason is None:
            complete.append((step, folder))
        else:
            logger.warning("skipping incomplete checkpoint %s (%s)", folder, reason)
    return complete


__all__ = ["TRAINER_STATE", "complete_checkpoints", "finished_checkpoint", "finished_run", "incomplete_reason",
           "last_complete_checkpoint"]
