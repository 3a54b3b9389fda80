"""The stages of a run that shows what RL adds: held-out success of the start, after a warm-up, after GRPO.

A small instruct model writes no valid action zero-shot, so GRPO from it gets no reward and learns
nothing. ``examples/grpo.py`` therefore runs, in one command:

1. ``held_out_success`` of the start model on a fixed set of test items (the ``base`` stage);
2. ``behaviour_clone``: a short supervised warm-up on oracle episodes of *train* items (the SFT
   path of ``examples/sft.py``), then the same evaluation (``warm-up``);
3. GRPO from the warm-up, then the same evaluation (``grpo``);

and ``report_stages`` prints the three side by side with 95% intervals and plots them next to the
GRPO training curves, so a user sees what the warm-up gave and what RL added on top.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.core.tables import render_table
from agentgym_trl.metrics import REWARD, SUCCESS, VALID_ACTION_RATE

logger = logging.getLogger(__name__)

STAGES_FILE = "stages.json"
STAGE_INPUTS_FILE = "stage_inputs.json"  # what a stage's checkpoint was made from: a rerun reuses it only if equal
STAGES_PLOT = "stages.png"


@dataclass
class StageArguments:
    """Warm-up and held-out evaluation around GRPO (``examples/grpo.py``); 0 switches a part off.

    (The ``clone_`` prefix keeps these apart from ``TrainingArguments``, which has its own ``warmup_steps``.)
    """

    clone_episodes: int = field(
        default=0, metadata={"help": "oracle episodes of train items to behaviour-clone before GRPO (0: no warm-up)"}
    )
    clone_steps: int = field(default=40, metadata={"help": "optimizer steps of the warm-up"})
    clone_batch_size: int = field(default=2, metadata={"help": "conversations per warm-up step"})
    clone_learning_rate: float = field(default=5e-5, metadata={"help": "learning rate of the warm-up"})
    clone_lr_schedule: str = field(default="cosine", metadata={
        "help": "the warm-up's learning-rate schedule: cosine (after a tenth of the steps' warm-up) | constant"})
    clone_max_length: int = field(default=1024, metadata={"help": "tokens kept of each warm-up conversation"})
    eval_items: int = field(
        default=0, metadata={"help": "test items evaluated at every stage: the first N of the test split (0: none)"}
    )
    eval_samples: int = field(default=1, metadata={"help": "episodes per test item and stage"})
    eval_temperature: float = field(default=0.0, metadata={"help": "sampling temperature in evaluations (0: greedy)"})

    def __post_init__(self) -> None:
        if self.clone_lr_schedule not in ("cosine", "constant"):
            raise ValueError(f"clone_lr_schedule must be cosine or constant, got {self.clone_lr_schedule!r}")


def clone_settings(stage: StageArguments) -> dict[str, Any]:
    """The warm-up's own settings (the ``clone_`` fields), as a stage's inputs record them."""
    return {name: value for name, value in asdict(stage).items() if name.startswith("clone_")}


def held_out_success(model: str, env_ids: list[str], out_dir: str | os.PathLike, stage: StageArguments,
                     max_turns: int, max_turn_tokens: int, max_context_tokens: int, bf16: bool,
                     merged_first_turn: bool = False, engine: str = "hf", engine_options: Any = None,
                     split: str = "test", items: list[int] | None = None) -> dict[str, Any]:
    """Success of ``model`` on the first ``eval_items`` test items of each env, with a 95% interval over items
    (``engine="vllm-process"``: sampled by the shared vLLM engine, the one training uses); ``items``: these item ids of
    ``split`` instead (e.g. a held-out part of the train split)."""
    from agentgym_envs.evaluation.metrics import item_successes, success_interval
    from agentgym_envs.evaluation.records import load_run
    from agentgym_trl.eval import evaluate_model

    report = evaluate_model(model, env_ids, out_dir, n_samples=stage.eval_samples, max_turns=[max_turns],
                            limit=stage.eval_items, temperature=stage.eval_temperature,
                            batch_size=max(8, stage.eval_items), max_turn_tokens=max_turn_tokens,
                            max_context_tokens=max_context_tokens, bf16=bf16, merged_first_turn=merged_first_turn,
                            engine=engine, engine_options=engine_options, split=split, items=items)
    records = load_run(report.out_dir)
    per_item = item_successes(records)
    interval = success_interval(per_item)
    return {
        "model": model,
        "episodes": len(records),
        "success": interval["mean"],
        "ci95": [interval["low"], interval["high"]],
        "items_solved": sum(1 for outcomes in per_item.values() if any(outcomes)),
        "valid_action_rate": _valid_action_rate(records),
        "per_item": {f"{env}:{item}": outcomes for (env, item), outcomes in per_item.items()},
    }


def _valid_action_rate(records: list[dict[str, Any]]) -> float:
    valid = [flag for record in records for flag in record.get("valid", [])]
    return sum(map(bool, valid)) / len(valid) if valid else 0.0


def behaviour_clone(model: str, env_ids: list[str], out_dir: str | os.PathLike, stage: StageArguments,
                    bf16: bool, seed: int, merged_first_turn: bool = False,
                    items: dict[str, list[int]] | None = None, checkpointing: bool = False) -> str:
    """Fine-tune ``model`` on oracle episodes of train items (assistant tokens only); returns the checkpoint.

    ``items`` ({env id: item ids}) names the items to clone (e.g. drawn stratified by recipe shape); default: the
    first ``clone_episodes`` of a seeded shuffle of each env's train split. ``checkpointing`` recomputes activations
    in the backward pass (less memory, more compute). The memory it used goes back to the OS when it returns.
    """
    import torch
    from trl import SFTConfig, SFTTrainer

    from agentgym_trl.fast_training import (cast_where_used, checkpointing_arguments, release_memory,
                                            release_memory_each_step, use_compact_lm_head)
    from agentgym_trl.models import is_reloadable, load_tokenizer, weights_fingerprint
    from agentgym_trl.sft import encoder_for, load_or_collect, save_sft_checkpoint, token_stats, tokenize_conversations

    target = Path(out_dir)
    clone = clone_settings(stage)
    inputs = {"model": str(model), "weights": weights_fingerprint(model) if Path(model).exists() else None,
              "env_ids": list(env_ids), "clone": clone, "bf16": bool(bf16), "seed": seed,
              "merged_first_turn": merged_first_turn, "items": items}
    if is_reloadable(target):  # a rerun of the same command reuses its warm-up, and only that
        check_stage_inputs(target, inputs)
        return str(target)
    tokenizer = load_tokenizer(model)
    data_dir = target.parent / f"{target.name}-data"
    per_env = -(-stage.clone_episodes // len(env_ids))
    conversations = load_or_collect(data_dir, env_ids, per_env, seed=seed, merged_first_turn=merged_first_turn,
                                    items=items)
    rows = tokenize_conversations(conversations.shuffle(seed=seed), encoder_for(model, tokenizer))
    print(f"warm-up data: {len(rows)} oracle conversations; {token_stats(rows, stage.clone_max_length)}",
          file=sys.stderr)
    args = SFTConfig(
        output_dir=str(target) + "-run",
        max_steps=stage.clone_steps,
        per_device_train_batch_size=stage.clone_batch_size,
        learning_rate=stage.clone_learning_rate,
        lr_scheduler_type=stage.clone_lr_schedule,
        warmup_steps=max(1, stage.clone_steps // 10) if stage.clone_lr_schedule == "cosine" else 0,
        max_length=stage.clone_max_length,
        bf16=bf16,
        use_cpu=not torch.cuda.is_available(),  # transformers refuses bf16 on a CPU unless told it is one
        **checkpointing_arguments(checkpointing),
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        seed=seed,
    )
    use_compact_lm_head()  # the loss covers the assistant tokens only: score just those through the LM head
    trainer = SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=tokenizer,
                         callbacks=[release_memory_each_step()] if args.use_cpu else None)
    if args.use_cpu:  # as the GRPO trainer: no bf16 copy of every weight cached through the forward
        cast_where_used(trainer.accelerator)
    trainer.train()
    save_sft_checkpoint(trainer, target)
    (target / STAGE_INPUTS_FILE).write_text(json.dumps(inputs, indent=1, default=str) + "\n", encoding="utf-8")
    trainer.accelerator.free_memory()  # the model, its gradients and optimizer state: not needed past here
    del trainer
    release_memory()
    return str(target)


def check_stage_inputs(folder: Path, inputs: dict[str, Any]) -> None:
    """Refuse to reuse a stage's checkpoint made from other inputs (another start model, other weights under the same
    path, other settings): a rerun in the same output_dir would silently train on another model's warm-up."""
    path = folder / STAGE_INPUTS_FILE
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = None
    if recorded is None:
        raise ValueError(f"{folder} holds a warm-up whose inputs are not recorded ({STAGE_INPUTS_FILE}); delete it or "
                         "give another --output_dir")
    if isinstance(recorded.get("clone"), dict):  # recorded before a setting existed: it was made with its default
        recorded["clone"] = {**clone_settings(StageArguments()), **recorded["clone"]}
    normalised = json.loads(json.dumps(inputs, default=str))
    changed = sorted(key for key in set(recorded) | set(normalised) if recorded.get(key) != normalised.get(key))
    if changed:
        raise ValueError(f"{folder} holds a warm-up made from other inputs (it differs in {', '.join(changed)}); "
                         "delete it or give another --output_dir")


def report_stages(stages: dict[str, dict[str, Any]], output_dir: str | os.PathLike,
                  metrics_file: str | None = None) -> Path:
    """Print the stages side by side, write them to ``stages.json`` and plot them (with the GRPO curves)."""
    out = Path(output_dir)
    (out / STAGES_FILE).write_text(json.dumps(stages, indent=1) + "\n")
    print("\nheld-out success (same test items at every stage):", file=sys.stderr)
    rows = [[name, f"{result['success']:.2f}", "[{:.2f}, {:.2f}]".format(*result["ci95"]),
             f"{result['valid_action_rate']:.2f}", str(result["episodes"])] for name, result in stages.items()]
    print(render_table(("stage", "success", "95% interval", "valid actions", "episodes"), rows,
                       justify=("left", "right", "right", "right", "right")), file=sys.stderr)
    plot_stages(stages, out / STAGES_PLOT, out / metrics_file if metrics_file else None)
    return out / STAGES_FILE


def plot_stages(stages: dict[str, dict[str, Any]], path: Path, metrics_path: Path | None = None) -> None:
    """Plot the stages' held-out success with 95% intervals, beside the training rollouts' success, valid-action
    rate and reward curves when the metrics file has them.

    Args:
        stages: per stage name, its evaluation summary (``success``, ``ci95``, ``episodes``).
        path: the image to write.
        metrics_path: the run's metrics JSON-lines file, or None for the bars alone.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from agentgym_envs.evaluation.plots import last_per_step, read_metrics

    logs = last_per_step(read_metrics(metrics_path)) if metrics_path and metrics_path.exists() else []
    logs = [log for log in logs if SUCCESS in log]
    fig, axes = plt.subplots(1, 2 if logs else 1, figsize=(11 if logs else 5, 4), squeeze=False)
    names = list(stages)
    values = [stages[n]["success"] for n in names]
    errors = [[v - stages[n]["ci95"][0] for n, v in zip(names, values)],
              [stages[n]["ci95"][1] - v for n, v in zip(names, values)]]
    bars = axes[0][0]
    bars.bar(names, values, yerr=errors, capsize=6, color=["#9e9e9e", "#64b5f6", "#1565c0"][: len(names)])
    for x, v in enumerate(values):
        bars.annotate(f"{v:.0%}", (x, v), textcoords="offset points", xytext=(0, 4), ha="center")
    bars.set_ylim(0, 1)
    bars.set_ylabel("held-out success (95% CI)")
    bars.set_title(f"test items, {stages[names[0]]['episodes']} episodes per stage")
    if logs:
        curves = axes[0][1]
        steps = [log["step"] for log in logs]
        for key, label in ((SUCCESS, "rollout success"), (VALID_ACTION_RATE, "valid actions"), (REWARD, "reward")):
            curves.plot(steps, [log.get(key, 0.0) for log in logs], marker="o", label=label)
        curves.set_xlabel("GRPO step")
        curves.set_ylim(0, 1)
        curves.legend(loc="upper left")
        curves.set_title("GRPO training rollouts")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_logged(command: list[str], log: str | os.PathLike) -> None:
    """An experiment's child process (a training run) whose output goes to ``log`` (tail it to follow); its failure
    stops the experiment with a line that says how to resume."""
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"$ {' '.join(command)}\n  (log: {log})", flush=True)
    with open(log, "a", encoding="utf-8") as handle:
        code = subprocess.call(command, stdout=handle, stderr=subprocess.STDOUT)
    if code != 0:
        sys.exit(f"failed with exit code {code}; see {log}. Run the same command again to resume.")
