"""scripts/gpu_check.sh / gpu_check.py: the GPU check users run, here on the CPU through the same code path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_check  # noqa: E402

from agentgym_trl.engines.vllm_process import engine_available  # noqa: E402


def test_the_shell_script_parses_and_the_arguments_are_checked() -> None:
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")]).returncode == 0
    args = gpu_check.parse_args([])
    assert args.device == "cuda" and args.steps == 8 and args.parts == list(gpu_check.PARTS)
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--steps", "0"])
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--parts", "nonsense"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_and_exits_2(capsys) -> None:
    assert gpu_check.main(["--parts", "tiny"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_same_code_path_trains_on_the_cpu(tmp_path) -> None:
    parts = ["tiny", "tiny-lora"] + (["tiny-vllm"] if engine_available() else [])
    assert gpu_check.main(["--device", "cpu", "--steps", "1", "--parts", *parts, "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    records = {record["part"]: record for record in summary["parts"]}
    assert all(records[part]["ok"] and records[part]["weights_changed"] for part in parts)
    assert all(records[part]["nonfinite_grad_steps"] == 0 and len(records[part]["grad_norm"]) == 1 for part in parts)
    if "tiny-vllm" in records:
        assert records["tiny-vllm"]["engine_weight_loads"] >= 1


def test_without_trl_every_part_is_skipped_and_says_why(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gpu_check, "trl_installed", lambda: False)
    assert gpu_check.main(["--device", "cpu", "--steps", "1", "--out", str(tmp_path)]) == 0
    records = json.loads((tmp_path / "gpu_check.json").read_text())["parts"]
    assert [record["part"] for record in records] == list(gpu_check.PARTS)
    assert all(record["skipped"].startswith("trl is not installed") for record in records)


def test_the_shell_script_runs_the_bench_first_with_its_own_arguments(tmp_path) -> None:
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--bench", "--device", "cpu", "--parts",
                             "nonsense"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "BENCH_ARGS": f"--device cpu --quick --parts system --out {tmp_path}"})
    assert json.loads((tmp_path / "gpu_bench.json").read_text())["device"] == "cpu"
    assert result.returncode == 2 and "invalid choice: 'nonsense'" in result.stderr  # then gpu_check.py's arguments


def test_vllm_parts_pick_trls_vllm_on_cuda_where_the_gpu_set_is_installed(monkeypatch) -> None:
    monkeypatch.setattr(gpu_check, "trl_vllm_importable", lambda: True)
    monkeypatch.setattr("agentgym_trl.engines.vllm_process.engine_available", lambda *a: True)
    assert gpu_check.vllm_engine_for("cuda") == ("trl", "")
    assert gpu_check.vllm_engine_for("cpu") == ("process", ""), "TRL's colocate sync cannot load into vLLM's CPU layers"
    monkeypatch.setattr(gpu_check, "trl_vllm_importable", lambda: False)
    assert gpu_check.vllm_engine_for("cuda") == ("process", "")
    monkeypatch.setattr("agentgym_trl.engines.vllm_process.engine_available", lambda *a: False)
    engine, why = gpu_check.vllm_engine_for("cuda")
    assert engine is None and "[gpu]" in why and "setup_vllm.sh" in why


def test_a_vllm_part_on_trls_vllm_records_its_syncs_instead_of_crashing(tmp_path, monkeypatch) -> None:
    """With TRL's vLLM the trainer has no engine process (``trainer.vllm_engine`` is None): the part used to crash on
    its weight-load counter after training. TRL's VLLMGeneration is the stand-in of tests/test_trl_vllm.py here."""
    import importlib

    import trl.trainer.grpo_trainer as grpo_module
    from test_trl_vllm import FakeVLLMGeneration

    monkeypatch.setattr(importlib.import_module("trl.import_utils"), "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(grpo_module, "VLLMGeneration", FakeVLLMGeneration)
    monkeypatch.setattr(gpu_check, "vllm_engine_for", lambda device: ("trl", ""))
    FakeVLLMGeneration.built.clear()
    assert gpu_check.main(["--device", "cpu", "--steps", "1", "--parts", "tiny-vllm", "--out", str(tmp_path)]) == 0
    (record,) = json.loads((tmp_path / "gpu_check.json").read_text())["parts"]
    assert record["ok"] and record["engine"] == "vllm-trl" and "error" not in record
    assert record["last_synced_step"] == 0, "TRL synced before the step's rollout"
    assert record["engine_calls"] >= 1 and FakeVLLMGeneration.built[0].syncs == 1
    assert "engine_weight_loads" not in record
