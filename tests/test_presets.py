"""The paper-recipe presets ``examples/configs/<scenario>.yaml``: they parse through examples/grpo.py
with the paper's hyperparameters, and one of them runs a training step with a tiny model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from offline_run import run_offline  # noqa: E402
from tiny_model import save_tiny  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "grpo.py"
CONFIGS = ROOT / "examples" / "configs"

#: scenario -> (env id, ScalingInter schedule as (step, turns), group size), from PAPER_FACTS / the paper's scripts
RECIPES = {
    "webarena": ("AgentGym/WebArena-v0", [(0, 8), (80, 12), (160, 15)], 4),
    "searchqa": ("AgentGym/Search-v0", [(0, 5), (100, 8), (200, 10)], 4),
    "textcraft": ("AgentGym/TextCraft-v0", [(0, 10), (100, 20), (200, 30)], 8),
    "babyai": ("AgentGym/BabyAI-v0", [(0, 6), (100, 13), (200, 20)], 4),
    "sciworld": ("AgentGym/SciWorld-v0", [(0, 10), (100, 20), (200, 30)], 8),
}
#: the released per-scenario scripts (paper section 3b): rollouts per task, tasks per rollout batch, tasks per PPO
#: mini-batch, PPO epochs, tokens per turn (BabyAI: its ScalingInter script's)
PAPER_SCRIPTS = {
    "webarena": (4, 32, 4, 2, 512), "searchqa": (4, 32, 8, 2, 512), "textcraft": (8, 32, 8, 2, 512),
    "babyai": (4, 32, 8, 2, 512), "sciworld": (8, 16, 8, 1, 200),
}
#: what the paper states for every scenario: GRPO, KL 0.001 as a loss (k3), clip 0.2, entropy 0.001, lr 1e-6
#: constant without warm-up, grad clip 1, temperature 1, top-p 1, token-level mean, outcome reward only, no SFT
#: start, every train item drawn alike
PAPER_COMMON = {
    "advantage_estimator": "grpo", "turn_credit": "none", "turn_reward": "outcome", "scale_rewards": "group",
    "loss_type": "dapo", "beta": 0.001, "use_bias_correction_kl": False, "epsilon": 0.2, "entropy_coef": 0.001,
    "learning_rate": 1e-6, "lr_scheduler_type": "constant", "warmup_steps": 0, "max_grad_norm": 1.0,
    "temperature": 1.0, "top_p": 1.0, "top_k": 0, "invalid_action_penalty": 0.0, "item_draws": "uniform",
    "dynamic_sampling": False, "oracle_prefix_schedule": None, "clone_episodes": 0,
}


def papers_settings(scenario: str) -> dict:
    """Every setting the paper states for ``scenario``, as this trainer's fields."""
    env_id, schedule, _ = RECIPES[scenario]
    group, tasks_per_batch, tasks_per_minibatch, epochs, turn_tokens = PAPER_SCRIPTS[scenario]
    return {**PAPER_COMMON, "env_ids": [env_id], "num_generations": group, "num_iterations": epochs,
            "max_turn_tokens": turn_tokens, "per_device_train_batch_size": tasks_per_minibatch * group,
            "steps_per_generation": tasks_per_batch // tasks_per_minibatch,
            "max_turns_schedule": ",".join(f"{step}:{turns}" for step, turns in schedule)}


def declared_differences(path: Path) -> set[str]:
    """The settings a recipe's header says differ from the paper ('Differences from the paper's settings: a, b')."""
    (line,) = [line for line in path.read_text().splitlines() if "Differences from the paper's settings:" in line]
    listed = line.split(":", 1)[1].split("(")[0].strip().rstrip(".")
    return set() if listed == "none" else {name.strip() for name in listed.split(",")}


def test_every_scenario_has_a_preset() -> None:
    assert sorted(path.stem for path in CONFIGS.glob("*.yaml")) == sorted(RECIPES)


@pytest.mark.parametrize("scenario", sorted(RECIPES))
def test_a_recipe_differs_from_the_paper_only_where_its_file_says_so(scenario: str) -> None:
    """The recipe as the trainer's command reads it (library defaults, then the file) against the paper's table."""
    from agentgym_trl.train import plan_run

    path = CONFIGS / f"{scenario}.yaml"
    plan = plan_run(["--config", str(path)])
    differ = {name for name, value in papers_settings(scenario).items() if plan.values[name] != value}
    assert differ == declared_differences(path), {name: plan.values[name] for name in differ}
    assert not any(source.startswith("preset") for source in plan.sources.values())  # no demo value inherited


@pytest.mark.parametrize("scenario", sorted(RECIPES))
def test_preset_parses_with_the_papers_hyperparameters(scenario: str) -> None:
    from agentgym_trl.train import parse_args

    env_id, schedule, group = RECIPES[scenario]
    args, stages, model_args = parse_args(["--config", str(CONFIGS / f"{scenario}.yaml")])
    assert stages.clone_episodes == 0 and stages.eval_items == 0  # the paper's RL alone, no stages around it
    assert args.env_ids == [env_id] and args.num_generations == group and args.item_draws == "uniform"
    parsed = [tuple(int(x) for x in stage.split(":")) for stage in args.max_turns_schedule.split(",")]
    assert parsed == schedule and args.max_steps == schedule[-1][0] + schedule[1][0]
    assert (args.beta, args.epsilon, args.entropy_coef, args.learning_rate) == (0.001, 0.2, 0.001, 1e-6)
    assert args.lr_scheduler_type == "constant" and args.warmup_steps == 0 and not args.use_bias_correction_kl
    assert (args.temperature, args.top_p, args.top_k, args.max_grad_norm) == (1.0, 1.0, 0, 1.0)
    assert args.scale_rewards == "group" and args.loss_type == "dapo"
    assert args.per_device_train_batch_size % group == 0  # whole groups per mini-batch
    assert model_args.model_name_or_path == "Qwen/Qwen2.5-7B-Instruct"


def test_a_preset_runs_a_training_step_with_a_tiny_model(tmp_path: Path) -> None:
    """The TextCraft preset as is, except what a CPU test cannot afford (model, sizes, one step)."""
    model_dir = save_tiny(tmp_path / "tiny")
    output_dir = tmp_path / "run"
    overrides = {
        "--model_name_or_path": str(model_dir), "--dtype": "float32", "--bf16": "false",
        "--env_ids": "AgentGym/TextCraft-Depth1-v0", "--max_steps": "1", "--per_device_train_batch_size": "4",
        "--num_generations": "4", "--steps_per_generation": "1", "--max_turn_tokens": "12",
        "--max_context_tokens": "2048", "--output_dir": str(output_dir), "--save_strategy": "no",
        "--truncated_turn": "step",
    }
    command = [sys.executable, str(EXAMPLE), "--config", str(CONFIGS / "textcraft.yaml")]
    command += [part for pair in overrides.items() for part in pair]
    result = run_offline(command, tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [json.loads(line) for line in (output_dir / "agent_metrics.jsonl").read_text().splitlines()]
    steps = [line for line in lines if "agent/max_turns" in line]
    assert [line["agent/max_turns"] for line in steps] == [10]  # the preset's first ScalingInter stage


def paper_eval_commands() -> dict[str, list[str]]:
    """docs/evaluation.md's "Reproduce the paper's evaluation" commands, by the recipe whose output_dir they load."""
    import re
    import shlex

    text = (ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8")
    section = text.split("## Reproduce the paper's evaluation", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    return {argv[argv.index("--model") + 1]: argv for argv in commands}


@pytest.mark.parametrize("scenario", sorted(RECIPES))
def test_the_papers_evaluation_command_matches_its_recipe(scenario: str) -> None:
    """Issue 62: eval's defaults (greedy at K=1, 256 tokens a turn, 4096 a context) are not the recipes'; the docs
    give one command per recipe, with its env, final turn budget, tokens per turn, context, T = 1 and K = 1."""
    import yaml

    from agentgym_envs.cli import build_parser

    recipe = yaml.safe_load((CONFIGS / f"{scenario}.yaml").read_text())
    commands = paper_eval_commands()
    assert recipe["output_dir"] in commands, f"docs/evaluation.md has no command for {scenario}'s model"
    argv = commands[recipe["output_dir"]]
    assert argv[:2] == ["agentgym", "eval"]
    args = build_parser().parse_args(argv[1:])
    final_budget = int(recipe["max_turns_schedule"].split(",")[-1].split(":")[1])
    assert args.env == recipe["env_ids"] and args.max_turns == [final_budget]
    assert args.max_turn_tokens == recipe["max_turn_tokens"]
    assert args.max_context_tokens == recipe["max_context_tokens"]
    assert args.temperature == recipe["temperature"] == 1.0 and args.n_samples == 1 and args.split == "test"
    assert len(commands) == len(RECIPES)


def test_no_doc_calls_a_mixtures_turn_rounds_the_papers_schedule() -> None:
    """Issue 62: README's Train block called turn_rounds=[10, 20, 30] "the paper's schedule" for TextCraft + BabyAI;
    BabyAI's recipe grows 6, 13, 20. A block that says so must give every env id its recipe's schedule."""
    import re

    schedules = {env_id: [turns for _, turns in schedule] for env_id, schedule, _ in RECIPES.values()}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL):
            if "the paper's schedule" not in block or "turn_rounds=" not in block:
                continue
            rounds = [int(n) for n in re.search(r"turn_rounds=\[([\d, ]+)\]", block).group(1).split(",")]
            env_ids = re.findall(r'"(AgentGym/[\w-]+)"', re.search(r"env_ids=\[(.*?)\]", block).group(1))
            wrong = [env_id for env_id in env_ids if schedules.get(env_id) != rounds]
            assert not wrong, f"{page.name}: turn_rounds={rounds} is not the paper's schedule of {wrong}"
