"""The main job as a user runs it (``accelerate launch examples/grpo.py``): wall time, peak memory and
what each stage scored, written to ``results/main_job.json`` with its plot copied to ``docs/main_job.png``.

    python benchmarks/bench_main_job.py            # about 15 minutes on 2 cores; any extra arguments go to grpo.py

The job runs in a child process under GNU ``time -v`` (for the peak resident memory of the whole
process tree's largest member); the stages come from the run's own ``stages.json`` and metrics.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_DIR = ROOT / "runs" / "grpo-default"
STEP_KEYS = ("step", "agent/max_turns", "agent/success", "agent/reward", "agent/valid_action_rate",
             "agent/turns_mean", "frac_reward_zero_std", "step_time")


def main() -> None:
    shutil.rmtree(OUTPUT_DIR, ignore_errors=True)  # a fresh run: no reused warm-up or evaluation
    command = ["accelerate", "launch", "examples/grpo.py", *sys.argv[1:]]
    started = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *command], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    (OUTPUT_DIR / "main_job.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        sys.exit(f"the main job failed (exit {done.returncode}); see {OUTPUT_DIR / 'main_job.log'}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    stages = json.loads((OUTPUT_DIR / "stages.json").read_text())
    rows = [json.loads(line) for line in (OUTPUT_DIR / "agent_metrics.jsonl").read_text().splitlines() if line]
    steps = [{key: row[key] for key in STEP_KEYS if key in row} for row in rows if "agent/success" in row]
    write_result("main_job", {
        "command": " ".join(command),
        "wall_clock": f"{int(seconds // 60)}:{int(seconds % 60):02d}",
        "peak_rss_gb": round(peak_kb / 2**20, 2),
        "stages": stages,
        "grpo_steps": steps,
    })
    shutil.copyfile(OUTPUT_DIR / "stages.png", ROOT / "docs" / "main_job.png")
    for name, stage in stages.items():
        print(f"{name}: success {stage['success']:.2f} {stage['ci95']}")


if __name__ == "__main__":
    main()
