"""One GRPO step of the default run, taken apart -> results/train_step.json.

The run measured is the default of issue 21: SmolLM2-135M-Instruct on TextCraft depth 1, one item
x a group of 4 episodes per step, 3 turns of at most 48 tokens, a 1024-token context, beta 0.001.
Each configuration runs in a fresh subprocess (so peak memory is its own) for ``--steps`` optimizer
steps on the same items; the last step is reported, broken into:

* rollout: model time split into prefill (forwards over more than one new token) and decode
  (one token per row), env and Python time; tokens per second;
* reference pass (KL), policy forward (with entropy), backward, optimizer;
* real vs padded tokens of the training batch, threads, CPU utilisation, peak RSS of the step;
* model-FLOPs utilisation (MFU) of the training part and of generation against this machine's
  matmul peak, measured in the same run (fp32 and bf16 ``torch.mm`` on all cores).

Configurations are cumulative, each adding one change to the one before, so every change is
measured; ``baseline`` is the run as ``accelerate launch examples/grpo.py`` executed it before the
changes (one thread, fp32, every position through the LM head, one micro-batch, each episode's
prompt prefilled separately). Ratios are against ``baseline`` of the same run.

Also written: the training throughput (episodes per hour) of the fast configuration on BabyAI-GoTo
and TextCraft-Depth1 at 6 turns, and eval throughput (test episodes per hour), for planning the
learning experiment (``--throughput``).

    python benchmarks/bench_train_step.py                 # every configuration (~15 min here)
    python benchmarks/bench_train_step.py --configs baseline,fast --steps 2
    python benchmarks/bench_train_step.py --throughput    # episodes per hour at 6 turns (~10 min)
    python benchmarks/bench_train_step.py --quick         # baseline and fast only
    python benchmarks/bench_train_step.py --configs baseline,fast,vllm --result train_step_engines   # HF vs vLLM
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Settings of the measured run (the default run of issue 21), as the trainer's flags over the demo's preset.
STEP_RUN = [
    "--preset", "cpu-demo",
    "--env_ids", "AgentGym/TextCraft-Depth1-v0",
    "--max_turns", "3",
    "--per_device_train_batch_size", "4",
    "--num_generations", "4",
    "--max_turn_tokens", "48",
    "--max_context_tokens", "1024",
    "--truncated_turn", "step",
    "--beta", "0.001",
    "--learning_rate", "1e-6",
    "--save_strategy", "no",
    "--report_to", "none",
    "--seed", "0",
]

# Each configuration adds one change to the previous one (flags of AgentGRPOConfig).
OFF = {  # each change, switched off
    "threads": ["--cpu_threads", "1"],
    "bf16": ["--bf16", "false"],
    "compact_lm_head": ["--compact_lm_head", "false"],
    "micro_batches": ["--micro_batch_tokens", "0", "--release_memory", "false"],
    "shared_prefill": ["--share_prompt_prefill", "false"],
}
# Configuration i has the first i changes on: "baseline" none (the run before issue 21), "fast" all (the defaults).
CONFIGS: dict[str, list[str]] = {
    name: [flag for change in list(OFF)[index:] for flag in OFF[change]]
    for index, name in enumerate(["baseline", *list(OFF)[:-1], "fast"])
}
# "fast" with the vLLM engine process generating (use_vllm; its importance correction adds a no-grad forward)
CONFIGS["vllm"] = [*CONFIGS["fast"], "--use_vllm", "true"]
THROUGHPUT_ENVS = ("AgentGym/BabyAI-GoTo-v0", "AgentGym/TextCraft-Depth1-v0")
THROUGHPUT_TURN_TOKENS = 64


# ---------------------------------------------------------------------------------------------------------------
# worker: one configuration, in its own process
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Phase:
    seconds: float = 0.0
    calls: int = 0
    tokens: int = 0

    def add(self, seconds: float, tokens: int = 0) -> None:
        self.seconds += seconds
        self.calls += 1
        self.tokens += tokens


@dataclass
class StepProfile:
    phases: dict[str, Phase] = field(default_factory=dict)
    batch: dict[str, int] = field(default_factory=dict)
    started: float = 0.0
    cpu_started: float = 0.0
    optimizer_started: float = 0.0

    def phase(self, name: str) -> Phase:
        return self.phases.setdefault(name, Phase())


class RssSampler(threading.Thread):
    """Peak resident memory of this process, sampled every 10 ms (ru_maxrss only grows, across steps too)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.running = True

    @staticmethod
    def current() -> int:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def reset(self) -> None:
        self.peak = self.current()

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.current())
            time.sleep(0.01)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def instrument(trainer: Any, profiles: list[StepProfile], sampler: RssSampler) -> None:
    """Hooks that time every phase of a step without changing what it computes."""
    import torch
    from transformers import TrainerCallback

    def timed_module(module: torch.nn.Module, classify) -> None:
        starts: list[float] = []

        def before(_module, args, kwargs):
            starts.append(time.perf_counter())

        def after(_module, args, kwargs, _output):
            ids = kwargs.get("input_ids", args[0] if args else None)
            name = classify(ids)
            tokens = int(kwargs["attention_mask"].sum()) if kwargs.get("attention_mask") is not None else 0
            if ids is not None and name == "decode":
                tokens = int(ids.shape[0])
            profiles[-1].phase(name).add(time.perf_counter() - starts.pop(), tokens)

        module.register_forward_pre_hook(before, with_kwargs=True)
        module.register_forward_hook(after, with_kwargs=True)

    def policy_phase(ids: Any) -> str:
        if torch.is_grad_enabled():
            return "policy_forward"
        if ids is not None and ids.shape[1] == 1:
            return "decode"
        return "prefill" if getattr(trainer, "_in_rollout", False) else "policy_forward_no_grad"

    timed_module(trainer.model, policy_phase)
    if trainer.ref_model is not None:
        timed_module(trainer.ref_model, lambda ids: "reference_forward")

    backward = trainer.accelerator.backward

    def timed_backward(loss, **kwargs):
        begin = time.perf_counter()
        out = backward(loss, **kwargs)
        profiles[-1].phase("backward").add(time.perf_counter() - begin)
        return out

    trainer.accelerator.backward = timed_backward

    compute_loss = trainer._compute_loss

    def recorded_loss(model, inputs):
        batch = profiles[-1].batch
        mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        batch["rows"] = batch.get("rows", 0) + int(mask.shape[0])
        batch["padded_tokens"] = batch.get("padded_tokens", 0) + int(mask.numel())
        batch["real_tokens"] = batch.get("real_tokens", 0) + int(mask.sum())
        batch["completion_tokens"] = batch.get("completion_tokens", 0) + int(inputs["completion_mask"].sum())
        return compute_loss(model, inputs)

    trainer._compute_loss = recorded_loss

    rollout = trainer._agent_rollout

    def timed_rollout(prompts, trainer_=None):
        trainer._in_rollout = True
        begin = time.perf_counter()
        try:
            output = rollout(prompts, trainer_)
            # sampled tokens (env_mask 1), for an engine whose decode steps are not seen here (vLLM's process)
            profiles[-1].batch["rollout_sampled_tokens"] = sum(sum(mask) for mask in output["env_mask"])
            return output
        finally:
            trainer._in_rollout = False
            profiles[-1].phase("rollout").add(time.perf_counter() - begin)

    trainer._agent_rollout = timed_rollout
    trainer.rollout_func = timed_rollout

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            profiles.append(StepProfile(started=time.perf_counter(), cpu_started=cpu_seconds()))
            sampler.reset()

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            profiles[-1].optimizer_started = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            profiles[-1].phase("optimizer").add(time.perf_counter() - profiles[-1].optimizer_started)

        def on_step_end(self, args, state, control, **kwargs):
            profile = profiles[-1]
            profile.batch["step_s"] = time.perf_counter() - profile.started
            profile.batch["cpu_s"] = cpu_seconds() - profile.cpu_started
            profile.batch["peak_rss"] = sampler.peak

    trainer.add_callback(StepTimer())


def model_flops_per_token(config: Any) -> tuple[float, float]:
    """Forward FLOPs per token of the transformer body and of the LM head (2 x multiply-adds)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    inter = config.intermediate_size
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads)
    head_dim = hidden // heads
    attention = hidden * (heads * head_dim) * 2 + hidden * (kv_heads * head_dim) * 2  # q, o and k, v projections
    mlp = 3 * hidden * inter
    return 2.0 * layers * (attention + mlp), 2.0 * hidden * config.vocab_size


def worker(name: str, steps: int, out: Path, extra: list[str]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from accelerate import PartialState

    from agentgym_trl import AgentGRPOTrainer
    from agentgym_trl.models import load_tokenizer, resolve_model
    from agentgym_trl.train import parse_args

    with tempfile.TemporaryDirectory(prefix="bench-step-") as output_dir:
        argv = [*STEP_RUN, *CONFIGS[name], *extra, "--max_steps", str(steps), "--output_dir", output_dir]
        args, _stages, model_args = parse_args(argv)
        model_path = resolve_model(model_args, args, PartialState())
        trainer = AgentGRPOTrainer(model=model_path, args=args, processing_class=load_tokenizer(model_path))
        sampler = RssSampler()
        sampler.start()
        profiles: list[StepProfile] = []
        instrument(trainer, profiles, sampler)
        trainer.train()
        sampler.running = False
        logs = [log for log in trainer.state.log_history if "agent/max_turns" in log]
        body, head = model_flops_per_token(trainer.model.config)
        result = {
            "config": name,
            "threads": torch.get_num_threads(),
            "bf16": bool(args.bf16),
            "steps": [profile_summary(p, log, body, head) for p, log in zip(profiles, logs)],
        }
        trainer.close_envs()
    out.write_text(json.dumps(result))


def profile_summary(profile: StepProfile, log: dict[str, Any], body: float, head: float) -> dict[str, Any]:
    phases = {name: round(phase.seconds, 3) for name, phase in profile.phases.items()}
    batch = profile.batch
    # one token per row per decode forward (each turn's first token comes out of its prefill and is not counted)
    generated = profile.phase("decode").tokens
    prefill_tokens = profile.phase("prefill").tokens
    rollout = profile.phase("rollout").seconds
    generation = profile.phase("prefill").seconds + profile.phase("decode").seconds
    # the vLLM engine generates in its own process: its tokens come from the rollout, its time is the rollout's
    if not generated:
        generated = batch.get("rollout_sampled_tokens", 0)
        generation = rollout - log.get("agent/env_s", 0.0)
    training = sum(profile.phase(n).seconds for n in ("reference_forward", "policy_forward", "backward", "optimizer"))
    # useful FLOPs: body on every real token, LM head on completion tokens only; forward 1x, backward 2x
    real, completion = batch.get("real_tokens", 0), batch.get("completion_tokens", 0)
    forward = body * real + head * completion
    training_flops = forward * 3 + forward  # policy forward + backward (2x) + reference forward
    generation_flops = (body + head) * generated + body * prefill_tokens + head * profile.phase("prefill").calls
    return {
        "step_s": round(batch.get("step_s", 0.0), 3),
        "phases_s": phases,
        "rollout": {
            "total_s": round(rollout, 3),
            "prefill_s": phases.get("prefill", 0.0),
            "decode_s": phases.get("decode", 0.0),
            "outside_model_s": round(rollout - generation, 3),
            "prefill_tokens": prefill_tokens,
            "sampled_tokens": generated,
            "sampled_tokens_per_s": round(generated / generation, 2) if generation else None,
        },
        "training_part_s": round(training, 3),
        "batch": {k: batch[k] for k in ("rows", "real_tokens", "padded_tokens", "completion_tokens") if k in batch},
        "cpu_utilisation": round(batch.get("cpu_s", 0.0) / batch["step_s"], 2) if batch.get("step_s") else None,
        "peak_rss_gb": round(batch.get("peak_rss", 0) / 2**30, 2),
        "training_flops": training_flops,
        "generation_flops": generation_flops,
        "training_gflops_per_s": round(training_flops / training / 1e9, 1) if training else None,
        "generation_gflops_per_s": round(generation_flops / generation / 1e9, 1) if generation else None,
        "success": log.get("agent/success"),
        "reward": log.get("agent/reward"),
        "turns_mean": log.get("agent/turns_mean"),
    }


# ---------------------------------------------------------------------------------------------------------------
# parent: matmul peak, every configuration in a subprocess, ratios
# ---------------------------------------------------------------------------------------------------------------
def matmul_peak(dtype_name: str, size: int = 2048, repeats: int = 8) -> float:
    """Best GFLOP/s of a square ``torch.mm`` on all cores."""
    import torch

    dtype = getattr(torch, dtype_name)
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        begin = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - begin)
    return 2 * size**3 / best / 1e9


def run_config(name: str, steps: int, extra: list[str] | None = None) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # what `accelerate launch` exports when no config sets it
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = Path(handle.name)
    command = [sys.executable, __file__, "--worker", name, "--steps", str(steps), "--out", str(out), "--",
               *(extra or [])]
    print(f"[{name}] {' '.join(command[1:])}", file=sys.stderr, flush=True)
    begin = time.perf_counter()
    subprocess.run(command, env=env, check=True, cwd=ROOT)
    result = json.loads(out.read_text())
    out.unlink()
    result["wall_s"] = round(time.perf_counter() - begin, 1)
    last = result["steps"][-1]
    print(f"[{name}] step {last['step_s']} s, rollout {last['rollout']['total_s']} s, training "
          f"{last['training_part_s']} s, peak RSS {last['peak_rss_gb']} GB", file=sys.stderr, flush=True)
    return result


def eval_throughput(env_id: str, items: int, turns: int) -> dict[str, Any]:
    """Test episodes per hour of ``agentgym eval``'s model runner (one batch of ``items`` episodes, bf16, greedy)."""
    from agentgym_trl.eval import evaluate_model
    from agentgym_trl.fast_training import bf16_is_fast
    from agentgym_trl.models import default_model_path

    with tempfile.TemporaryDirectory(prefix="bench-eval-") as out:
        begin = time.perf_counter()
        report = evaluate_model(default_model_path(), [env_id], out, max_turns=[turns], limit=items, temperature=0.0,
                                batch_size=items, max_turn_tokens=THROUGHPUT_TURN_TOKENS, max_context_tokens=2048,
                                bf16=bf16_is_fast(), progress=False)
        seconds = time.perf_counter() - begin
    return {"episodes": report.episodes, "seconds": round(seconds, 1),
            "episodes_per_hour": round(report.episodes / seconds * 3600)}


def throughput(steps: int) -> dict[str, Any]:
    """Training and test episodes per hour at 6 turns, for planning the learning experiment."""
    results: dict[str, Any] = {}
    for env_id in THROUGHPUT_ENVS:
        run = run_config("fast", steps, ["--env_ids", env_id, "--max_turns", "6", "--per_device_train_batch_size", "8",
                                         "--max_turn_tokens", str(THROUGHPUT_TURN_TOKENS),
                                         "--max_context_tokens", "2048"])
        last = run["steps"][-1]
        results[env_id] = {
            "train": {"episodes_per_step": 8, "step_s": last["step_s"],
                      "episodes_per_hour": round(8 / last["step_s"] * 3600), "turns_mean": last["turns_mean"],
                      "real_tokens_per_step": last["batch"].get("real_tokens"), "peak_rss_gb": last["peak_rss_gb"]},
            "eval": eval_throughput(env_id, items=16, turns=6),
        }
        print(f"[throughput] {env_id}: {results[env_id]}", file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--worker")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--throughput", action="store_true", help="episodes per hour at 6 turns")
    parser.add_argument("--quick", action="store_true", help="only baseline and fast (benchmarks/run.py --quick)")
    parser.add_argument("--result", default="train_step",
                        help="results/<name>.json to write (configurations of earlier runs in it are kept)")
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    if args.quick:
        args.configs = "baseline,fast"
    if args.worker:
        worker(args.worker, args.steps, args.out, args.extra)
        return
    sys.path.insert(0, str(HERE))
    from common import RESULTS_DIR, write_result

    previous_path = RESULTS_DIR / f"{args.result}.json"
    previous = json.loads(previous_path.read_text()) if previous_path.exists() else {}
    previous = {k: v for k, v in previous.items() if k not in ("benchmark", "machine", "written_at")}
    if args.throughput:
        write_result(args.result, {**previous, "episodes_per_hour_at_6_turns": throughput(args.steps)})
        return
    peaks = {"fp32": round(matmul_peak("float32"), 1), "bf16": round(matmul_peak("bfloat16"), 1)}
    print(f"matmul peak on all cores: {peaks} GFLOP/s", file=sys.stderr)
    results = previous.get("configs", {})
    for name in args.configs.split(","):
        results[name] = run_config(name, args.steps)
    for result in results.values():
        last = result["steps"][-1]
        peak = peaks["bf16"] if result["bf16"] else peaks["fp32"]
        last["training_mfu_vs_bf16_peak"] = round(last["training_gflops_per_s"] / peaks["bf16"], 3)
        last["training_mfu_vs_own_dtype_peak"] = round(last["training_gflops_per_s"] / peak, 3)
        if last["generation_gflops_per_s"]:
            last["generation_mfu_vs_bf16_peak"] = round(last["generation_gflops_per_s"] / peaks["bf16"], 3)
    ratios = {}
    if "baseline" in results:
        base = results["baseline"]["steps"][-1]
        for name, result in results.items():
            last = result["steps"][-1]
            ratios[name] = {
                "step_speedup": round(base["step_s"] / last["step_s"], 2),
                "training_part_speedup": round(base["training_part_s"] / last["training_part_s"], 2),
                "sampled_tokens_per_s_ratio": round(last["rollout"]["sampled_tokens_per_s"]
                                                    / base["rollout"]["sampled_tokens_per_s"], 2)
                if last["rollout"]["sampled_tokens_per_s"] and base["rollout"]["sampled_tokens_per_s"] else None,
                "peak_rss_ratio": round(last["peak_rss_gb"] / base["peak_rss_gb"], 2),
            }
    write_result(args.result, {
        **{key: value for key, value in previous.items() if key == "episodes_per_hour_at_6_turns"},
        "run": " ".join(STEP_RUN),
        "matmul_peak_gflops": peaks,
        "targets": {"step_s": 15, "peak_rss_gb": 4, "training_mfu_vs_bf16_peak": 0.5, "generation_speedup": 3},
        "configs": results,
        "ratios_vs_baseline": ratios,
    })


if __name__ == "__main__":
    main()
