"""The stages around GRPO in examples/grpo.py: behaviour-cloning warm-up, held-out success, the report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import agentgym_envs  # noqa: E402, F401
from tiny_model import save_tiny  # noqa: E402

from agentgym_trl.models import is_reloadable  # noqa: E402
from agentgym_trl.stages import StageArguments, behaviour_clone, held_out_success, report_stages  # noqa: E402

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"


def test_warm_up_then_held_out_success_then_report(tmp_path: Path, capsys) -> None:
    model = str(save_tiny(tmp_path / "tiny"))
    stage = StageArguments(clone_episodes=4, clone_steps=2, clone_learning_rate=1e-3, eval_items=3)
    clone = behaviour_clone(model, [TEXTCRAFT], tmp_path / "warmup", stage, bf16=False, seed=0)
    assert clone == str(tmp_path / "warmup") and is_reloadable(clone)
    assert behaviour_clone(model, [TEXTCRAFT], tmp_path / "warmup", stage, bf16=False, seed=0) == clone  # reused

    stages = {}
    for name, path in (("base", model), ("warm-up", clone)):
        stages[name] = held_out_success(path, [TEXTCRAFT], tmp_path / f"eval-{name}", stage, max_turns=2,
                                        max_turn_tokens=12, max_context_tokens=1024, bf16=False)
    for result in stages.values():
        assert result["episodes"] == 3 and len(result["per_item"]) == 3
        assert 0.0 <= result["ci95"][0] <= result["success"] <= result["ci95"][1] <= 1.0
        assert 0.0 <= result["valid_action_rate"] <= 1.0
    # the same three test items (the first of the split) at every stage
    assert stages["base"]["per_item"].keys() == stages["warm-up"]["per_item"].keys()

    metrics = tmp_path / "agent_metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "agent/success": s / 4, "agent/reward": s / 4,
                                           "agent/valid_action_rate": 0.5}) + "\n" for s in (1, 2, 3)))
    path = report_stages(stages, tmp_path, "agent_metrics.jsonl")
    assert json.loads(path.read_text()) == json.loads(json.dumps(stages))
    assert (tmp_path / "stages.png").stat().st_size > 10_000
    printed = capsys.readouterr().err
    assert "held-out success (same test items at every stage):" in printed and "warm-up" in printed


def test_a_warm_up_is_reused_only_for_the_inputs_it_was_made_from(tmp_path) -> None:
    """A rerun in the same output_dir with another start model (or other weights under the same path) is refused
    before any training, instead of silently training the first model's warm-up."""
    from agentgym_trl.models import weights_fingerprint
    from agentgym_trl.stages import STAGE_INPUTS_FILE

    first, second = save_tiny(tmp_path / "first"), save_tiny(tmp_path / "second", seed=1)
    assert weights_fingerprint(first) != weights_fingerprint(second)
    warmup = save_tiny(tmp_path / "run" / "warmup")  # a finished warm-up of `first`
    stage = StageArguments(clone_episodes=4)
    clone = {name: getattr(stage, name) for name in ("clone_episodes", "clone_steps", "clone_batch_size",
                                                     "clone_learning_rate", "clone_max_length")}
    inputs = {"model": str(first), "weights": weights_fingerprint(first), "env_ids": ["AgentGym/TextCraft-Depth1-v0"],
              "clone": clone, "bf16": False, "seed": 0, "merged_first_turn": False, "items": None}
    (warmup / STAGE_INPUTS_FILE).write_text(json.dumps(inputs))
    env_ids = ["AgentGym/TextCraft-Depth1-v0"]
    # same inputs: reused (recorded before clone_lr_schedule existed: made with its default, cosine)
    assert behaviour_clone(str(first), env_ids, warmup, stage, False, 0) == str(warmup)
    with pytest.raises(ValueError, match="differs in clone"):
        behaviour_clone(str(first), env_ids, warmup, StageArguments(clone_episodes=4, clone_lr_schedule="constant"),
                        False, 0)
    with pytest.raises(ValueError, match="differs in model, weights"):
        behaviour_clone(str(second), env_ids, warmup, stage, False, 0)
    with pytest.raises(ValueError, match="differs in clone"):
        behaviour_clone(str(first), env_ids, warmup, StageArguments(clone_episodes=8), False, 0)
    (warmup / STAGE_INPUTS_FILE).unlink()
    with pytest.raises(ValueError, match="not recorded"):
        behaviour_clone(str(first), env_ids, warmup, stage, False, 0)


def test_a_warm_up_re_made_elsewhere_has_the_same_fingerprint(tmp_path) -> None:
    """Issue 60: two re-makes of a start (same model, seed, settings; bf16 autocast on a CPU) train bit-identical
    weights, and their fingerprints agree although the Trainer's training_args.bin differs (its output folder, and
    the random serialization id torch.save writes)."""
    from safetensors.torch import load_file

    from agentgym_trl.models import weights_fingerprint

    model = str(save_tiny(tmp_path / "tiny"))
    stage = StageArguments(clone_episodes=4, clone_steps=3, clone_learning_rate=1e-3)
    first, second = (Path(behaviour_clone(model, [TEXTCRAFT], tmp_path / name / "warmup", stage, bf16=True, seed=0))
                     for name in ("a", "b"))
    assert (first / "training_args.bin").read_bytes() != (second / "training_args.bin").read_bytes()
    weights = [load_file(str(folder / "model.safetensors")) for folder in (first, second)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    assert weights_fingerprint(first) == weights_fingerprint(second) != weights_fingerprint(model)  # trained
