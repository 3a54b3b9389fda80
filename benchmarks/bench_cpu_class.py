"""Speed per CPU class, in one run on one machine -> results/cpu_class_<class>.json.

A user cannot choose their CPU. On an AVX512-BF16 machine this runs every part twice: as the machine is
(``native``) and forced onto the AVX2 path (``avx2``: ``ATEN_CPU_CAPABILITY=avx2`` for PyTorch's kernels,
``ONEDNN_MAX_CPU_ISA=AVX2`` for oneDNN's; the vLLM engine process takes its AVX2 kernels under the same
variables, ``vllm_worker.honour_isa_cap``). Each part runs in a child process with that environment:

* ``matmul``: the class's own yardstick, a 1024 x 1024 matmul's GFLOP/s in fp32 and bf16 (2 s each); it also shows
  that forcing worked (bf16 falls from ~2x fp32 to ~0.5% of it);
* ``eval``: ``agentgym eval --model default`` at the rollout-speed shape (8 TextCraft depth-1 test items x 2 samples,
  4 turns of at most 48 tokens, batch 16) per engine and dtype: HF fp32, HF bf16, the vLLM engine process in
  bfloat16 and in float32, and, paired in the same run, the class's default HF variant as the HF engine generated
  at 91e3954 (``BASELINE``: no prefill shared across items, a cache grown by concatenation), the "today" of issue
  59. Sampled tokens per second of agent time, and that figure per GFLOP/s of the class's matmul peak in the dtype
  it ran (comparable across machines); where the time went: env, and for HF the model's prefills, its decode
  steps and the rest of ``generate`` (``HFGenerator.timing``), each set against the class's limit (the matmul
  peak over 2 FLOPs per parameter and position); and which variant the class gets by default. A variant over
  ``--eval-timeout`` seconds is recorded as such; bf16 variants are skipped, with the reason, where bf16 matmuls
  run under a tenth of fp32's speed (emulated: 0.9 GFLOP/s on the AVX2 path);
* ``profile``: the class's default variant once more under ``torch.profiler``: the operators that took the most
  CPU time (self time, with their call counts), so the split of a decode step into matmuls, attention and
  sampling can be read from the file;
* ``main_job``: the main job (``bench_main_job.py``, ``accelerate launch examples/grpo.py``) under the class's
  environment: wall time, peak memory and scores per stage, and its GRPO steps' time, into
  ``results/main_job_native.json`` and ``main_job_avx2.json``.

    python benchmarks/bench_cpu_class.py                          # matmul + eval, both classes (~15 min on 2 cores)
    python benchmarks/bench_cpu_class.py --parts main_job         # + ~10 min (native) and more (avx2)
    python benchmarks/bench_cpu_class.py --parts matmul profile   # the defaults' operators (~3 min)

The files in ``results/`` came from ``--parts matmul eval main_job`` and then ``--parts matmul profile`` (each file's
``commands``), with nothing else running.
    python benchmarks/bench_cpu_class.py --classes avx2 --parts matmul

Measure with nothing else running: ``nice`` does not shield a benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS_DIR, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: how each class runs: the variables set (and, for native, removed) in its children
CLASS_ENVIRONMENTS = {"native": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
FORCING = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
#: the evaluation variants: name -> (engine, bf16 of HF / dtype of the vLLM engine)
EVAL_VARIANTS = {"hf fp32": ("hf", "float32"), "hf bf16": ("hf", "bfloat16"),
                 "vllm bf16": ("vllm-process", "bfloat16"), "vllm fp32": ("vllm-process", "float32")}
#: the HF engine's generation as of 91e3954, issue 59's "today": HFGenerator options that turn off what came since
BASELINE = {"share_prompt_prefill": False, "reserve_cache": False}
BASELINE_SUFFIX = " (91e3954 path)"
#: a bf16/fp32 matmul ratio below this means bf16 is emulated: its variants are not run
EMULATED_BF16 = 0.1
#: the rollout-speed shape
SHAPE = dict(env_id="AgentGym/TextCraft-Depth1-v0", items=8, samples=2, turns=4, turn_tokens=48, batch=16,
             temperature=1.0, seed=0)


def child_environment(cpu_class: str) -> dict[str, str]:
    """This process's environment with the class's forcing variables (and no stray ones)."""
    env = {key: value for key, value in os.environ.items() if key not in FORCING}
    return {**env, **CLASS_ENVIRONMENTS[cpu_class], "PYTHONPATH": str(ROOT)}


def run_child(cpu_class: str, arguments: list[str], timeout: float) -> dict:
    """Run this script as a child in the class's environment; its last stdout line is its JSON result."""
    command = [sys.executable, __file__, "--child", *arguments]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, env=child_environment(cpu_class), capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"timed_out_after_s": timeout}
    if done.returncode != 0:
        return {"failed": done.stderr[-2000:], "seconds": round(time.perf_counter() - started, 1)}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_matmul() -> dict:
    """The child's part ``matmul``: GFLOP/s in fp32 and bf16, and which kernels torch runs."""
    import torch

    from agentgym_trl.hardware import matmul_peak

    fp32, bf16 = matmul_peak(torch.float32, seconds=2.0), matmul_peak(torch.bfloat16, seconds=2.0)
    return {"torch_kernels": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
            "fp32_gflops": round(fp32, 1), "bf16_gflops": round(bf16, 1), "bf16_over_fp32": round(bf16 / fp32, 4)}


def measure_eval(variant: str) -> dict:
    """The child's part ``eval``: one variant at the rollout-speed shape (``BASELINE_SUFFIX``: as of 91e3954)."""
    from agentgym_envs.evaluation.records import load_run
    from agentgym_envs.evaluation.runner import evaluate
    from agentgym_trl.agent import ModelAgent
    from agentgym_trl.engines.vllm_process import EngineOptions

    baseline = variant.endswith(BASELINE_SUFFIX)
    engine, dtype = EVAL_VARIANTS[variant.removesuffix(BASELINE_SUFFIX)]
    options = (dict(bf16=dtype == "bfloat16") if engine == "hf" else
               dict(engine=engine, engine_options=EngineOptions(dtype=dtype, max_model_len=4096,
                                                                max_num_seqs=SHAPE["batch"])))
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        agent = ModelAgent.from_name("default", temperature=SHAPE["temperature"], batch_size=SHAPE["batch"],
                                     max_turn_tokens=SHAPE["turn_tokens"], seed=SHAPE["seed"], progress=False,
                                     **options)
        for option, value in (BASELINE if baseline else {}).items():
            setattr(agent.generator, option, value)
        try:
            evaluate(agent, [SHAPE["env_id"]], out, n_samples=SHAPE["samples"], max_turns=[SHAPE["turns"]],
                     limit=SHAPE["items"], progress=False)
        finally:
            agent.close()
        wall = time.perf_counter() - started
        records = load_run(out)
        model = getattr(agent.generator, "model", None)
        timing = getattr(agent.generator, "timing", None)
    batches = {(r["timing"]["batch_s"], r["timing"]["batch_agent_s"]): r["timing"] for r in records if r.get("timing")}
    agent_s = sum(timing["batch_agent_s"] for timing in batches.values())
    env_s = sum(timing.get("batch_env_s") or 0.0 for timing in batches.values())
    tokens = sum(int(r.get("tokens") or 0) for r in records)
    generation = {}
    if timing is not None and model is not None:
        generation = {"generation": {**timing.to_dict(), "outside_generator_s": round(agent_s - timing.generator_s, 3),
                                     "parameters": sum(p.numel() for p in model.parameters())}}
    return {"variant": variant, "engine": engine, "dtype": dtype, "episodes": len(records), "sampled_tokens": tokens,
            **({"as_of": "91e3954", "generator_options": BASELINE} if baseline else {}), **generation,
            "agent_s": round(agent_s, 2), "env_s": round(env_s, 2), "wall_s": round(wall, 1),
            "overhead_s": round(wall - agent_s - env_s, 1),  # model loading, engine start, writing records
            "tokens_per_s": round(tokens / agent_s, 1) if agent_s else None,
            "success": round(sum(bool(r.get("success")) for r in records) / max(len(records), 1), 3),
            "per_episode": [{"item": r.get("item_id"), "sample": r.get("sample"), "tokens": r.get("tokens"),
                             "turns": r.get("turns"), "success": bool(r.get("success"))} for r in records]}


def profile_eval(variant: str, top: int = 12) -> dict:
    """The child's part ``profile``: ``measure_eval(variant)`` under ``torch.profiler``, its operators by self CPU
    time (the profiler's own overhead makes the variant slower than unprofiled: compare shares, not seconds)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        measured = measure_eval(variant)
    events = sorted(profiler.key_averages(), key=lambda event: event.self_cpu_time_total, reverse=True)
    total = sum(event.self_cpu_time_total for event in events)
    return {"variant": variant, "tokens_per_s_profiled": measured["tokens_per_s"],
            "self_cpu_s": round(total / 1e6, 2),
            "operators": [{"name": event.key, "self_cpu_s": round(event.self_cpu_time_total / 1e6, 2),
                           "share": round(event.self_cpu_time_total / total, 3), "calls": event.count}
                          for event in events[:top]]}


def default_variant(cpu_class: str) -> str:
    """The variant the class gets when a user names no engine and no precision (asked in the class's child)."""
    code = ("from agentgym_trl.fast_training import bf16_is_fast; from agentgym_trl.hardware import DEFAULT_ENGINE;"
            "print(DEFAULT_ENGINE, bf16_is_fast())")
    done = subprocess.run([sys.executable, "-c", code], env=child_environment(cpu_class), capture_output=True,
                          text=True, check=True, cwd=ROOT)
    engine, bf16 = done.stdout.split()
    kind = "hf" if engine == "hf" else "vllm"
    return f"{kind} {'bf16' if bf16 == 'True' else 'fp32'}"


def run_main_job(cpu_class: str, timeout: float) -> dict:
    """The main job under the class's environment (``bench_main_job.py``), summarised from its result file."""
    name = f"main_job_{cpu_class}"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_main_job.py"), "--result-name", name]
    try:
        subprocess.run(command, env=child_environment(cpu_class), check=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"timed_out_after_s": timeout}
    job = json.loads((RESULTS_DIR / f"{name}.json").read_text())
    steps = sorted(step["step_time"] for step in job["grpo_steps"] if "step_time" in step)
    return {"result_file": f"{name}.json", "wall_s": job["wall_s"], "peak_rss_gb": job["peak_rss_gb"],
            "stage_seconds": {stage: values["seconds"] for stage, values in job["stage_time_and_memory"].items()},
            "success": {stage: values["success"] for stage, values in job["stages"].items()},
            "grpo_step_s_median": steps[len(steps) // 2] if steps else None}


def against_limit(row: dict, peak_gflops: float) -> dict:
    """Where an HF variant's agent time went, each model part as a rate against the class's limit: the matmul peak
    over 2 FLOPs per parameter and position (what a prefill or decode step could reach if its matmuls ran at peak)."""
    generation = row["generation"]
    limit = peak_gflops * 1e9 / (2 * generation["parameters"])
    rate = {part: generation[f"{part}_positions"] / generation[f"{part}_s"] if generation[f"{part}_s"] else None
            for part in ("prefill", "decode")}
    return {"limit_positions_per_s": round(limit, 1),
            "seconds": {"prefill": generation["prefill_s"], "decode": generation["decode_s"],
                        "rest_of_generator": generation["other_generator_s"], "env": row["env_s"],
                        "agent_outside_generator": generation["outside_generator_s"]},
            **{f"{part}_positions_per_s": round(value, 1) for part, value in rate.items() if value},
            **{f"{part}_share_of_limit": round(value / limit, 3) for part, value in rate.items() if value}}


def measure_class(cpu_class: str, parts: list[str], eval_timeout: float) -> dict:
    """Every part asked for, for one class; each eval figure also as a ratio to the class's matmul peak, and the
    default variant paired with its 91e3954 path (``BASELINE``) in the same run."""
    matmul = run_child(cpu_class, ["matmul"], timeout=120)
    result: dict = {"environment": CLASS_ENVIRONMENTS[cpu_class], "matmul": matmul}
    default = default_variant(cpu_class) if {"eval", "profile"} & set(parts) else None
    if "eval" in parts:
        rows = []
        for variant in [name for base in EVAL_VARIANTS
                        for name in (base, *([base + BASELINE_SUFFIX] if base == default else []))]:
            bf16 = EVAL_VARIANTS[variant.removesuffix(BASELINE_SUFFIX)][1] == "bfloat16"
            if bf16 and matmul.get("bf16_over_fp32", 1.0) < EMULATED_BF16:
                rows.append({"variant": variant, "skipped": f"bf16 matmuls run at {matmul['bf16_over_fp32']:.1%} "
                             "of fp32 here (emulated): hours at this shape, and no default uses them"})
                continue
            row = {"variant": variant, **run_child(cpu_class, ["eval", variant], timeout=eval_timeout)}
            peak = matmul.get(f"{'bf16' if bf16 else 'fp32'}_gflops")
            if row.get("tokens_per_s") and peak:
                row["tokens_per_s_per_peak_gflops"] = round(row["tokens_per_s"] / peak, 3)
            if row.get("generation") and peak:
                row["against_limit"] = against_limit(row, peak)
            rows.append(row)
            print(f"[{cpu_class}] eval {variant}: {row.get('tokens_per_s', row)} tok/s", file=sys.stderr)
        result["eval"] = rows
        result["default_variant"] = default
        speeds = {row["variant"]: row.get("tokens_per_s") for row in rows}
        now, before = speeds.get(default), speeds.get(default + BASELINE_SUFFIX)
        if now and before:
            result["default_speedup_over_91e3954"] = round(now / before, 2)
    if "profile" in parts:
        result["profile"] = run_child(cpu_class, ["profile", default], timeout=eval_timeout)
    if "main_job" in parts:
        result["main_job"] = run_main_job(cpu_class, timeout=3600)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", nargs="+", default=list(CLASS_ENVIRONMENTS), choices=list(CLASS_ENVIRONMENTS))
    parser.add_argument("--parts", nargs="+", default=["matmul", "eval"],
                        choices=["matmul", "eval", "profile", "main_job"])
    parser.add_argument("--eval-timeout", type=float, default=600.0, help="seconds one evaluation variant may take")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # a part, in the class's environment: its JSON on the last line
        part, *rest = args.child
        measure = {"matmul": measure_matmul, "eval": measure_eval, "profile": profile_eval}[part]
        print(json.dumps(measure(" ".join(rest)) if rest else measure()))
        return
    from agentgym_envs.core.machine import cpu_report

    for cpu_class in args.classes:
        result = measure_class(cpu_class, args.parts, args.eval_timeout)
        forced = cpu_report(child_environment(cpu_class))
        name = f"cpu_class_{forced.cpu_class}"
        kept = earlier_parts(name, args.parts)
        write_result(name, {"class": forced.to_dict(), "shape": SHAPE, **kept, **result,
                            "commands": {**kept.get("commands", {}),
                                         **{part: " ".join(sys.argv) for part in args.parts}}})


def earlier_parts(name: str, parts: list[str]) -> dict:
    """The parts of an earlier ``name`` result that this run does not measure again. Matmul is re-measured every run,
    so kept eval figures keep the matmul peak they were divided by, as ``eval_matmul``."""
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        return {}
    earlier = json.loads(path.read_text())
    eval_keys = ("eval", "default_variant", "default_speedup_over_91e3954")
    kept = {key: earlier[key] for key in (*eval_keys, "profile", "main_job", "commands") if key in earlier
            and (key == "commands" or (key in eval_keys and "eval" not in parts)
                 or (key in ("profile", "main_job") and key not in parts))}
    if kept.get("eval") and "eval" not in parts:
        kept["eval_matmul"] = earlier.get("eval_matmul", earlier.get("matmul"))  # the peak the eval ratios used
    return kept


if __name__ == "__main__":
    main()
