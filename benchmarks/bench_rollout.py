"""Rollout speed per generation engine, side by side in one run -> results/rollout.json.

SmolLM2-135M-Instruct (the default model), multi-turn as a rollout plays it: B trajectories, each a
593-token TextCraft opening, 4 turns of exactly 64 sampled tokens (T=1, the full distribution), and
87 observation tokens appended after each turn, so every turn's context grows as an episode's does.
Engines, each over the same contexts:

* ``hf-autocast``: ``HFGenerator`` (prefix cache on) under bf16 autocast over fp32 weights: the
  previous default of the trainer and of ``agentgym eval --bf16``;
* ``hf-bf16-copy``: ``HFGenerator`` sampling from a bf16 copy of the weights (today's CPU default);
* ``vllm``: the vLLM engine process (``use_vllm=True``; bf16, prefix caching, eager mode), started once.

Reports the wall time of each rollout, sampled tokens/s, and the ratio to ``hf-autocast``.

Then ``agentgym eval --model default`` as a user runs it (8 TextCraft depth-1 test items x 2 samples,
4 turns of <= 48 tokens, batch 16): sampled tokens per second of agent time, for the previous default
(``hf`` in fp32), today's (``hf``, bf16 where the CPU has it) and ``--engine vllm``.

    python benchmarks/bench_rollout.py [--batches 8 32] [--engines hf-autocast hf-bf16-copy vllm] [--no-eval]

``--prefill-only``: no timings (they need quiet cores), only the work the HF engine's prefills do: the positions
run through the model before decoding (``HFGenerator.prefilled_tokens``), with and without the sharing of what a
batch's episodes have in common (``share_prompt_prefill``: TextCraft's instruction and opening once per batch, a
group's prompt once per group), in ``agentgym eval``'s path at the shape above (8 items x 2 samples) and at the
main job's evaluation (31 test items, one greedy sample, one batch) -> results/rollout_prefill.json.

    python benchmarks/bench_rollout.py --prefill-only [--prefill-precisions auto fp32]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

PROMPT_TOKENS = 593
TURNS = 4
TURN_TOKENS = 64
OBSERVATION_TOKENS = 87
ENGINES = ("hf-autocast", "hf-bf16-copy", "vllm")


def openings(tokenizer, count: int) -> tuple[list[list[int]], list[int]]:
    """``count`` distinct 593-token chat prompts from TextCraft's test openings, and 87 observation tokens."""
    import gymnasium as gym

    import agentgym_envs  # noqa: F401

    env = gym.make("AgentGym/TextCraft-Depth1-v0")
    prompts, observation = [], []
    for index in range(count):
        _, info = env.reset(options={"split": "test", "index": index % 31})
        text = info["instruction"] + "\n" + env.unwrapped.render_observation() if hasattr(
            env.unwrapped, "render_observation") else info["instruction"]
        messages = [{"role": "user", "content": f"[{index}] " + text * 3}]
        ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=True,
                                                 return_dict=False))[: PROMPT_TOKENS - 3]
        prompts.append(ids + list(tokenizer.encode("<|im_start|>assistant\n"))[:3])
        observation = list(tokenizer.encode(text))[:OBSERVATION_TOKENS]
    env.close()
    return prompts, observation


def play(generator, prompts: list[list[int]], observation: list[int]) -> tuple[float, int]:
    """The multi-turn rollout over the generator; returns (seconds, sampled tokens)."""
    contexts = [list(p) for p in prompts]
    sampled = 0
    started = time.perf_counter()
    with generator.session():
        for _ in range(TURNS):
            outputs = generator.generate(contexts, [TURN_TOKENS] * len(contexts))
            for context, output in zip(contexts, outputs, strict=True):
                context.extend(output.ids)
                context.extend(observation)
                sampled += len(output.ids)
    return time.perf_counter() - started, sampled


def generator_for(name: str, model, engine, pad: int):
    """The generator a run of this benchmark measures (``engines.make_generator``): the engine process, or HF
    generate under autocast or from a bf16 copy of the weights; only the token limit ends a turn."""
    from agentgym_trl.engines import Sampling, make_generator

    sampling = Sampling(temperature=1.0)
    if name == "vllm":
        return make_generator("vllm-process", sampling, [], engine=engine, ignore_eos=True)
    dtype = torch.bfloat16 if name == "hf-bf16-copy" else None
    return make_generator("hf", sampling, [], model=model, generation_config=model.generation_config, pad_id=pad,
                          sampling_dtype=dtype, progress=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-eval", dest="eval", action="store_false", help="skip the agentgym eval part")
    parser.add_argument("--prefill-only", action="store_true",
                        help="count prefilled tokens with and without shared prefills (no timings) and stop")
    parser.add_argument("--prefill-precisions", nargs="+", choices=("auto", "fp32"), default=["auto"],
                        help="--prefill-only's sampling precisions: auto (bf16 where native, as agentgym eval), fp32")
    args = parser.parse_args()
    if args.prefill_only:
        write_result("rollout_prefill", {"command": "python benchmarks/bench_rollout.py " + " ".join(sys.argv[1:]),
                                         "shapes": prefill_counts(args.seed, args.prefill_precisions)})
        return

    from transformers import AutoModelForCausalLM

    from agentgym_trl.models import default_model_path, load_tokenizer
    from agentgym_trl.engines.vllm_process import EngineOptions, VLLMEngine

    path = default_model_path()
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    engine = None
    engine_start = None
    if "vllm" in args.engines:
        started = time.perf_counter()
        engine = VLLMEngine(path, EngineOptions(max_model_len=2048, max_num_seqs=max(args.batches), seed=args.seed))
        engine_start = time.perf_counter() - started
        engine.generate([[1, 2, 3]], [4], temperature=1.0, stop_token_ids=[])  # first-call warm-up
    runs = []
    jobs = [(batch, name) for batch in args.batches for name in args.engines]
    for batch, name in tqdm(jobs, desc="rollouts", unit="rollout"):
        prompts, observation = openings(tokenizer, batch)
        torch.manual_seed(args.seed)
        generator = generator_for(name, model, engine, pad)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=name == "hf-autocast")
        with autocast:
            seconds, sampled = play(generator, prompts, observation)
        runs.append({"engine": name, "batch": batch, "seconds": round(seconds, 2), "sampled_tokens": sampled,
                     "tokens_per_s": round(sampled / seconds, 1)})
        tqdm.write(f"batch {batch:>2}  {name:<13} {seconds:7.1f} s  {sampled / seconds:7.1f} tok/s")
    for run in runs:
        base = next(r for r in runs if r["batch"] == run["batch"] and r["engine"] == args.engines[0])
        run[f"speedup_vs_{args.engines[0]}"] = round(base["seconds"] / run["seconds"], 2)
    if engine is not None:
        engine.close()
    del model
    evaluations = eval_speeds(args.seed) if args.eval else []
    write_result("rollout", {
        "command": "python benchmarks/bench_rollout.py " + " ".join(sys.argv[1:]),
        "setup": {"model": "SmolLM2-135M-Instruct", "prompt_tokens": PROMPT_TOKENS, "turns": TURNS,
                  "tokens_per_turn": TURN_TOKENS, "observation_tokens": OBSERVATION_TOKENS, "temperature": 1.0,
                  "seed": args.seed, "torch_threads": torch.get_num_threads(),
                  "vllm": {"dtype": "bfloat16", "enforce_eager": True, "prefix_caching": True,
                           "start_s": round(engine_start, 1) if engine_start else None}},
        "runs": runs,
        "eval": evaluations,
    })


def eval_speeds(seed: int) -> list[dict]:
    """``agentgym eval --model default`` sampled tokens per second of agent time, per engine and precision."""
    import tempfile

    from agentgym_envs.evaluation.records import load_run
    from agentgym_trl.eval import evaluate_model
    from agentgym_trl.engines.vllm_process import EngineOptions

    rows = []
    for name, options in (("hf-fp32 (previous default)", dict(bf16=False)), ("hf (default)", {}),
                          ("vllm", dict(engine="vllm", engine_options=EngineOptions(max_model_len=4096,
                                                                                    max_num_seqs=16)))):
        with tempfile.TemporaryDirectory() as out:
            started = time.perf_counter()
            evaluate_model("default", ["AgentGym/TextCraft-Depth1-v0"], out, n_samples=2, max_turns=[4], limit=8,
                           temperature=1.0, batch_size=16, max_turn_tokens=48, seed=seed, progress=False, **options)
            wall = time.perf_counter() - started
            records = load_run(out)
        tokens = sum(int(r.get("tokens") or 0) for r in records)
        batches = {r["timing"]["batch_agent_s"]: r["timing"] for r in records if r.get("timing")}
        agent_s = sum(timing["batch_agent_s"] for timing in batches.values())
        rows.append({"engine": name, "episodes": len(records), "sampled_tokens": tokens,
                     "agent_s": round(agent_s, 1), "wall_s_with_load": round(wall, 1),
                     "tokens_per_s": round(tokens / agent_s, 1) if agent_s else None,
                     "success": round(sum(bool(r.get("info", {}).get("success")) for r in records) / len(records), 3)})
        tqdm.write(f"eval {name:<28} {rows[-1]['tokens_per_s']} tok/s ({tokens} tokens, {agent_s:.1f} s of agent)")
    return rows


#: (name, items, samples per item, temperature, batch): agentgym eval's shape above, the main job's evaluation
PREFILL_SHAPES = (("eval 8 items x 2 samples, batch 16", 8, 2, 1.0, 16),
                  ("main job evaluation: 31 items x 1 greedy sample, batch 31", None, 1, 0.0, 31))


def prefill_counts(seed: int, precisions: list[str]) -> list[dict]:
    """Per shape and precision, the positions prefilled over a whole evaluation (TextCraft depth 1, 4 turns of <= 48
    tokens) and on its first turn, by ``agentgym eval``'s HF agent without and with shared prefills, and whether
    both played the same actions. In fp32 they do (``tests/test_shared_prefix.py``); in bf16 the same states
    computed in another shape (one row, or the padded batch) round apart, and a sampled episode may part."""
    rows = []
    for precision in precisions:
        for name, limit, samples, temperature, batch in PREFILL_SHAPES:
            counts, first_turns, actions = prefill_arms(seed, limit, samples, temperature, batch,
                                                        bf16=None if precision == "auto" else False)
            rows.append({"shape": name, "precision": precision, "episodes": len(actions[True]),
                         "prefilled_tokens_without": counts[False], "prefilled_tokens_with": counts[True],
                         "saved": counts[False] - counts[True], "ratio": round(counts[True] / counts[False], 3),
                         "first_turn_without": first_turns[False], "first_turn_with": first_turns[True],
                         "same_actions": actions[False] == actions[True]})
            tqdm.write(f"{name}, {precision}: {counts[False]} -> {counts[True]} prefilled tokens, first turn "
                       f"{first_turns[False]} -> {first_turns[True]} (same actions: {rows[-1]['same_actions']})")
    return rows


def prefill_arms(seed: int, limit: int | None, samples: int, temperature: float, batch: int, bf16: bool | None
                 ) -> tuple[dict[bool, int], dict[bool, int], dict[bool, list]]:
    """One evaluation per arm (without, with shared prefills) by one agent: per arm the positions prefilled in
    all, on the first turn, and the sorted (item, sample, actions) played."""
    import tempfile

    from agentgym_envs.evaluation.records import load_run
    from agentgym_envs.evaluation.runner import evaluate
    from agentgym_trl.agent import ModelAgent

    agent = ModelAgent.from_name("default", temperature=temperature, batch_size=batch, max_turn_tokens=48,
                                 seed=seed, progress=False, bf16=bf16)
    generator = agent.generator
    turns: list[int] = []
    generate = generator.generate

    def counted(contexts, limits):  # records each turn's prefilled positions
        before = generator.prefilled_tokens
        outputs = generate(contexts, limits)
        turns.append(generator.prefilled_tokens - before)
        return outputs

    generator.generate = counted
    counts, first_turns, actions = {}, {}, {}
    for shared in (False, True):
        generator.share_prompt_prefill = shared
        turns.clear()
        with tempfile.TemporaryDirectory() as out:
            evaluate(agent, ["AgentGym/TextCraft-Depth1-v0"], out, n_samples=samples, max_turns=[4], limit=limit,
                     progress=False)
            actions[shared] = sorted((r["item_id"], r["sample"], tuple(r["actions"])) for r in load_run(out))
        counts[shared], first_turns[shared] = sum(turns), turns[0]
    agent.close()
    return counts, first_turns, actions


if __name__ == "__main__":
    main()
