"""A learning curve from a run's kept checkpoints: each ``checkpoint-N`` evaluated on the same held-out items.

Train with every checkpoint kept (HF's ``save_total_limit`` defaults to None, which keeps them all; each
``checkpoint-N`` holds the model, its tokenizer, ``trainer_state.json`` and the trainer's own state:
``item_estimates.json`` with learnability draws, ``oracle_prefix.json`` with the reverse curriculum)::

    accelerate launch examples/grpo.py ... --save_strategy steps --save_steps 5

then, once training has finished, evaluate every kept checkpoint (and optionally the start as step 0)::

    python -m agentgym_trl.learning_curve runs/grpo-default --env_ids AgentGym/TextCraft-Depth1-v0 \\
        --items_file held_out.json --n_samples 8 --temperature 1.0 --max_turns 6 --start runs/warmup

Each checkpoint is evaluated by ``stages.held_out_success`` (``agentgym eval``'s runner with the ``ModelAgent``,
the token path training samples with), once per split of the held-out items, into
``<run>/learning_curve/step-N/<split>/<env id>`` (a rerun resumes: finished evaluations are read back, not replayed;
a symlink among those folders is refused before any evaluation, so nothing is written where it points).
The result is one JSON, ``<run>/learning_curve.json``, rewritten whole after every checkpoint (a symlink there is
replaced, its target left alone): per step its success
with a 95% bootstrap interval over items, and every item's outcomes (``per_item``: ``"env id:item id"`` -> one
0/1 per sample), which ``agentgym_envs/evaluation/significance.py`` can compare between any two steps.

Checkpoints hold the full model (LoRA runs save only the adapter: merge it first). Only complete checkpoints
count (``checkpoints.complete_checkpoints``).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym_envs.core.jsonl import write_atomically
from agentgym_envs.evaluation.runner import recorded_agent
from agentgym_trl.checkpoints import complete_checkpoints

CURVE_FILE = "learning_curve.json"
CURVE_DIR = "learning_curve"


def evaluate_checkpoints(run_dir: str | os.PathLike, env_ids: Sequence[str], *,
                         held_out: Mapping[str, Sequence[int] | None] | None = None, limit: int = 0,
                         n_samples: int = 1, temperature: float = 0.0, max_turns: int = 4, max_turn_tokens: int = 256,
                         max_context_tokens: int = 4096, bf16: bool | None = None, merged_first_turn: bool = False,
                         engine: str = "hf", start: str | None = None, out: str | os.PathLike | None = None,
                         ) -> dict[str, Any]:
    """Evaluate every complete ``checkpoint-N`` of ``run_dir`` (oldest first; ``start``, if given, as step 0) on
    the same held-out items and write the curve to ``out`` (default ``<run_dir>/learning_curve.json``).

    Args:
        held_out: split -> item ids (None: the first ``limit`` items of that split, all with ``limit`` 0); default
            ``{"test": None}``. Item ids must not repeat across splits (``per_item`` is keyed by env id and item).
        limit, n_samples, temperature, max_turns, max_turn_tokens, max_context_tokens, merged_first_turn, engine:
            as ``agentgym eval`` (the same for every step); ``bf16`` None = as the trainer samples by default.

    Returns:
        The curve as written: ``{"run_dir", "env_ids", "settings", "steps": [{"step", "model", "success", "ci95",
        "episodes", "items_solved", "per_item", "splits", "weights"}, ...]}``; ``weights``: the fingerprint each
        step's evaluations recorded when they ran.
    """
    from agentgym_envs.core.tasks import get_task
    from agentgym_envs.evaluation.metrics import success_interval
    from agentgym_trl.fast_training import bf16_is_fast
    from agentgym_trl.stages import StageArguments, held_out_success

    run = Path(run_dir)
    held_out = dict(held_out or {"test": None})
    bf16 = bf16_is_fast() if bf16 is None else bool(bf16)
    points = [(0, str(start))] if start else []
    points += complete_checkpoints(str(run))
    if not points:
        raise FileNotFoundError(f"{run} holds no complete checkpoint-N (train with --save_strategy steps "
                                "--save_steps N) and no --start was given")
    settings = {"held_out": {split: None if ids is None else [int(i) for i in ids] for split, ids in held_out.items()},
                "limit": limit, "n_samples": n_samples, "temperature": temperature, "max_turns": max_turns,
                "max_turn_tokens": max_turn_tokens, "max_context_tokens": max_context_tokens, "bf16": bf16,
                "merged_first_turn": merged_first_turn, "engine": engine}
    curve: dict[str, Any] = {"run_dir": str(run), "env_ids": list(env_ids), "settings": settings, "steps": []}
    path = Path(out) if out is not None else run / CURVE_FILE
    # the same named items at every step: (split, env id) -> item ids
    chosen = {(split, env_id): (get_task(env_id).first_items(split, limit or None) if ids is None
                                else get_task(env_id).named_items(split, ids))
              for split, ids in held_out.items() for env_id in env_ids}
    folders = {(step, split, env_id): run / CURVE_DIR / f"step-{step}" / split / env_id.replace("/", "_")
               for step, _ in points for split, env_id in chosen}
    for folder in folders.values():  # before any evaluation: refused whole, never half-written elsewhere
        _refuse_links(run, folder)
    for step, model in points:
        splits, per_item = {}, {}
        for (split, env_id), ids in chosen.items():
            stage = StageArguments(eval_items=len(ids), eval_samples=n_samples, eval_temperature=temperature)
            folder = folders[step, split, env_id]
            result = held_out_success(model, [env_id], folder, stage, max_turns, max_turn_tokens, max_context_tokens,
                                      bf16, merged_first_turn=merged_first_turn, engine=engine, split=split,
                                      items=ids)
            repeated = set(per_item) & set(result["per_item"])
            if repeated:
                raise ValueError(f"items {sorted(repeated)} are in more than one split of held_out")
            per_item.update(result["per_item"])
            splits[f"{split}:{env_id}"] = {key: result[key] for key in ("success", "ci95", "episodes",
                                                                        "items_solved", "valid_action_rate")}
        interval = success_interval(per_item)
        curve["steps"].append({
            "step": step, "model": model,  # the fingerprint the step's evaluations read from the checkpoint
            "weights": recorded_agent([folders[step, split, env_id] for split, env_id in chosen]).get("weights"),
            "success": interval["mean"], "ci95": [interval["low"], interval["high"]],
            "episodes": sum(len(v) for v in per_item.values()),
            "items_solved": sum(1 for outcomes in per_item.values() if any(outcomes)),
            "per_item": {key: [int(bool(o)) for o in outcomes] for key, outcomes in per_item.items()},
            "splits": splits,
        })
        write_atomically(path, json.dumps(curve, indent=1) + "\n")  # after every point: progress kept
    return curve


class LinkedFolderError(ValueError):
    """A folder of the run's evaluations is a symlink: the evaluations would be written wherever it points."""


def _refuse_links(run: Path, folder: Path) -> None:
    """Refuse when ``folder`` or a folder between ``run`` and it is a symlink (``run`` itself may be one: the run
    is wherever it points): ``RUN/learning_curve`` linked elsewhere would have every evaluation written there."""
    for part in [folder, *folder.parents]:
        if part == run:
            return
        if part.is_symlink():
            raise LinkedFolderError(
                f"{part} is a symlink to {os.readlink(part)}: the learning curve writes its evaluations under "
                f"{run / CURVE_DIR} and will not write them through a link; remove the link (its target is left "
                "alone) or copy the folder in its place")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``python -m agentgym_trl.learning_curve RUN_DIR --env_ids ...``: the command line of ``evaluate_checkpoints``."""
    parser = argparse.ArgumentParser(prog="python -m agentgym_trl.learning_curve", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="the training run's output_dir, holding checkpoint-N folders")
    parser.add_argument("--env_ids", nargs="+", required=True, help="env ids to evaluate on")
    parser.add_argument("--split", default="test", help="the split of --items / --limit (default test)")
    parser.add_argument("--items", type=int, nargs="*", help="item ids of --split (default: its first --limit)")
    parser.add_argument("--items_file", help="a JSON file {split: [item ids]} (several splits, e.g. test and "
                        "held-out train items); replaces --split / --items")
    parser.add_argument("--limit", type=int, default=0, help="without items: the first N items of the split (0: all)")
    parser.add_argument("--n_samples", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max_turns", type=int, default=4)
    parser.add_argument("--max_turn_tokens", type=int, default=256)
    parser.add_argument("--max_context_tokens", type=int, default=4096)
    parser.add_argument("--bf16", choices=("true", "false"), help="default: as the trainer samples")
    parser.add_argument("--merged_first_turn", action="store_true")
    parser.add_argument("--engine", choices=("hf", "vllm-process", "vllm"), default="hf")
    parser.add_argument("--start", help="the model training started from, evaluated as step 0")
    parser.add_argument("--out", help=f"the JSON to write (default RUN_DIR/{CURVE_FILE})")
    args = parser.parse_args(argv)
    if args.items_file:
        held_out = {split: list(ids) for split, ids in json.loads(Path(args.items_file).read_text()).items()}
    else:
        held_out = {args.split: args.items or None}
    try:
        curve = _evaluate_from_args(args, held_out)
    except LinkedFolderError as error:  # one line, as agentgym's errors: nothing was evaluated
        raise SystemExit(f"error: {error}") from None
    for point in curve["steps"]:
        print(f"step {point['step']:>5}: success {point['success']:.3f} [{point['ci95'][0]:.3f}, "
              f"{point['ci95'][1]:.3f}] over {len(point['per_item'])} items, {point['episodes']} episodes")
    print(f"wrote {args.out or Path(args.run_dir) / CURVE_FILE}")
    return curve


def _evaluate_from_args(args: argparse.Namespace, held_out: dict[str, Any]) -> dict[str, Any]:
    """``evaluate_checkpoints`` with the command line's settings (main refuses a linked folder in one line)."""
    return evaluate_checkpoints(
        args.run_dir, args.env_ids, held_out=held_out, limit=args.limit, n_samples=args.n_samples,
        temperature=args.temperature, max_turns=args.max_turns, max_turn_tokens=args.max_turn_tokens,
        max_context_tokens=args.max_context_tokens, bf16=None if args.bf16 is None else args.bf16 == "true",
        merged_first_turn=args.merged_first_turn, engine=args.engine, start=args.start, out=args.out)


if __name__ == "__main__":
    main()
