"""What CPU this is, as the speed choices need it: its class, the flags that decide it, and any forcing.

Speed on a CPU depends on one question more than any other: does it run bf16 natively? On a CPU with
AVX512-BF16 (or AMX) a 135M model's forward and backward run about 3x faster in bf16 than in fp32; on a CPU
with AVX2 only, bf16 is emulated and a matmul runs about 200x slower than in fp32 (0.9 against 187 GFLOP/s on
2 cores, ``benchmarks/results/cpu_class_*.json``). The classes, best first:

* ``avx512-bf16``: AVX-512 with BF16 (or AMX) instructions: bf16 is the fast path;
* ``avx512``: AVX-512 without BF16: fp32 is the fast path;
* ``avx2``: AVX2 (and FMA), no AVX-512: most laptops, older servers, many CI runners; fp32 is the fast path;
* ``older``: none of these.

PyTorch's ``ATEN_CPU_CAPABILITY`` and oneDNN's ``ONEDNN_MAX_CPU_ISA`` cap the kernels a process uses below what
the hardware has (how the AVX2 path is measured on an AVX-512 machine); the class honours them, so a process
started with ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` chooses as an AVX2-only machine would.

This module reads ``/proc/cpuinfo`` and the environment only (no torch), so ``agentgym doctor`` works without
the trainer stack.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

#: the classes, best first
CPU_CLASSES = ("avx512-bf16", "avx512", "avx2", "older")
#: the /proc/cpuinfo flags that decide the class (and that result files name)
DECIDING_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
#: ATEN_CPU_CAPABILITY's values, as the highest class each lets PyTorch's kernels use
ATEN_CAPS = {"default": "older", "avx2": "avx2", "avx512": "avx512-bf16", "avx512_vnni": "avx512-bf16",
             "avx512_bf16": "avx512-bf16", "amx": "avx512-bf16"}
#: ONEDNN_MAX_CPU_ISA's values (lower case), as the highest class each lets oneDNN's kernels use
ONEDNN_CAPS = {"sse41": "older", "avx": "older", "avx2": "avx2", "avx2_vnni": "avx2", "avx2_vnni_2": "avx2",
               "avx512_core": "avx512", "avx512_core_vnni": "avx512", "avx512_core_bf16": "avx512-bf16",
               "avx10_1_512": "avx512-bf16", "avx512_core_amx": "avx512-bf16", "avx10_1_512_amx": "avx512-bf16",
               "avx512_core_amx_fp16": "avx512-bf16", "avx10_1_512_amx_fp16": "avx512-bf16",
               "avx10_2_512": "avx512-bf16", "avx10_2_512_amx_2": "avx512-bf16", "all": "avx512-bf16"}
#: the environment variables that cap the class
FORCING_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def read_cpu_flags(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> frozenset[str] | None:
    """The flags of the first processor in ``cpuinfo``; None where there is no such file (not Linux)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def hardware_class(flags: frozenset[str]) -> str:
    """The class the CPU's flags give, whatever the environment caps."""
    if "avx512f" in flags and ("avx512_bf16" in flags or "amx_bf16" in flags):
        return "avx512-bf16"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "older"


def class_cap(environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """The best class the environment lets kernels use, and the setting that capped it (None: no cap)."""
    environ = os.environ if environ is None else environ
    cap, reason = CPU_CLASSES[0], None
    for variable, table in (("ATEN_CPU_CAPABILITY", ATEN_CAPS), ("ONEDNN_MAX_CPU_ISA", ONEDNN_CAPS)):
        value = environ.get(variable, "").strip().lower()
        limit = table.get(value)
        if limit is not None and CPU_CLASSES.index(limit) > CPU_CLASSES.index(cap):
            cap, reason = limit, f"{variable}={environ[variable]}"
    return cap, reason


@dataclass(frozen=True)
class CpuReport:
    """This machine's CPU as a result file records it: what it is, its deciding flags, and the class it runs as."""

    model: str
    cores: int
    flags: tuple[str, ...]  # the deciding flags present (DECIDING_FLAGS order); empty when unknown
    hardware_class: str | None  # None where the flags cannot be read
    cpu_class: str | None  # the hardware class, capped by the environment
    forced_by: str | None  # the setting that capped it, e.g. "ATEN_CPU_CAPABILITY=avx2"

    def describe(self) -> str:
        """One line, e.g. "AVX2 only (AVX512-BF16 hardware, forced by ATEN_CPU_CAPABILITY=avx2)"."""
        if self.cpu_class is None:
            return "unknown (no /proc/cpuinfo)"
        text = CLASS_NAMES[self.cpu_class]
        if self.forced_by:
            text += f" ({CLASS_NAMES[self.hardware_class]} hardware, forced by {self.forced_by})"
        return text

    def to_dict(self) -> dict:
        """The record for a result file's ``machine`` entry."""
        return {**asdict(self), "flags": list(self.flags)}


CLASS_NAMES = {"avx512-bf16": "AVX512-BF16", "avx512": "AVX-512 without BF16", "avx2": "AVX2 only",
               "older": "no AVX2"}


def cpu_model_name(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """The CPU's marketing name (``model name`` in /proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a container or taskset narrows)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_report(environ: Mapping[str, str] | None = None, cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> CpuReport:
    """This machine's CPU, its class and what capped it."""
    flags = read_cpu_flags(cpuinfo)
    if flags is None:
        return CpuReport(cpu_model_name(cpuinfo), usable_cores(), (), None, None, None)
    hardware = hardware_class(flags)
    cap, reason = class_cap(environ)
    capped = CPU_CLASSES.index(cap) > CPU_CLASSES.index(hardware)
    return CpuReport(cpu_model_name(cpuinfo), usable_cores(), tuple(f for f in DECIDING_FLAGS if f in flags),
                     hardware, cap if capped else hardware, reason if capped else None)


def cpu_class(environ: Mapping[str, str] | None = None) -> str | None:
    """This machine's class as its processes run (``CPU_CLASSES``), None where the flags cannot be read."""
    return cpu_report(environ).cpu_class


def bf16_is_native(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this CPU, as its processes run, computes bf16 natively (class ``avx512-bf16``). Where the flags cannot
    be read (no /proc/cpuinfo), PyTorch's own probes answer if it is installed; without it, no."""
    known = cpu_class(environ)
    if known is not None:
        return known == "avx512-bf16"
    try:
        import torch
    except ImportError:
        return False
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)
