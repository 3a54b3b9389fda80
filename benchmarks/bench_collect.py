"""Expert-trajectory collection and behaviour cloning -> results/collect.json.

1. Collection throughput: oracle episodes/s and turns/s per env (``agentgym_envs.collect.collect``,
   train items, successful episodes kept), for a few installed envs.
2. Tokenisation for SFT: conversations/s and tokens/s of ``agentgym_trl.sft.conversation_ids`` with the
   default model's tokenizer (SmolLM2 ChatML), and the share of tokens that carry loss.
3. (``--sft-checkpoint DIR``) the cloned model's success on a small slice of the *test* split next to the
   base model's: ``run_rollout`` with ``HFGenerator``, greedy, a few items per env.

    python benchmarks/bench_collect.py [--quick] [--sft-checkpoint runs/sft-oracle]
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import agentgym_envs  # noqa: E402
from agentgym_envs.collect import collect  # noqa: E402
from common import write_result  # noqa: E402

THROUGHPUT_ENVS = {  # env id -> episodes (full run); --quick plays a quarter
    "AgentGym/TextCraft-Depth1-v0": 93,
    "AgentGym/TextCraft-Depth2-v0": 200,
    "AgentGym/BabyAI-GoTo-v0": 200,
    "AgentGym/Maze-v0": 100,
    "AgentGym/Wordle-v0": 100,
    "AgentGym/Weather-v0": 100,
    "AgentGym/SciWorld-Find-v0": 12,
}
EVAL_ENVS = ["AgentGym/TextCraft-Depth1-v0", "AgentGym/BabyAI-GoTo-v0"]


def installed(env_id: str) -> bool:
    try:
        return agentgym_envs.get_task(env_id).extra_installed()
    except KeyError:
        return False


def bench_throughput(quick: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    results: dict[str, Any] = {}
    all_rows: list[dict[str, Any]] = []
    for env_id, episodes in THROUGHPUT_ENVS.items():
        if not installed(env_id):
            results[env_id] = {"skipped": "extra not installed"}
            continue
        episodes = max(4, episodes // 4) if quick else episodes
        rows, counts = collect(env_id, episodes, progress=False)
        count = counts[env_id]
        turns = sum(row["turns"] for row in rows)
        results[env_id] = {
            "episodes": count["played"],
            "kept": count["kept"],
            "seconds": count["seconds"],
            "episodes_per_s": round(count["played"] / count["seconds"], 2),
            "turns_per_s_kept": round(turns / count["seconds"], 1),
            "mean_turns_kept": round(turns / max(1, len(rows)), 2),
        }
        print(env_id, results[env_id], flush=True)
        all_rows.extend(rows)
    return results, all_rows


def bench_tokenisation(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from agentgym_trl.chat import ChatEncoder
    from agentgym_trl.models import default_model_path, load_tokenizer
    from agentgym_trl.sft import conversation_ids

    encoder = ChatEncoder(load_tokenizer(default_model_path()))
    started = time.perf_counter()
    tokens = trained = 0
    for row in rows:
        ids, mask = conversation_ids(encoder, row["messages"])
        tokens += len(ids)
        trained += sum(mask)
    seconds = time.perf_counter() - started
    return {
        "tokenizer": "SmolLM2-135M-Instruct (ChatML)",
        "conversations": len(rows),
        "conversations_per_s": round(len(rows) / seconds, 1),
        "tokens_per_s": round(tokens / seconds),
        "mean_tokens": round(tokens / max(1, len(rows)), 1),
        "assistant_token_share": round(trained / max(1, tokens), 4),
    }


def success_on_test_slice(model_path: str, items_per_env: int, max_turns: int, max_turn_tokens: int) -> dict[str, Any]:
    """Greedy episodes on the first test items of each env (the held-out split, never collected from)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from agentgym_trl import ChatEncoder, EnvPool, HFGenerator, run_rollout
    from agentgym_trl.models import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    encoder = ChatEncoder(tokenizer, eos if isinstance(eos, list) else [eos])
    generator = HFGenerator(model, GenerationConfig(do_sample=False), tokenizer.pad_token_id or encoder.closer_id,
                            encoder.stop_ids)
    pool = EnvPool()
    out: dict[str, Any] = {}
    try:
        for env_id in EVAL_ENVS:
            items = agentgym_envs.get_task(env_id).split("test")[:items_per_env]
            started = time.perf_counter()
            result = run_rollout([{"env_id": env_id, "item_id": int(i)} for i in items], generator, encoder, pool,
                                 max_turns=max_turns, max_turn_tokens=max_turn_tokens, max_context_tokens=2048,
                                 truncated_turn="step")
            ts = result.trajectories
            out[env_id] = {
                "items": len(ts),
                "success": round(sum(t.success for t in ts) / len(ts), 3),
                "reward": round(sum(t.reward for t in ts) / len(ts), 3),
                "valid_action_rate": round(sum(t.valid_action_rate for t in ts) / len(ts), 3),
                "turns_mean": round(sum(t.turns for t in ts) / len(ts), 2),
                "cut_turns": sum(t.cut_turns for t in ts),
                "stop_reasons": dict(Counter(str(t.stop_reason) for t in ts)),
                "seconds": round(time.perf_counter() - started, 1),
            }
            print(model_path, env_id, out[env_id], flush=True)
    finally:
        pool.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer episodes")
    parser.add_argument("--sft-checkpoint", default=None, help="also compare this SFT checkpoint with the base model")
    parser.add_argument("--eval-items", type=int, default=8, help="test items per env for the comparison")
    parser.add_argument("--eval-max-turns", type=int, default=6)
    parser.add_argument("--eval-max-turn-tokens", type=int, default=64, help="the experts need up to ~40")
    args = parser.parse_args()

    throughput, rows = bench_throughput(args.quick)
    payload: dict[str, Any] = {"quick": args.quick, "collection": throughput}
    payload["tokenisation"] = bench_tokenisation(rows)
    print(payload["tokenisation"], flush=True)
    if args.sft_checkpoint:
        import torch

        from agentgym_trl.models import default_model_path

        torch.manual_seed(0)
        payload["test_slice"] = {
            "items_per_env": args.eval_items,
            "max_turns": args.eval_max_turns,
            "decoding": f"greedy, at most {args.eval_max_turn_tokens} tokens per turn (a cut turn is still sent)",
            "base": success_on_test_slice(default_model_path(), args.eval_items, args.eval_max_turns,
                                          args.eval_max_turn_tokens),
            "sft": success_on_test_slice(args.sft_checkpoint, args.eval_items, args.eval_max_turns,
                                         args.eval_max_turn_tokens),
            "sft_checkpoint": args.sft_checkpoint,
        }
    write_result("collect", payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
