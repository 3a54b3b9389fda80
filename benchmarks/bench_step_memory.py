"""A GRPO step's memory taken apart, and its bytes per training token against TRL's own ``GRPOTrainer``,
written to ``results/step_memory.json``.

Each trainer runs in a child process of its own (so its peak is its own), for two optimizer steps on
SmolLM2-135M-Instruct with the main job's settings (the ``cpu-demo`` preset: 2 items x a group of 4,
TextCraft depth 1, 48 tokens a turn, a 1024-token context, bf16 autocast): the first allocates the optimizer's
state, the second is measured.

* ``ours``: ``AgentGRPOTrainer`` as the main job runs it. The base model writes no valid action, so every reward
  is 0; ``skip_zero_advantage`` is turned off so that every row still goes through the forward and backward pass
  (the cost of a batch in which every group teaches). Its rollout's token batch is saved.
* ``trl``: TRL's ``GRPOTrainer`` on the same model, fed that very token batch (prompt ids, completion ids, env
  mask, log-probs) through TRL's ``rollout_func``, with rewards that differ within each group; TRL's defaults
  otherwise (its activation checkpointing included, which the main job uses too).

The measured step runs under PyTorch's ``MemTracker`` (``torch.distributed._tools.mem_tracker``), which sorts every
live tensor into weights, gradients, optimizer state, activations (saved for the backward pass), temporaries
and other tensors at the step's peak; a sampler reads the process's resident memory every 20 ms. The parts:

* weights, gradients, optimizer state, activations, temporaries (the log-prob computation over the vocabulary
  among them): MemTracker's categories at the peak of tracked memory;
* the generation copy (the bf16 sampling weights, ours only) and a reference model (``beta > 0``): by size;
* the libraries: resident memory after the imports, before any model;
* allocator slack: the step's resident peak less the libraries and MemTracker's peak total (memory the C
  allocator holds without a live tensor in it, plus anything not made by torch).

Bytes per training token: the step's resident peak less the memory it started with (weights, optimizer state,
libraries), divided by the batch's tokens (prompt and completion, every row).

    python benchmarks/bench_step_memory.py          # both trainers, ~5 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parents[1]
GB = 2**30


class ResidentPeak(threading.Thread):
    """The process's peak resident memory since the last ``reset``."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process()
        self.peak = 0

    def reset(self) -> int:
        self.peak = self.process.memory_info().rss
        return self.peak

    def run(self) -> None:
        while True:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.02)


def step_tracker():
    """PyTorch's MemTracker, over a whole training step: there the model's forward runs many times (each decoding
    step, each micro-batch), which MemTracker takes for a second iteration; its per-module statistics (not used
    here) are reset then, its device-wide peak by category is kept."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class StepMemTracker(MemTracker):
        def _pre_fw_hook(self, module, inputs):
            try:
                super()._pre_fw_hook(module, inputs)
            except NotImplementedError:
                self.reset_mod_stats()
                super()._pre_fw_hook(module, inputs)

    return StepMemTracker()


def measured_step(trainer, sampler: ResidentPeak, extra_sizes) -> dict:
    """Train two steps; the second under MemTracker. Returns its parts in GB and the resident numbers."""
    import torch
    from transformers import TrainerCallback

    found: dict = {}

    class Measure(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 1:
                import gc

                from agentgym_trl.fast_training import release_memory

                gc.collect()
                release_memory()
                optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
                found["tracker"] = tracker = step_tracker()
                tracker.track_external(trainer.model, optimizer)
                found["start_rss"] = sampler.reset()
                tracker.__enter__()

        def on_step_end(self, args, state, control, **kwargs):
            if "tracker" in found and "peak_rss" not in found:
                found["tracker"].__exit__(None, None, None)
                found["peak_rss"] = sampler.peak
                found.update(extra_sizes())

    trainer.add_callback(Measure())
    trainer.train()
    snapshot = found["tracker"].get_tracker_snapshot("peak")[torch.device("cpu")]
    parts = {str(getattr(key, "value", key)).lower(): round(value / GB, 3) for key, value in snapshot.items()}
    return {"tracked_peak_gb": parts, "start_rss_gb": round(found["start_rss"] / GB, 3),
            "step_peak_rss_gb": round(found["peak_rss"] / GB, 3),
            **{key: value for key, value in found.items() if key.endswith("_gb") and key != "start_rss"}}


def run_ours(batch_file: Path, model: str) -> dict:
    from agentgym_trl import AgentGRPOTrainer
    from agentgym_trl.models import load_tokenizer
    from agentgym_trl.train import DEMO_PRESET, parse_args

    args, _, _ = parse_args(["--preset", DEMO_PRESET, "--output_dir", str(batch_file.parent / "ours"),
                             "--max_steps", "2", "--skip_zero_advantage", "false", "--metrics_file", ""])
    trainer = AgentGRPOTrainer(model=model, args=args, processing_class=load_tokenizer(model))

    def sizes() -> dict:
        copy = getattr(trainer.generator, "_sampling_copy", None)
        held = sum(p.numel() * p.element_size() for p in copy.parameters()) if copy is not None else 0
        output = trainer.last_rollout.to_trl()
        batch_file.write_text(json.dumps({key: output[key] for key in ("prompt_ids", "completion_ids", "env_mask",
                                                                       "logprobs") if key in output}))
        return {"generation_copy_gb": round(held / GB, 3), "reference_model_gb": 0.0}

    return {"settings": {"trainer": "AgentGRPOTrainer", "activation_checkpointing": bool(
        getattr(args, "activation_checkpointing", None) or args.gradient_checkpointing),
        "micro_batch_tokens": args.micro_batch_tokens, "bf16": bool(args.bf16), "beta": args.beta,
        "loss_type": args.loss_type}, **measured_step(trainer, SAMPLER, sizes)}


def run_trl(batch_file: Path, model: str) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentgym_trl.models import load_tokenizer
    from agentgym_trl.train import DEMO_PRESET, parse_args

    batch = json.loads(batch_file.read_text())
    rows = len(batch["prompt_ids"])
    ours, _, _ = parse_args(["--preset", DEMO_PRESET, "--output_dir", str(batch_file.parent / "ours")])

    def rollout(prompts, trainer):  # the same token batch every call, in TRL's rollout_func format
        return {key: [list(row) for row in value] for key, value in batch.items()}

    def varied_reward(completions, **kwargs):  # rewards differ inside each group, so every row teaches
        return [float(i % 2) for i in range(len(completions))]

    config = GRPOConfig(output_dir=str(batch_file.parent / "trl"), max_steps=2, per_device_train_batch_size=rows,
                        num_generations=ours.num_generations,
                        max_completion_length=max(len(ids) for ids in batch["completion_ids"]),
                        learning_rate=ours.learning_rate, beta=0.0, loss_type=ours.loss_type, bf16=bool(ours.bf16),
                        use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, seed=0)
    dataset = Dataset.from_list([{"prompt": f"item {i // ours.num_generations}"} for i in range(rows * 4)])
    trainer = GRPOTrainer(model=model, reward_funcs=varied_reward, args=config, train_dataset=dataset,
                          processing_class=load_tokenizer(model), rollout_func=rollout)
    return {"settings": {"trainer": "trl.GRPOTrainer", "activation_checkpointing": bool(
        getattr(config, "activation_checkpointing", None) or config.gradient_checkpointing),
        "bf16": bool(config.bf16), "beta": config.beta, "loss_type": config.loss_type},
        **measured_step(trainer, SAMPLER, lambda: {"generation_copy_gb": 0.0, "reference_model_gb": 0.0})}


def attribute(run: dict, libraries_gb: float, tokens: int) -> dict:
    """The peak split into parts (GB) and the bytes per training token."""
    tracked = run["tracked_peak_gb"]
    parts = {"weights": tracked.get("parameter", 0.0), "gradients": tracked.get("gradient", 0.0),
             "optimizer_state": tracked.get("optstate", 0.0), "activations": tracked.get("activation", 0.0),
             "temporaries": tracked.get("temp", 0.0), "other_tensors": tracked.get("other", 0.0),
             "generation_copy": run["generation_copy_gb"], "reference_model": run["reference_model_gb"],
             "libraries": round(libraries_gb, 3)}
    parts["allocator_slack"] = round(run["step_peak_rss_gb"] - libraries_gb - tracked.get("total", 0.0), 3)
    working = (run["step_peak_rss_gb"] - run["start_rss_gb"]) * GB
    return {"parts_gb": parts, "step_peak_rss_gb": run["step_peak_rss_gb"], "start_rss_gb": run["start_rss_gb"],
            "tokens": tokens, "working_bytes_per_token": round(working / tokens)}


SAMPLER = ResidentPeak()


def child(mode: str, batch_file: Path, model: str, out: Path) -> None:
    """Run one trainer (in this fresh process) and write its numbers to ``out``."""
    SAMPLER.start()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch  # noqa: F401  (the libraries' memory is counted before any model)
    import transformers  # noqa: F401
    import trl  # noqa: F401

    import agentgym_trl  # noqa: F401

    libraries = psutil.Process().memory_info().rss / GB
    run = run_ours(batch_file, model) if mode == "ours" else run_trl(batch_file, model)
    run["libraries_gb"] = round(libraries, 3)
    out.write_text(json.dumps(run))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="default: the installed SmolLM2-135M-Instruct")
    parser.add_argument("--child", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.model is None:
        from agentgym_trl.models import default_model_path

        args.model = default_model_path()
    if args.child:
        child(args.child, args.batch, args.model, args.out)
        return
    from common import write_result

    runs = {}
    with tempfile.TemporaryDirectory() as folder:
        batch = Path(folder) / "batch.json"
        for mode in ("ours", "trl"):
            out = Path(folder) / f"{mode}.json"
            command = [sys.executable, __file__, "--child", mode, "--batch", str(batch), "--model", args.model,
                       "--out", str(out)]
            subprocess.run(command, cwd=ROOT, check=True)
            runs[mode] = json.loads(out.read_text())
        token_batch = json.loads(batch.read_text())
    tokens = sum(len(p) + len(c) for p, c in zip(token_batch["prompt_ids"], token_batch["completion_ids"]))
    completion = sum(len(c) for c in token_batch["completion_ids"])
    result = {"model": args.model, "rows": len(token_batch["prompt_ids"]), "tokens": tokens,
              "completion_tokens": completion, "runs": {}}
    for mode, run in runs.items():
        result["runs"][mode] = {"settings": run["settings"], **attribute(run, run["libraries_gb"], tokens),
                                "tracked_peak_gb": run["tracked_peak_gb"]}
    ours, theirs = result["runs"]["ours"], result["runs"]["trl"]
    result["bytes_per_token_ratio_ours_vs_trl"] = round(
        ours["working_bytes_per_token"] / theirs["working_bytes_per_token"], 3)
    write_result("step_memory", result)
    for mode, run in result["runs"].items():
        print(f"{mode}: peak {run['step_peak_rss_gb']} GB, {run['working_bytes_per_token']} working bytes per "
              f"token; parts {run['parts_gb']}")


if __name__ == "__main__":
    main()
