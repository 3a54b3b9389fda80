"""The trainer's command (``agentgym_trl.train``): the library's defaults unless a run asks for the demo preset,
every setting's source printed and written, every documented command complete, and stage evaluations that sample
with an engine that can evaluate."""

from __future__ import annotations

import dataclasses
import json
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from agentgym_trl import train  # noqa: E402
from agentgym_trl.config import AgentGRPOConfig  # noqa: E402
from agentgym_trl.stages import StageArguments  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO = train.PRESETS[train.DEMO_PRESET].values
ISSUE_COMMAND = ("--model_name_or_path Qwen/Qwen2.5-7B-Instruct --clone_episodes 0 --eval_items 0 --env_ids "
                 "AgentGym/SciWorld-v0 --max_context_tokens 8192 --max_turn_tokens 512").split()


def library_default(name: str):
    for dtype in (AgentGRPOConfig, StageArguments):
        for field in dataclasses.fields(dtype):
            if field.name == name:
                return field.default_factory() if field.default is dataclasses.MISSING else field.default
    raise KeyError(name)


def test_a_run_that_names_its_own_settings_gets_nothing_from_the_demo(tmp_path) -> None:
    plan = train.plan_run(ISSUE_COMMAND)
    assert not any(source.startswith("preset") for source in plan.sources.values())
    for name in DEMO:  # every value the demo would set is the library's, or the command's own
        if name in ("activation_checkpointing", "gradient_checkpointing"):
            continue  # resolved per machine from a None default
        expected = plan.values[name] if plan.sources[name] == "flag" else library_default(name)
        assert plan.values[name] == expected, name
    args, _, _ = train.parse_args([*ISSUE_COMMAND, "--output_dir", str(tmp_path)])
    assert (args.max_steps, args.beta, args.item_draws, args.max_turns_schedule) == (-1, 0.001, "uniform", None)
    assert args.learning_rate != DEMO["learning_rate"] and args.save_strategy != "no"


def test_the_demo_is_a_preset_that_examples_grpo_with_no_arguments_asks_for(monkeypatch) -> None:
    called = []
    monkeypatch.setattr(train, "main", lambda argv=None: called.append(argv))
    monkeypatch.setattr(sys, "argv", ["examples/grpo.py"])
    runpy.run_path(str(ROOT / "examples" / "grpo.py"), run_name="__main__")
    monkeypatch.setattr(sys, "argv", ["examples/grpo.py", "--max_steps", "3"])
    runpy.run_path(str(ROOT / "examples" / "grpo.py"), run_name="__main__")
    assert called == [["--preset", "cpu-demo"], ["--max_steps", "3"]]
    args, stages, _ = train.parse_args(["--preset", "cpu-demo"])
    assert (args.max_steps, args.max_turns_schedule, args.item_draws, args.micro_batch_tokens) == (10, "0:3,5:4",
                                                                                                  "learnability", 512)
    assert (stages.clone_episodes, stages.eval_items, args.output_dir) == (64, 31, "runs/grpo-default")


def test_a_runs_own_budget_replaces_the_presets_schedule() -> None:
    plan = train.plan_run(["--preset", "cpu-demo", "--max_turns", "5", "--beta", "0.01"])
    assert plan.values["max_turns_schedule"] is None and plan.sources["max_turns_schedule"] == "default"
    assert plan.values["skip_zero_advantage"] is False  # a KL term: skipping zero-advantage rows is not exact


def test_an_unknown_preset_or_flag_is_one_line(capsys) -> None:
    with pytest.raises(SystemExit, match="error: --preset: unknown preset 'gpu'; the presets are: cpu-demo"):
        train.plan_run(["--preset", "gpu"])
    with pytest.raises(SystemExit):
        train.plan_run(["--no_such_flag", "1"])
    assert "unrecognized arguments: --no_such_flag" in capsys.readouterr().err


def test_settings_are_printed_with_their_sources_and_written_whole(tmp_path, capsys) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("learning_rate: 3.0e-6\nmax_steps: 7\n")
    run = train.parse_run(["--preset", "cpu-demo", "--config", str(recipe), "--max_steps", "5",
                           "--output_dir", str(tmp_path / "run")])
    train.report_settings(run)
    printed = capsys.readouterr().err
    rows = {line.split()[0]: line for line in printed.splitlines() if line.strip()}
    assert re.search(r"max_steps\s+5\s+flag", rows["max_steps"])
    assert re.search(rf"learning_rate\s+3e-06\s+file {re.escape(str(recipe))}", rows["learning_rate"])
    assert re.search(r"item_draws\s+learnability\s+preset cpu-demo", rows["item_draws"])
    assert re.search(r"num_train_epochs", printed) is None  # a library default outside the key settings: file only
    written = json.loads((tmp_path / "run" / train.SETTINGS_FILE).read_text())
    settings = written["settings"]
    assert settings["num_train_epochs"] == {"value": 3.0, "from": "default"}
    assert settings["max_steps"] == {"value": 5, "from": "flag"} and settings["preset"]["value"] == "cpu-demo"
    assert settings["max_completion_length"] == {"value": 1024, "from": "default, resolved here"}
    assert written["argv"][:2] == ["--preset", "cpu-demo"]
    assert len(settings) > 200  # every field of the three configs, not only the printed ones


# ---- every documented command -----------------------------------------------------------------------------------
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]
#: what a command that is not the demo must set itself, by flag or --config file
REQUIRED = ("max_steps", "output_dir", "save_strategy", "learning_rate", "beta")
BUDGETS = ("max_turns_schedule", "turn_rounds", "max_turns")
#: values for the shell variables the pages use
VARIABLES = {"--env_servers": "http://127.0.0.1:8000"}


def documented_commands() -> list[tuple[str, list[str]]]:
    """(page, argv after the script) of every trainer command in a shell block of the docs."""
    commands = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", page.read_text(), flags=re.S):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                if "grpo.py" not in line and "agentgym_trl.train" not in line:
                    continue
                lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
                lexer.whitespace_split, lexer.commenters = True, "#"
                tokens, parts = list(lexer), [[]]
                for token in tokens:  # one command between the shell's operators
                    parts.append([]) if token in ("&&", ";", "|", "&", "||") else parts[-1].append(token)
                for words in parts:
                    if "examples/grpo.py" in words:
                        rest = words[words.index("examples/grpo.py") + 1:]
                    elif "agentgym_trl.train" in words and words[words.index("agentgym_trl.train") - 1] == "-m":
                        rest = words[words.index("agentgym_trl.train") + 1:]
                    else:
                        continue
                    argv = [VARIABLES.get(rest[i - 1], "x") if word.startswith("$") else word
                            for i, word in enumerate(rest) if word not in ("...", "&")]
                    commands.append((page.relative_to(ROOT).as_posix(), argv))
    return commands


COMMANDS = documented_commands()


def test_the_docs_show_trainer_commands() -> None:
    pages = {page for page, _ in COMMANDS}
    assert {"README.md", "docs/gpu.md", "docs/training.md", "docs/server.md"} <= pages
    assert sum(1 for page, _ in COMMANDS if page == "docs/gpu.md") >= 4


@pytest.mark.parametrize("page, argv", COMMANDS, ids=[f"{page}:{' '.join(argv)[:60]}" for page, argv in COMMANDS])
def test_a_documented_command_runs_what_its_page_says(page: str, argv: list[str]) -> None:
    """The demo (no arguments, or --preset cpu-demo on a CPU page) or a complete run: steps, output folder,
    checkpoints, budget, learning rate and beta named by the command or its recipe, and no demo value left in."""
    plan = train.plan_run(argv)  # an unknown flag fails here
    if not argv or "--preset" in argv:
        assert page not in ("docs/gpu.md",), "a GPU command must not run the CPU demo's settings"
        return
    assert not any(source.startswith("preset") for source in plan.sources.values())
    missing = [name for name in REQUIRED if plan.from_default(name)]
    assert not missing, f"{page}: the command leaves {missing} at the library default"
    assert any(not plan.from_default(name) for name in BUDGETS), f"{page}: the command names no turn budget"


# ---- stage evaluations with TRL's vLLM ----------------------------------------------------------------------------
def test_stage_evaluations_sample_with_hf_when_trls_vllm_trains(tmp_path, monkeypatch, capsys) -> None:
    """``--use_vllm true --vllm_engine trl`` with stage evaluations on: TRL builds its (stand-in) vLLM for training,
    and the evaluations before and after it sample with HF generate, never the separate engine process."""
    import importlib

    import trl.trainer.grpo_trainer as grpo_module
    from test_trl_vllm import FakeVLLMGeneration
    from tiny_model import save_tiny

    import agentgym_trl.engines.vllm_process as vllm_engine

    monkeypatch.setattr(importlib.import_module("trl.import_utils"), "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(grpo_module, "VLLMGeneration", FakeVLLMGeneration)
    monkeypatch.setattr(vllm_engine.VLLMEngine, "__init__", lambda *a, **k: pytest.fail("an engine process started"))
    FakeVLLMGeneration.built.clear()
    model = save_tiny(tmp_path / "tiny")
    out = tmp_path / "run"
    trainer = train.main([
        "--model_name_or_path", str(model), "--output_dir", str(out), "--env_ids", "AgentGym/TextCraft-Depth1-v0",
        "--use_vllm", "true", "--vllm_engine", "trl", "--eval_items", "2", "--clone_episodes", "0",
        "--max_steps", "1", "--max_turns", "2", "--max_turn_tokens", "12", "--max_context_tokens", "2048",
        "--per_device_train_batch_size", "4", "--num_generations", "4", "--save_strategy", "no", "--beta", "0",
        "--truncated_turn", "step", "--report_to", "none", "--bf16", "false", "--cpu_threads", "1",
    ])
    assert len(FakeVLLMGeneration.built) == 1 and trainer.state.global_step == 1
    stages = json.loads((out / "stages.json").read_text())
    assert list(stages) == ["base", "grpo"] and all(stage["episodes"] == 2 for stage in stages.values())
    printed = capsys.readouterr().err
    assert printed.count("test items per env (HF generate)") == 2
