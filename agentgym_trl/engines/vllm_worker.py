"""The vLLM engine process: token ids in, sampled ids and their log-probs out, weights reloaded in place.

Run by ``agentgym_trl.engines.vllm_process.VLLMEngine`` with the Python of vLLM's own environment (vLLM pins
its own torch and transformers, which the trainer's cannot share), so this file imports nothing of
``agentgym_trl`` or TRL: only vLLM, safetensors and the standard library. It serves one client over
a ``multiprocessing.connection`` socket (authenticated with a key from the environment)::

    {"op": "generate", "prompts": [[ids]], "max_tokens": [n], "temperature": t, "top_p": p, "top_k": k,
     "stop_token_ids": [ids], "seeds": [s | None]}  ->  {"outputs": [{"ids", "logprobs", "finish", "cached_tokens"}]}
    {"op": "load_weights", "path": "/dev/shm/....safetensors"}  ->  {"seconds": s}   (prefix cache reset)
    {"op": "close"}

``cached_tokens``: the prompt tokens vLLM's prefix cache held (``RequestOutput.num_cached_tokens``, counted per
request whether or not vLLM logs its statistics), so the client sees what the cache saved: a family's shared
instruction is prefilled once, later turns reuse their own conversation.

Log-probs are vLLM's ``processed_logprobs``: after temperature (and top-k/top-p), i.e. the
distribution the token was sampled from, which is the one the trainer scores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

READY_LINE = "agentgym-vllm-worker ready"


def main() -> None:
    """The engine process's entry point: start vLLM on the model, then serve one client on the Unix socket
    until it closes.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder (safetensors and config.json)")
    parser.add_argument("--address", required=True, help="Unix socket path to listen on")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max_model_len", type=int, default=4096)
    parser.add_argument("--max_num_seqs", type=int, default=64)
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.3)
    parser.add_argument("--enforce_eager", action="store_true")
    parser.add_argument("--model_impl", default="vllm", help="vLLM's model code, transformers' or either (auto)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process: its model is reachable
    honour_isa_cap()
    from multiprocessing.connection import Listener

    from vllm import LLM

    llm = LLM(args.model, dtype=args.dtype, max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
              gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=args.enforce_eager,
              model_impl=args.model_impl,
              enable_prefix_caching=True, logprobs_mode="processed_logprobs", skip_tokenizer_init=True,
              seed=args.seed,
              # every prompt prefilled whole: vLLM's CPU runner crashes ("CPU Generator does not use offset") when
              # it rewinds a seeded request's generator after a partial (chunked) prefill, as a big batch causes
              enable_chunked_prefill=False)
    authkey = os.environb[b"AGENTGYM_VLLM_AUTHKEY"]
    with Listener(args.address, family="AF_UNIX", authkey=authkey) as listener:
        print(READY_LINE, flush=True)
        with listener.accept() as connection:
            serve(llm, connection)


def honour_isa_cap() -> None:
    """Make vLLM choose its kernels as on an AVX2-only CPU when ``ATEN_CPU_CAPABILITY`` caps PyTorch at AVX2.

    vLLM's CPU build picks its kernel library (``_C_AVX2`` or the AVX-512 ones) and attention path from the
    hardware's flags (``torch.cpu._is_avx512_supported`` and friends) and has no switch of its own; PyTorch and
    oneDNN honour ``ATEN_CPU_CAPABILITY`` / ``ONEDNN_MAX_CPU_ISA``. With the cap set below AVX-512 (how the AVX2
    path is measured on an AVX-512 machine) those probes answer False, so the whole engine runs the AVX2 path.
    """
    if os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower() not in ("default", "avx2"):
        return
    import torch

    for probe in ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_avx512_vnni_supported",
                  "_is_amx_tile_supported", "_is_amx_fp16_supported"):
        if hasattr(torch.cpu, probe):
            setattr(torch.cpu, probe, lambda: False)


def serve(llm, connection) -> None:
    """Answer the client's requests until it sends ``close`` or goes away; a failed request answers with its
    traceback instead of killing the engine.

    Args:
        llm: the vLLM engine.
        connection: the client's connection.
    """
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return  # the trainer is gone
        if request.get("op") == "close":
            connection.send({"ok": True})
            return
        try:
            handler = HANDLERS[request["op"]]
            connection.send(handler(llm, request))
        except Exception:  # noqa: BLE001 - the client raises it with the engine's traceback
            connection.send({"error": traceback.format_exc()})


def generate(llm, request: dict) -> dict:
    """Sample one continuation per prompt of a ``generate`` request.

    Args:
        llm: the vLLM engine.
        request: prompts, per-prompt ``max_tokens`` and ``seeds``, and the sampling settings.

    Returns:
        ``{"outputs": [...]}``: per prompt the ids, their processed log-probs (NaN where vLLM gave none),
        vLLM's finish reason and how many of its prompt tokens came from the prefix cache.
    """
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    temperature = float(request["temperature"])
    params = [
        SamplingParams(max_tokens=int(limit), temperature=temperature, top_p=float(request.get("top_p", 1.0)),
                       top_k=int(request.get("top_k", 0)), logprobs=0, stop_token_ids=list(request["stop_token_ids"]),
                       seed=seed, detokenize=False, skip_special_tokens=False,
                       ignore_eos=bool(request.get("ignore_eos", False)))
        for limit, seed in zip(request["max_tokens"], request["seeds"], strict=True)
    ]
    prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in request["prompts"]]
    results = llm.generate(prompts, params, use_tqdm=False)
    outputs = []
    for result in results:
        completion = result.outputs[0]
        ids = list(completion.token_ids)
        logprobs = [
            float(step[token].logprob) if step is not None and token in step else float("nan")
            for step, token in zip(completion.logprobs or [None] * len(ids), ids, strict=True)
        ]
        outputs.append({"ids": ids, "logprobs": logprobs, "finish": completion.finish_reason,
                        "cached_tokens": int(result.num_cached_tokens or 0)})
    return {"outputs": outputs}


def load_weights(llm, request: dict) -> dict:
    """Reload the model's weights in place from a safetensors file and reset the prefix cache (its states
    belong to the old weights).

    Args:
        llm: the vLLM engine.
        request: ``{"path": ...}``, the file the trainer wrote.

    Returns:
        The seconds the reload took and the number of tensors.
    """
    from safetensors.torch import load_file

    started = time.perf_counter()
    tensors = load_file(request["path"])
    # deleted as soon as it is read: the file is model-sized and in /dev/shm (memory), and a trainer killed during
    # the reload below could not delete it any more
    try:
        os.unlink(request["path"])
    except FileNotFoundError:
        pass
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    # reload_weights, not model.load_weights: vLLM's CPU layers repack their weights after loading
    runner.reload_weights(weights_iterator=iter(tensors.items()))
    llm.reset_prefix_cache()  # cached states belong to the old weights
    return {"seconds": time.perf_counter() - started, "tensors": len(tensors)}


HANDLERS = {"generate": generate, "load_weights": load_weights, "ping": lambda llm, request: {"ok": True}}


if __name__ == "__main__":
    sys.exit(main())
