"""scripts/behaviour_fingerprint.py: the same commit gives the same digests, and a difference is named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "behaviour_fingerprint.py"


def fingerprint(out: Path) -> dict:
    command = [sys.executable, str(SCRIPT), "--parts", "generated_data,losses", "--runs", "grpo", "--out", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True,
                   env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "HF_HUB_OFFLINE": "1"})
    return json.loads(out.read_text())


def compare(old: Path, new: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--compare", str(old), str(new)], cwd=ROOT,
                          capture_output=True, text=True)


def test_two_runs_agree_and_a_difference_is_named(tmp_path) -> None:
    first, second = fingerprint(tmp_path / "first.json"), fingerprint(tmp_path / "second.json")
    assert set(first["generated_data"]) == {"AgentGym/TextCraft-v0", "AgentGym/BabyAI-v0", "AgentGym/Maze-v0",
                                            "AgentGym/Weather-v0"}
    run = first["losses"]["grpo"]
    assert isinstance(run, dict) and len(run["weights"]) == 16
    assert [entry["loss"] for entry in run["log"] if "loss" in entry], "each step's loss is kept"
    agreed = compare(tmp_path / "first.json", tmp_path / "second.json")
    assert agreed.returncode == 0 and "identical" in agreed.stdout

    second["losses"]["grpo"]["weights"] = "0" * 16
    (tmp_path / "changed.json").write_text(json.dumps(second))
    differed = compare(tmp_path / "first.json", tmp_path / "changed.json")
    assert differed.returncode == 1 and "losses/grpo:" in differed.stdout
    assert "entries that differ: 1" in differed.stdout
