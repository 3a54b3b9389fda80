"""Shared helpers for the benchmark scripts: timing statistics and writing results as JSON."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def stats_ms(seconds: list[float]) -> dict[str, float]:
    """Median, p95 and mean of a list of durations, in milliseconds."""
    values = np.asarray(seconds, dtype=float) * 1000.0
    return {
        "median_ms": round(float(np.median(values)), 4),
        "p95_ms": round(float(np.percentile(values, 95)), 4),
        "mean_ms": round(float(values.mean()), 4),
        "n": int(values.size),
    }


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write ``results/<name>.json`` with the machine it ran on: its CPU, class and deciding flags (and what forced
    the class, if anything did)."""
    from agentgym_envs.core.machine import cpu_report

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": {"python": platform.python_version(),
                                              "cpu": platform.processor() or platform.machine(),
                                              **cpu_report().to_dict()},
               "written_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **data}
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {path}")
    return path
