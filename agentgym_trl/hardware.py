"""What this machine gets: training precision, the engine and dtype that sample, and a matmul peak to compare with.

The choices follow the CPU's class (``agentgym_envs.core.machine``), as measured per class in
``benchmarks/results/cpu_class_*.json``: bf16 only where the CPU runs it natively, fp32 elsewhere, for training
(``fast_training.bf16_is_fast``) and for the vLLM engine's weights (``default_engine_dtype``). They are said once
when a run starts (``choice_line``) and by ``agentgym doctor`` (``doctor_rows``), so a user on a laptop knows what
the machine will run before waiting on it.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from agentgym_envs.core.machine import cpu_report
from agentgym_trl.engines.vllm_process import default_engine_dtype, engine_available
from agentgym_trl.fast_training import bf16_is_fast

#: the engine a run samples with unless it names one (``AgentGRPOConfig.engine``, ``agentgym eval --engine``)
DEFAULT_ENGINE = "hf"


def sampling_summary(engine: str, bf16: bool, vllm_dtype: str | None = None) -> str:
    """How episodes are sampled by ``engine`` (an engine kind) in a run that trains in bf16 or not, with the vLLM
    engine process's ``vllm_dtype`` (None: this machine's default)."""
    if engine == "hf":
        return "HF generate from a bf16 copy of the weights" if bf16 else "HF generate in fp32"
    if engine == "vllm-process":
        return f"the vLLM engine process in {vllm_dtype or default_engine_dtype()}"
    return f"the {engine} engine"


def choice_line(engine: str, bf16: bool, vllm_dtype: str | None = None) -> str:
    """The line a run prints once at start: the CPU's class and what this run does on it, e.g. "CPU AVX2 only
    (AMD EPYC, 2 cores): fp32 weights (bf16 is emulated here); episodes sampled with HF generate in fp32"."""
    report = cpu_report()
    if torch.cuda.is_available():
        where = f"GPU {torch.cuda.get_device_name(0)}"
    else:
        where = f"CPU {report.describe()} ({report.model}, {report.cores} cores)"
    precision = "bf16 autocast" if bf16 else "fp32 weights"
    if not bf16 and not bf16_is_fast():
        precision += " (bf16 is emulated here)"
    return f"{where}: {precision}; episodes sampled with {sampling_summary(engine, bf16, vllm_dtype)}"


def faster_sampling_hint(bf16: bool) -> str:
    """Whether another engine samples faster than the default on this class (``benchmarks/results/cpu_class_*.json``):
    on a bf16-native CPU (or a GPU) the vLLM engine process does, once started; on other CPUs HF ``generate`` in fp32
    measured faster than the engine in fp32."""
    if not bf16:
        return "none measured: HF generate in fp32 sampled faster than the vLLM engine in fp32 on this class"
    hint = ("--engine vllm samples faster here once started (it takes seconds to start and about 2 GB more "
            "memory): worth it for long evaluations")
    return hint if engine_available() else hint + ", after scripts/setup_vllm.sh"


def matmul_peak(dtype: torch.dtype, size: int = 1024, seconds: float = 1.0) -> float:
    """GFLOP/s of a ``size`` x ``size`` matmul in ``dtype`` on this process's threads, timed for ``seconds``: the
    machine's own yardstick, which a speed figure is divided by so that runs on different CPUs compare."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    for _ in range(2):
        a @ b
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        count += 1
    return 2 * size**3 * count / (time.perf_counter() - started) / 1e9


def doctor_rows(measure: bool = False) -> list[tuple[str, Any]]:
    """What the trainer stack chooses here, as ``agentgym doctor`` prints it (its ``agentgym.doctor`` entry point).

    Args:
        measure: also time a 1024 x 1024 matmul in fp32 and bf16 (about 2 s): the speed the choices rest on.
    """
    bf16 = bf16_is_fast()
    rows: list[tuple[str, Any]] = [
        ("torch", f"{torch.__version__}, kernels {torch.backends.cpu.get_cpu_capability()}, "
                  f"{torch.get_num_threads()} threads"),
        ("training precision", "bf16 autocast (native here)" if bf16 else "fp32 (bf16 would be emulated here)"),
        ("episodes sampled with", f"{sampling_summary(DEFAULT_ENGINE, bf16)} (engine '{DEFAULT_ENGINE}', the default)"),
        ("vLLM engine process", f"{'installed' if engine_available() else 'not installed (scripts/setup_vllm.sh)'}; "
                                f"its dtype here: {default_engine_dtype()}"),
    ]
    rows.append(("faster sampling", faster_sampling_hint(bf16)))
    if measure:
        fp32, bf16_speed = matmul_peak(torch.float32), matmul_peak(torch.bfloat16)
        rows.append(("matmul 1024x1024", f"fp32 {fp32:.1f} GFLOP/s, bf16 {bf16_speed:.1f} GFLOP/s "
                                         f"(bf16/fp32 {bf16_speed / fp32:.2f})"))
    return rows
