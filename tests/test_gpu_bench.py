"""scripts/gpu_bench.py (``gpu_check.sh --bench``): every part on the CPU, on tiny shapes, and the JSON it writes.

On a CPU the numbers measure nothing of a GPU; these tests check that the code runs and that the record says
``device: cpu``. The real run is ``bash scripts/gpu_check.sh --bench`` on a GPU machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_bench  # noqa: E402

STAGES = ("to_cpu", "write", "read", "to_device", "read_and_to_device")


def quick_args(*extra: str):
    return gpu_bench.parse_args(["--device", "cpu", "--quick", *extra])


def test_arguments_and_shapes() -> None:
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")]).returncode == 0
    args = gpu_bench.parse_args([])
    assert args.device == "cuda" and args.parts == list(gpu_bench.PARTS)
    assert args.sync_shapes == ["qwen2-1.5b", "qwen2-7b"] and args.gen_shapes == ["qwen2-0.5b", "qwen2-1.5b"]
    assert quick_args().sync_shapes == ["tiny"] and quick_args().gen_shapes == ["tiny"]
    assert gpu_bench.WORKLOAD["full"] == (64, 3, 512, 64, 32)
    with pytest.raises(SystemExit):
        gpu_bench.parse_args(["--part-timeout", "0"])
    # the shapes are Qwen2's: 1.5B and 7B parameters (tied embeddings counted once)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with torch.device("meta"):
        sizes = {shape: sum(p.numel() for p in Qwen2ForCausalLM(Qwen2Config(**gpu_bench.SHAPES[shape])).parameters())
                 for shape in ("qwen2-0.5b", "qwen2-1.5b", "qwen2-7b")}
    assert 0.45e9 < sizes["qwen2-0.5b"] < 0.55e9 and 1.4e9 < sizes["qwen2-1.5b"] < 1.6e9
    assert 7.0e9 < sizes["qwen2-7b"] < 7.7e9


def test_system_and_weight_sync_on_the_cpu(tmp_path) -> None:
    system = gpu_bench.part_system(quick_args())
    assert system["gpu"] is None and system["torch"] == torch.__version__ and "host_available_gb" in system
    assert "shm_free_gb" in system
    (record,) = gpu_bench.part_weight_sync(quick_args("--spill-dir", str(tmp_path)))["shapes"]
    assert record["shape"] == "tiny" and record["dtype"] == "bfloat16" and record["read_back_equal"]
    assert record["where"] == "/dev/shm" or record["where"] == f"disk: {tmp_path}"
    assert all(record[stage]["s"] >= 0 for stage in STAGES)
    assert not list(tmp_path.iterdir()) and not list(Path("/dev/shm").glob("agentgym_gpu_bench_*"))


@pytest.mark.parametrize("engine", ["package", "file", "plain"])
def test_generation_through_each_engine(monkeypatch, engine: str) -> None:
    if engine == "file":  # as on a machine without TRL: agentgym_trl does not import, engines/hf.py alone does
        def no_package():
            raise ImportError("No module named 'trl'")

        monkeypatch.setattr(gpu_bench, "import_package_generation", no_package)
    if engine == "plain":
        monkeypatch.setattr(gpu_bench, "load_generation_module", lambda: (None, "transformers generate (test)"))
    (record,) = gpu_bench.part_generation(quick_args())["shapes"]
    contexts, turns, prompt, new, observation = gpu_bench.WORKLOAD["quick"]
    expected = {"package": "HFGenerator (agentgym_trl.engines.hf)", "file": "HFGenerator (loaded from",
                "plain": "transformers generate"}[engine]
    assert record["engine"].startswith(expected)
    assert len(record["turn_s"]) == turns and 0 < record["generated_tokens"] <= contexts * turns * new
    assert record["final_context_tokens_max"] <= prompt + turns * new + (turns - 1) * observation
    assert record["tokens_per_s"] > 0 and record["dtype"] == "float32"


def test_the_whole_run_writes_json_that_says_cpu(tmp_path) -> None:
    assert gpu_bench.main(["--device", "cpu", "--quick", "--parts", "system", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "gpu_bench.json").read_text())
    assert summary["device"] == "cpu" and summary["quick"] is True
    (part,) = summary["parts"]
    assert part["part"] == "system" and part["ok"] and part["gpu"] is None and part["part_s"] > 0


def test_a_part_past_its_timeout_is_reported_and_fails_the_run(tmp_path) -> None:
    assert gpu_bench.main(["--device", "cpu", "--quick", "--parts", "system", "--part-timeout", "0.05",
                           "--out", str(tmp_path)]) == 1
    (part,) = json.loads((tmp_path / "gpu_bench.json").read_text())["parts"]
    assert part == {**part, "ok": False, "error": "timed out after 0.05 s"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_and_exits_2(capsys) -> None:
    assert gpu_bench.main(["--parts", "system"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
