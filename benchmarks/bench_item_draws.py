"""Learnability-aware item draws against uniform ones: the episodes a step spends per group that teaches,
written to ``results/item_draws.json``.

Both arms start from the same model, the main job's warm-up (behaviour cloning on 64 oracle episodes, seed 0,
made once here), and train on the same items (TextCraft depth-1's train split) with dynamic sampling for the
same number of steps, with the main job's settings otherwise (the ``cpu-demo`` preset): only
``--item_draws`` differs. Each arm runs ``python -m agentgym_trl.train --preset cpu-demo`` in a child process;
its per-step logs give:

* ``groups_drawn`` / ``groups_teaching``: groups played, and those whose rewards differed (kept or not);
* ``drawn_episodes`` / ``groups_kept``: episodes played for the step, and the groups of the batch that teach;
* the item estimates' spread and the mean predicted teaching probability of the items drawn (learnability arm).

Totals per arm: the fraction of drawn groups that taught, and the episodes spent per kept group (the cost this
option exists to cut). Held-out success of each arm's last model (the 31 test items, one sample each, as the
main job evaluates) is reported beside, as exploratory: a few steps prove a cost, not a learning claim.

    python benchmarks/bench_item_draws.py                 # 2 arms x 10 steps, ~40 min on 2 cores
    python benchmarks/bench_item_draws.py --steps 3       # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs" / "bench-item-draws"
ARMS = ("uniform", "learnability")
STEP_KEYS = ("step", "dynamic/groups_drawn", "dynamic/groups_teaching", "dynamic/groups_kept",
             "dynamic/drawn_episodes", "dynamic/cap_hit", "agent/success", "items/estimate_spread",
             "items/played_frac", "items/drawn_teach_prob", "step_time")


def make_start(seed: int) -> str:
    """The main job's warm-up model (reused when this folder already holds it from the same inputs)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentgym_trl.models import default_model_path
    from agentgym_trl.stages import behaviour_clone
    from agentgym_trl.train import DEMO_PRESET, parse_args

    args, stage, _ = parse_args(["--preset", DEMO_PRESET, "--output_dir", str(RUNS), "--seed", str(seed)])
    return behaviour_clone(default_model_path(), args.env_ids, RUNS / "warmup", stage, bool(args.bf16), seed,
                           args.merged_first_turn)


def run_arm(arm: str, start: str, steps: int, seed: int, extra: list[str]) -> dict:
    """One arm through the trainer's command with the demo's settings: its command, per-step logs, totals and
    held-out success."""
    from agentgym_trl.experiments import TRAIN_COMMAND

    out = RUNS / arm
    command = [*TRAIN_COMMAND, "--model_name_or_path", start, "--output_dir", str(out),
               "--clone_episodes", "0", "--max_steps", str(steps), "--seed", str(seed),
               "--dynamic_sampling", "true", "--item_draws", arm, *extra]
    print(f"== {arm}: {' '.join(command)}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    seconds = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "agent_metrics.jsonl").read_text().splitlines() if line]
    steps_logged = [{key: row[key] for key in STEP_KEYS if key in row} for row in rows if "dynamic/groups_drawn" in row]
    drawn = sum(step["dynamic/groups_drawn"] for step in steps_logged)
    teaching = sum(step["dynamic/groups_teaching"] for step in steps_logged)
    kept = sum(step["dynamic/groups_kept"] for step in steps_logged)
    episodes = sum(step["dynamic/drawn_episodes"] for step in steps_logged)
    stages = json.loads((out / "stages.json").read_text())
    return {
        "command": " ".join(command[1:]),
        "wall_s": round(seconds, 1),
        "steps": steps_logged,
        "groups_drawn": drawn,
        "groups_teaching": teaching,
        "groups_kept": kept,
        "episodes": episodes,
        "teaching_frac_of_drawn": round(teaching / drawn, 4) if drawn else None,
        "episodes_per_kept_group": round(episodes / kept, 2) if kept else None,
        "held_out_success_exploratory": {name: {"success": stage["success"], "ci95": stage["ci95"],
                                                "per_item": stage["per_item"]} for name, stage in stages.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("extra", nargs="*", help="further agentgym_trl.train arguments, after --")
    args = parser.parse_args()
    start = make_start(args.seed)
    arms = {arm: run_arm(arm, start, args.steps, args.seed, args.extra) for arm in args.arms.split(",")}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    result = {"commit": commit.strip(),
              "start": "the main job's warm-up (the cpu-demo preset: 64 oracle episodes, 40 SFT steps)",
              "items": "AgentGym/TextCraft-Depth1-v0 train split", "steps": args.steps, "seed": args.seed,
              "arms": arms}
    if set(ARMS) <= set(arms):
        uniform, learn = arms["uniform"], arms["learnability"]
        if uniform["episodes_per_kept_group"] and learn["episodes_per_kept_group"]:
            result["episodes_per_kept_group_ratio"] = round(
                learn["episodes_per_kept_group"] / uniform["episodes_per_kept_group"], 3)
    write_result("item_draws", result)
    for arm, data in arms.items():
        print(f"{arm}: {data['teaching_frac_of_drawn']} of drawn groups taught; "
              f"{data['episodes_per_kept_group']} episodes per kept group")


if __name__ == "__main__":
    main()
