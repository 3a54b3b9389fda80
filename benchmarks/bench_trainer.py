"""Trainer benchmarks (tiny random Qwen2 built in-process, CPU, TextCraft depth 1) -> results/trainer.json.

1. Rollout overhead: the share of a batched multi-turn rollout's wall time spent outside the model
   (env steps, chat templates, tokenisation, Python). Target: under 10%.
2. Step time: an AgentGRPOTrainer step versus a stock single-turn TRL GRPOTrainer step that trains
   on the same number of completion tokens (same model, batch, group size, beta; the stock
   completions are forced to the multi-turn batch's median completion length). Target: <= 1.25x.
3. Peak memory of a training step as the turn budget grows (5, 10, 20, 30 turns, fixed-length
   turns so the context grows with the budget); each budget runs in a fresh subprocess.

    python benchmarks/bench_trainer.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from common import write_result  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

import agentgym_envs  # noqa: E402
from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer, ChatEncoder, EnvPool, HFGenerator, run_rollout  # noqa: E402

ENV_ID = "AgentGym/TextCraft-Depth1-v0"
TARGET_OUTSIDE_SHARE = 0.10
TARGET_STEP_RATIO = 1.25


def summary(values: list[float], digits: int = 4) -> dict[str, float]:
    array = np.asarray(values, dtype=float)
    return {
        "median": round(float(np.median(array)), digits),
        "p95": round(float(np.percentile(array, 95)), digits),
        "mean": round(float(array.mean()), digits),
        "n": int(array.size),
    }


def train_items(count: int) -> list[int]:
    return agentgym_envs.get_task(ENV_ID).split("train")[:count]


# ---- 1. rollout overhead ------------------------------------------------------------------------
def bench_rollout(repeats: int) -> dict:
    from transformers import GenerationConfig

    tokenizer = tiny_tokenizer("chatml")
    model = tiny_model(tokenizer)
    model.eval()
    encoder = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
    generator = HFGenerator(
        model,
        GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0),
        tokenizer.pad_token_id,
        encoder.stop_ids,
    )
    pool = EnvPool()
    rows = [{"env_id": ENV_ID, "item_id": item} for item in train_items(4) for _ in range(4)]  # 4 tasks x group of 4
    settings = dict(max_turns=8, max_turn_tokens=32, max_context_tokens=4096, truncated_turn="step")
    run_rollout(rows, generator, encoder, pool, **settings)  # warm-up: env creation, recipe tables
    shares, env_shares, other_shares, totals, turns, tokens = [], [], [], [], [], []
    for _ in tqdm(range(repeats), desc="rollout", file=sys.stderr):
        result = run_rollout(rows, generator, encoder, pool, **settings)
        shares.append(result.outside_model_s / result.total_s)
        env_shares.append(result.env_s / result.total_s)
        other_shares.append((result.outside_model_s - result.env_s) / result.total_s)
        totals.append(result.total_s)
        turns.append(statistics.mean(t.turns for t in result.trajectories))
        tokens.append(sum(len(t.completion_ids) for t in result.trajectories))
    pool.close()
    return {
        "setup": {
            "env_id": ENV_ID,
            "trajectories": len(rows),
            **settings,
            "model": "tiny random Qwen2 (2 layers, hidden 64)",
        },
        "outside_model_share": summary(shares),
        "env_share": summary(env_shares),
        "templates_tokenisation_python_share": summary(other_shares),
        "rollout_s": summary(totals),
        "mean_turns": summary(turns, 2),
        "completion_tokens_per_rollout": summary(tokens, 1),
        "target": f"outside_model_share median < {TARGET_OUTSIDE_SHARE}",
        "meets_target": bool(np.median(shares) < TARGET_OUTSIDE_SHARE),
    }


# ---- 2. step time vs stock single-turn GRPO ------------------------------------------------------
def save_tiny_model(path: str) -> str:
    from tiny_model import save_tiny

    save_tiny(path)
    return path


def quiet(trainer) -> None:
    """No per-step log dicts on stdout (the benchmark prints its own summary)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


class StepTimer:
    """Wall time of each optimizer step (generation + scoring + forward/backward + optimizer)."""

    def __init__(self):
        from transformers import TrainerCallback

        outer = self

        class _Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                outer._start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                outer.times.append(time.perf_counter() - outer._start)

        self.times: list[float] = []
        self._start = 0.0
        self.callback = _Callback()


def bench_step_time(steps: int) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = tiny_tokenizer("chatml")
    model_path = save_tiny_model("/tmp/agentgym-bench/tiny")  # a path, so TRL can load the KL reference (beta > 0)
    items = train_items(16)
    common = dict(
        disable_tqdm=True,
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=steps + 1,
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        seed=0,
        use_cpu=True,
        bf16=False,
        beta=0.001,
        learning_rate=1e-6,
        dataloader_num_workers=0,
    )

    # multi-turn
    args = AgentGRPOConfig(
        output_dir="/tmp/agentgym-bench/agent",
        env_ids=[ENV_ID],
        max_turns=3,
        max_turn_tokens=32,
        max_context_tokens=2048,
        truncated_turn="step",
        activation_checkpointing=False,
        **common,
    )
    agent_rows = Dataset.from_list([{"env_id": ENV_ID, "item_id": i} for i in items])
    agent = AgentGRPOTrainer(model_path, args=args, train_dataset=agent_rows, processing_class=tokenizer)
    quiet(agent)
    agent_timer = StepTimer()
    agent.add_callback(agent_timer.callback)
    completion_lengths: list[int] = []
    model_tokens: list[int] = []
    first_prompts: dict[int, list[dict]] = {}

    class Lengths(agent_timer.callback.__class__.__mro__[1]):  # a TrainerCallback
        def on_step_end(self, args, state, control, **kwargs):
            trajectories = agent.last_rollout.trajectories
            completion_lengths.extend(len(t.completion_ids) for t in trajectories)
            model_tokens.append(sum(sum(t.env_mask) for t in trajectories))
            for t in trajectories:
                first_prompts.setdefault(t.item_id, t.messages[: t.prompt_messages])  # the whole opening

    agent.add_callback(Lengths())
    with tqdm(total=1, desc="agent GRPO steps", file=sys.stderr) as bar:
        agent.train()
        bar.update()
    agent.close_envs()
    length = int(np.median(completion_lengths))

    # stock single-turn GRPO on the same first prompts, completions forced to the same length
    prompts = [first_prompts.get(i) or [{"role": "user", "content": "craft"}] for i in items]
    stock_args = GRPOConfig(
        output_dir="/tmp/agentgym-bench/stock",
        max_completion_length=length,
        generation_kwargs={"min_new_tokens": length},
        activation_checkpointing=False,
        **common,
    )
    stock = GRPOTrainer(
        model_path,
        reward_funcs=lambda completions, **kw: [float(len(c[0]["content"]) % 2) for c in completions],
        args=stock_args,
        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
        processing_class=tokenizer,
    )
    quiet(stock)
    stock_timer = StepTimer()
    stock.add_callback(stock_timer.callback)
    with tqdm(total=1, desc="stock GRPO steps", file=sys.stderr) as bar:
        stock.train()
        bar.update()
    stock_lengths = [h["completions/mean_length"] for h in stock.state.log_history if "completions/mean_length" in h]

    agent_times, stock_times = agent_timer.times[1:], stock_timer.times[1:]  # drop the warm-up step
    ratio = float(np.median(agent_times) / np.median(stock_times))
    return {
        "setup": {
            "env_id": ENV_ID,
            "batch": 8,
            "num_generations": 4,
            "max_turns": 3,
            "max_turn_tokens": 32,
            "beta": 0.001,
            "stock_completion_length": length,
            "model": "tiny random Qwen2 (2 layers, hidden 64)",
        },
        "agent_step_s": summary(agent_times),
        "stock_step_s": summary(stock_times),
        "step_time_ratio": round(ratio, 3),
        "agent_completion_tokens_per_trajectory": summary(completion_lengths, 1),
        "agent_model_tokens_per_step": summary(model_tokens, 1),
        "stock_completion_tokens_per_trajectory": summary(stock_lengths, 1),
        "target": f"step_time_ratio <= {TARGET_STEP_RATIO}",
        "meets_target": bool(ratio <= TARGET_STEP_RATIO),
    }


# ---- 3. peak memory vs turns ---------------------------------------------------------------------
def memory_child(turns: int) -> dict:
    """One training step with a ``turns``-turn budget, fixed-length turns; RSS sampled every 2 ms."""
    from datasets import Dataset

    torch.set_num_threads(1)
    tokenizer = tiny_tokenizer("chatml")
    args = AgentGRPOConfig(
        output_dir=f"/tmp/agentgym-bench/mem{turns}",
        env_ids=[ENV_ID],
        max_turns=turns,
        max_turn_tokens=16,
        max_context_tokens=8192,
        truncated_turn="step",
        generation_kwargs={"min_new_tokens": 16},
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        beta=0.001,
        seed=0,
        dataloader_num_workers=0,
        activation_checkpointing=False,
        disable_tqdm=True,
    )
    rows = Dataset.from_list([{"env_id": ENV_ID, "item_id": i} for i in train_items(4)])
    trainer = AgentGRPOTrainer(tiny_model(tokenizer), args=args, train_dataset=rows, processing_class=tokenizer)
    quiet(trainer)
    process = psutil.Process()
    baseline = process.memory_info().rss
    peak = [baseline]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start
    stop.set()
    sampler.join()
    trajectories = trainer.last_rollout.trajectories
    return {
        "turns_budget": turns,
        "mean_turns_played": statistics.mean(t.turns for t in trajectories),
        "max_sequence_tokens": max(len(t.prompt_ids) + len(t.completion_ids) for t in trajectories),
        "rss_before_step_mb": round(baseline / 2**20, 1),
        "peak_rss_mb": round(peak[0] / 2**20, 1),
        "step_peak_delta_mb": round((peak[0] - baseline) / 2**20, 1),
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "step_s": round(elapsed, 3),
    }


def bench_memory(turn_budgets: list[int]) -> dict:
    rows = []
    for turns in tqdm(turn_budgets, desc="memory vs turns", file=sys.stderr):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(turns)], capture_output=True, text=True, check=True
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]["step_peak_delta_mb"] or 1.0
    for row in rows:
        row["delta_vs_first"] = round(row["step_peak_delta_mb"] / base, 2)
    return {"setup": {"env_id": ENV_ID, "batch": 8, "tokens_per_turn": 16, "beta": 0.001}, "by_turns": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.memory_child is not None:
        print(json.dumps(memory_child(args.memory_child)))
        return 0
    started = time.time()
    results = {
        "rollout": bench_rollout(3 if args.quick else 12),
        "step_time": bench_step_time(3 if args.quick else 10),
        "memory": bench_memory([5, 10] if args.quick else [5, 10, 20, 30]),
        "quick": args.quick,
        "torch_threads": 1,
        "wall_s": 0.0,
    }
    results["wall_s"] = round(time.time() - started, 1)
    write_result("trainer", results)
    print(json.dumps({k: results[k] for k in ("rollout", "step_time")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
