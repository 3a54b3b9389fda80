"""A run stopped while saving a checkpoint still resumes: from the newest complete one (issue 47, item 2)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from transformers import TrainerCallback

from agentgym_trl.checkpoints import incomplete_reason, last_complete_checkpoint


def _safetensors(path: Path, cut: int = 0) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    data = struct.pack("<Q", len(header)) + header + b"\0" * 16
    path.write_bytes(data[: len(data) - cut])


def _checkpoint(run: Path, step: int, state: bool = True, weights: str = "ok") -> Path:
    folder = run / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if state:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if weights == "ok":
        _safetensors(folder / "model.safetensors")
    elif weights == "empty":
        (folder / "model.safetensors").write_bytes(b"")
    elif weights == "cut":
        _safetensors(folder / "model.safetensors", cut=5)
    elif weights == "adapter":
        _safetensors(folder / "adapter_model.safetensors")
    return folder


@pytest.mark.parametrize("broken", [dict(state=False), dict(weights="empty"), dict(weights="cut"), dict(weights="")])
def test_resume_skips_an_incomplete_newest_checkpoint_and_says_so(tmp_path, capsys, caplog, broken) -> None:
    run = tmp_path / "run"
    good = _checkpoint(run, 2)
    _checkpoint(run, 4, **broken)
    _checkpoint(run, 10, state=False)  # numeric order, not string order: 10 is the newest
    with caplog.at_level("WARNING"):
        assert last_complete_checkpoint(str(run)) == str(good)
    out = capsys.readouterr().out
    assert "checkpoint-4" in out and "checkpoint-10" in out and "skipping incomplete checkpoint" in out
    assert any("checkpoint-4" in r.getMessage() for r in caplog.records)


def test_complete_checkpoints_and_no_checkpoint(tmp_path) -> None:
    run = tmp_path / "run"
    assert last_complete_checkpoint(str(run)) is None
    _checkpoint(run, 1, weights="adapter")
    assert incomplete_reason(str(run / "checkpoint-1")) is None
    newest = _checkpoint(run, 3)
    assert last_complete_checkpoint(str(run)) == str(newest)
    shards = _checkpoint(run, 5, weights="")
    (shards / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a.safetensors",
                                                                                    "v": "b.safetensors"}}))
    _safetensors(shards / "a.safetensors")
    assert "b.safetensors" in incomplete_reason(str(shards))
    _safetensors(shards / "b.safetensors")
    assert last_complete_checkpoint(str(run)) == str(shards)


def test_examples_resume_last_uses_the_complete_rule(tmp_path) -> None:
    from agentgym_trl import train as module
    run = tmp_path / "run"
    good = _checkpoint(run, 2)
    _checkpoint(run, 4, state=False)

    class Args:
        resume_from_checkpoint = "last"
        output_dir = str(run)

    assert module.resume_point(Args) == str(good)
    assert os.path.isdir(module.resume_point(Args))


def test_a_tiny_run_cut_while_saving_resumes_from_the_complete_checkpoint(tmp_path, capsys) -> None:
    """End to end: checkpoint-2 is cut (no trainer state, empty weights); ``train(resume_from_checkpoint=True)``
    resumes from checkpoint-1 and trains step 2 again, where HF's own pick would fail on every rerun."""
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from test_trainer import make_trainer

    settings = dict(max_steps=2, save_strategy="steps", save_steps=1, save_only_model=False)
    make_trainer(tmp_path, **settings).train()
    cut = tmp_path / "run" / "checkpoint-2"
    (cut / "trainer_state.json").unlink()
    (cut / "model.safetensors").write_bytes(b"")
    capsys.readouterr()

    steps = []

    class Steps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            steps.append(state.global_step)

    resumed = make_trainer(tmp_path, **settings)
    resumed.add_callback(Steps())
    resumed.train(resume_from_checkpoint=True)
    assert steps == [2], "the run resumes after step 1 and trains step 2 again"
    assert "skipping incomplete checkpoint" in capsys.readouterr().out
    assert incomplete_reason(str(cut)) is None, "step 2 was saved again, complete this time"


def test_a_finished_run_resumed_is_a_no_op_that_says_so(tmp_path, capsys) -> None:
    """#61 item 4: a finished run resumed with ``last`` (``examples/learning.py`` always passes it) trains no step
    past max_steps, writes no ``checkpoint-N+1`` and keeps its weights; a larger max_steps trains on."""
    import sys

    import torch

    from agentgym_trl.checkpoints import finished_run

    sys.path.insert(0, os.path.dirname(__file__))
    from test_trainer import make_trainer

    settings = dict(max_steps=2, save_strategy="steps", save_steps=1, save_only_model=False)
    make_trainer(tmp_path, **settings).train()
    run = tmp_path / "run"

    class Args:
        resume_from_checkpoint = "last"
        output_dir = str(run)
        max_steps = 2

    capsys.readouterr()
    assert finished_run(Args) and "has finished" in capsys.readouterr().out
    Args.max_steps = 3
    assert not finished_run(Args)
    Args.resume_from_checkpoint = None
    assert not finished_run(Args)

    steps = []

    class Steps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            steps.append(state.global_step)

    resumed = make_trainer(tmp_path, **settings)
    resumed.add_callback(Steps())
    output = resumed.train(resume_from_checkpoint="last")
    assert steps == [] and output.global_step == 2 and resumed.state.global_step == 2
    assert sorted(name for name in os.listdir(run) if name.startswith("checkpoint-")) == ["checkpoint-1",
                                                                                          "checkpoint-2"]
    from safetensors.torch import load_file

    saved = load_file(str(run / "checkpoint-2" / "model.safetensors"))
    weights = dict(resumed.model.named_parameters())
    assert all(torch.equal(weights[name].detach().cpu(), tensor) for name, tensor in saved.items() if name in weights)
