"""The main job as a user runs it (``accelerate launch examples/grpo.py``): wall time and peak memory per
stage, and what each stage scored, written to ``results/main_job.json`` (``main_job_vllm.json`` with
``--use_vllm true``) with its plot copied to ``docs/main_job.png``.

    python benchmarks/bench_main_job.py                     # ~10 minutes on 2 cores; extra arguments go to grpo.py
    python benchmarks/bench_main_job.py --use_vllm true     # the same job with the vLLM engine process
    python benchmarks/bench_main_job.py --result-name NAME  # results/NAME.json (bench_cpu_class.py, per CPU class)

The job runs in a child process under GNU time (``/usr/bin/time -v``: ``gnu_time_max_rss_gb`` is the peak of
its largest process); a sampler reads the resident memory of every process of its tree every 0.2 s (the
trainer, and the vLLM engine when there is one), and the job's own stage lines
("== evaluating the base model", "warm-up data", ...) split the run into stages: base evaluation,
warm-up (collect + behaviour cloning), warm-up evaluation, GRPO, final evaluation. The stages' scores
come from the run's own ``stages.json`` and metrics.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_DIR = ROOT / "runs" / "grpo-default"
STEP_KEYS = ("step", "agent/max_turns", "agent/success", "agent/reward", "agent/valid_action_rate",
             "agent/turns_mean", "agent/rollout_s", "frac_reward_zero_std", "step_time", "vllm/weight_sync_s",
             "sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/min",
             "sampling/importance_sampling_ratio/max")
# a line starting with the marker opens the stage (in this order)
STAGE_MARKERS = (("base evaluation", "== evaluating the base model"), ("warm-up", "== base: success"),
                 ("warm-up evaluation", "== evaluating the warm-up model"), ("grpo", "== warm-up: success"),
                 ("final evaluation", "== evaluating the grpo model"))


class TreeMemory(threading.Thread):
    """Peak resident memory of a process tree (the sum, and each process) in the current stage."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.stage = "start-up"
        self.peaks: dict[str, dict[str, float]] = {}
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                processes = [self.root, *self.root.children(recursive=True)]
                sizes = {}
                for process in processes:
                    try:
                        name = "vllm engine" if "vllm_worker" in " ".join(process.cmdline()) else "trainer"
                        sizes[name] = sizes.get(name, 0) + process.memory_info().rss
                    except psutil.Error:
                        continue
            except psutil.Error:
                break
            peak = self.peaks.setdefault(self.stage, {})
            total = sum(sizes.values())
            peak["total_gb"] = max(peak.get("total_gb", 0.0), total / 2**30)
            for name, size in sizes.items():
                key = f"{name.replace(' ', '_')}_gb"
                peak[key] = max(peak.get(key, 0.0), size / 2**30)
            time.sleep(0.2)


def gnu_time_max_rss_gb(report: Path) -> float | None:
    """``/usr/bin/time -v``'s "Maximum resident set size" (kB: the largest single process of the job), in GB."""
    if not report.exists():
        return None
    for line in report.read_text().splitlines():
        if "Maximum resident set size" in line:
            return round(int(line.rsplit(":", 1)[1]) * 1024 / 2**30, 2)
    return None


def main() -> None:
    extra = sys.argv[1:]
    result_name = None  # --result-name NAME: results/NAME.json, the plot left in the run's folder (bench_cpu_class)
    if "--result-name" in extra:
        at = extra.index("--result-name")
        result_name, extra = extra[at + 1], extra[:at] + extra[at + 2:]
    use_vllm = "--use_vllm" in extra and extra[extra.index("--use_vllm") + 1].lower() == "true"
    shutil.rmtree(OUTPUT_DIR, ignore_errors=True)  # a fresh run: no reused warm-up or evaluation
    command = ["accelerate", "launch", "examples/grpo.py", *extra]
    timing = OUTPUT_DIR.parent / "main_job.time"  # GNU time's report: the largest process's peak, as the issue measures
    timing.parent.mkdir(parents=True, exist_ok=True)
    timed_command = (["/usr/bin/time", "-v", "-o", str(timing)] if Path("/usr/bin/time").exists() else []) + command
    started = time.perf_counter()
    job = subprocess.Popen(timed_command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace")
    memory = TreeMemory(job.pid)
    memory.start()
    log, stage_starts, pending = [], {"start-up": 0.0}, list(STAGE_MARKERS)
    for line in job.stdout:
        log.append(line)
        sys.stderr.write(line)
        if pending and line.startswith(pending[0][1]):
            memory.stage = pending.pop(0)[0]
            stage_starts[memory.stage] = time.perf_counter() - started
    code = job.wait()
    seconds = time.perf_counter() - started
    memory.running = False
    memory.join()
    OUTPUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUTPUT_DIR / "main_job.log").write_text("".join(log), encoding="utf-8")
    if code != 0:
        sys.exit(f"the main job failed (exit {code}); see {OUTPUT_DIR / 'main_job.log'}")
    names = list(stage_starts)
    ends = [stage_starts[name] for name in names[1:]] + [seconds]
    stages_timed = {name: {"seconds": round(end - stage_starts[name], 1),
                           **{key: round(value, 2) for key, value in memory.peaks.get(name, {}).items()}}
                    for name, end in zip(names, ends)}
    stages = json.loads((OUTPUT_DIR / "stages.json").read_text())
    rows = [json.loads(line) for line in (OUTPUT_DIR / "agent_metrics.jsonl").read_text().splitlines() if line]
    steps = [{key: row[key] for key in STEP_KEYS if key in row} for row in rows if "agent/success" in row]
    write_result(result_name or ("main_job_vllm" if use_vllm else "main_job"), {
        "command": " ".join(command),
        "engine": "vllm" if use_vllm else "hf",
        "choice": next((line.strip() for line in log if line.startswith(("CPU ", "GPU "))), None),
        "wall_clock": f"{int(seconds // 60)}:{int(seconds % 60):02d}",
        "wall_s": round(seconds, 1),
        "peak_rss_gb": round(max(p.get("total_gb", 0.0) for p in memory.peaks.values()), 2),
        "gnu_time_max_rss_gb": gnu_time_max_rss_gb(timing),
        "stage_time_and_memory": stages_timed,
        "stages": stages,
        "grpo_steps": steps,
    })
    if result_name is None:
        plot = "main_job_vllm.png" if use_vllm else "main_job.png"
        shutil.copyfile(OUTPUT_DIR / "stages.png", ROOT / "docs" / plot)
    for name, stage in stages.items():
        print(f"{name}: success {stage['success']:.2f} {stage['ci95']}")


if __name__ == "__main__":
    main()
