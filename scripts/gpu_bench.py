"""What a GPU machine gives the trainer: shared memory, weight-sync throughput, HF generation throughput.

    bash scripts/gpu_check.sh --bench              # these parts first, then the trainer parts of gpu_check.py
    python scripts/gpu_bench.py                    # on CUDA, real shapes (Qwen2 0.5B / 1.5B / 7B), ~2-4 min on an H100
    python scripts/gpu_bench.py --device cpu --quick   # the same code on tiny shapes, in seconds (the test suite)

Parts (each in a process of its own, stopped after ``--part-timeout`` seconds; one part's failure is reported and
the others still run):

- ``system``: /dev/shm's size and free space, the host's free memory, the GPU's name and memory, the versions;
- ``weight-sync``: a Qwen2 model of each ``--sync-shapes`` shape, random-initialised in bf16 on the device, then
  its weights device -> CPU, written as safetensors to /dev/shm (to ``--spill-dir`` on disk when /dev/shm is too
  small: ``where`` says which), read back, and CPU -> device: the path of a weight reload into a vLLM engine
  process. Seconds and GB/s per stage (safetensors may map the file and read pages when they are first used, so
  ``read_and_to_device``, the reload's whole cost, is the figure to compare; on disk the page cache is warm);
- ``generation``: a Qwen2 model of each ``--gen-shapes`` shape generating for 64 contexts over 3 turns (512-token
  prompts, 64 new tokens per turn, a 32-token fake observation appended between turns) through the project's
  ``HFGenerator`` (``agentgym_trl/engines/hf.py``; loaded from its file where ``agentgym_trl`` cannot be imported
  because TRL is absent; plain ``model.generate`` of the same shape if even that fails: ``engine`` says which).

Models are built from configs (random weights: nothing is downloaded); only the shapes are Qwen2's. Results go to
``--out``/gpu_bench.json. Exit code: 0 every part ok, 1 a part failed or timed out, 2 no CUDA device.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project from this checkout, whatever is installed
PARTS = ("system", "weight-sync", "generation")
GB = 1e9

#: Qwen2 shapes (hidden size, MLP size, layers, attention heads, key/value heads, vocabulary, tied embeddings)
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                       num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                       num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                     num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    # --quick: the same code on a model of a few hundred thousand parameters
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, tie_word_embeddings=True),
}
#: the generation workload: (contexts, turns, prompt tokens, new tokens per turn, observation tokens)
WORKLOAD = {"full": (64, 3, 512, 64, 32), "quick": (4, 3, 16, 4, 2)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--help``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: the same code, no GPU")
    parser.add_argument("--quick", action="store_true",
                        help="tiny shapes and workload (seconds): a check of the code, not a measurement")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to run")
    parser.add_argument("--sync-shapes", nargs="+", choices=sorted(SHAPES), default=["qwen2-1.5b", "qwen2-7b"],
                        help="model shapes of weight-sync (--quick: tiny)")
    parser.add_argument("--gen-shapes", nargs="+", choices=sorted(SHAPES), default=["qwen2-0.5b", "qwen2-1.5b"],
                        help="model shapes of generation (--quick: tiny)")
    parser.add_argument("--part-timeout", type=float, default=150,
                        help="seconds one part may run (the whole run stays under ~6 min on a GPU)")
    parser.add_argument("--spill-dir", default=tempfile.gettempdir(),
                        help="where weight-sync writes when /dev/shm has too little room")
    parser.add_argument("--out", default=str(ROOT / "runs" / "gpu_check"), help="folder of gpu_bench.json")
    parser.add_argument("--one-part", choices=PARTS, help=argparse.SUPPRESS)  # the child process of one part
    parser.add_argument("--record", help=argparse.SUPPRESS)  # where that child writes its record
    args = parser.parse_args(argv)
    if args.quick:
        args.sync_shapes, args.gen_shapes = ["tiny"], ["tiny"]
    if args.part_timeout <= 0:
        parser.error(f"--part-timeout must be positive, got {args.part_timeout}")
    return args


def synchronize(device: str) -> None:
    """Wait for the device's queued work, so a timer measures it."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def stage(seconds: float, size: int) -> dict[str, float]:
    """One stage's record: seconds and GB/s for ``size`` bytes."""
    return {"s": round(seconds, 4), "gb_per_s": round(size / GB / seconds, 3) if seconds > 0 else None}


def meminfo() -> dict[str, float]:
    """The host's total and available memory in GB (Linux's /proc/meminfo; empty elsewhere)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    values = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines if line.split()[1:2]}
    return {"host_total_gb": round(values.get("MemTotal", 0) / GB, 2),
            "host_available_gb": round(values.get("MemAvailable", 0) / GB, 2)}


def shm() -> dict[str, Any]:
    """/dev/shm's size and free space in GB (``None`` where there is none)."""
    if not Path("/dev/shm").is_dir():
        return {"shm_total_gb": None, "shm_free_gb": None}
    usage = shutil.disk_usage("/dev/shm")
    return {"shm_total_gb": round(usage.total / GB, 3), "shm_free_gb": round(usage.free / GB, 3)}


def part_system(args: argparse.Namespace) -> dict[str, Any]:
    """Shared memory, host memory, the GPU and the versions of what the trainer runs on."""
    import torch
    import transformers

    record: dict[str, Any] = {**shm(), **meminfo(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
                              "torch": torch.__version__, "cuda": torch.version.cuda,
                              "transformers": transformers.__version__}
    for name in ("trl", "vllm", "safetensors", "accelerate", "peft"):  # version, False if absent, or why not
        try:
            found = importlib.util.find_spec(name) is not None
            record[name] = importlib.import_module(name).__version__ if found and name != "vllm" else found
        except Exception as error:  # noqa: BLE001 - a package that is there but broken is reported, not fatal
            record[name] = f"{type(error).__name__}: {error}"
    if args.device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        record.update(gpu=properties.name, gpu_count=torch.cuda.device_count(),
                      gpu_total_gb=round(total / GB, 2), gpu_free_gb=round(free / GB, 2),
                      bf16_supported=torch.cuda.is_bf16_supported())
    else:
        record.update(gpu=None)
    return record


def build_model(shape: str, device: str, dtype: Any) -> Any:
    """A Qwen2 causal LM of ``shape``, random weights in ``dtype``, built directly on ``device``."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=4096, use_cache=True)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def unique_tensors(model: Any) -> dict[str, Any]:
    """The model's state, each storage once (tied embeddings are one tensor, as a weight reload sends them)."""
    seen, state = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            state[name] = tensor.detach()
    return state


def sync_one(shape: str, args: argparse.Namespace) -> dict[str, Any]:
    """One shape's weight sync: device -> CPU, safetensors write, read back, CPU -> device."""
    import torch
    from safetensors.torch import load_file, save_file

    device = args.device
    started = time.perf_counter()
    model = build_model(shape, device, torch.bfloat16)
    synchronize(device)
    build_s = time.perf_counter() - started
    state = unique_tensors(model)
    size = sum(t.numel() * t.element_size() for t in state.values())
    free_shm = shm()["shm_free_gb"]
    in_shm = free_shm is not None and free_shm * GB > 1.2 * size
    folder = Path("/dev/shm") if in_shm else Path(args.spill_dir)
    record: dict[str, Any] = {"shape": shape, "params_b": round(sum(t.numel() for t in state.values()) / 1e9, 3),
                              "gb": round(size / GB, 3), "dtype": "bfloat16", "build_s": round(build_s, 2),
                              "where": "/dev/shm" if in_shm else f"disk: {folder}",
                              "shm_free_gb_before": free_shm}
    target = folder / f"agentgym_gpu_bench_{os.getpid()}_{shape}.safetensors"
    try:
        synchronize(device)
        t0 = time.perf_counter()
        on_cpu = {name: tensor.to("cpu", copy=True) for name, tensor in state.items()}
        synchronize(device)
        record["to_cpu"] = stage(time.perf_counter() - t0, size)
        del model, state
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        t0 = time.perf_counter()
        save_file(on_cpu, str(target))
        record["write"] = stage(time.perf_counter() - t0, size)
        del on_cpu
        gc.collect()
        t0 = time.perf_counter()
        loaded = load_file(str(target))
        record["read"] = stage(time.perf_counter() - t0, size)
        t1 = time.perf_counter()
        back = {name: tensor.to(device, copy=True) for name, tensor in loaded.items()}
        synchronize(device)
        record["to_device"] = stage(time.perf_counter() - t1, size)
        record["read_and_to_device"] = stage(time.perf_counter() - t0, size)
        record["read_back_equal"] = all(torch.equal(back[name].cpu(), loaded[name]) for name in list(back)[:3])
        del back, loaded
    finally:
        target.unlink(missing_ok=True)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    record["total_s"] = round(sum(record[k]["s"] for k in ("to_cpu", "write", "read", "to_device")), 3)
    return record


def part_weight_sync(args: argparse.Namespace) -> dict[str, Any]:
    """Weight-sync throughput per shape (``sync_one``)."""
    return {"shapes": [sync_one(shape, args) for shape in args.sync_shapes]}


def import_package_generation() -> Any:
    """``agentgym_trl.engines.hf`` through its package (whose ``__init__`` imports the trainer, hence TRL)."""
    return importlib.import_module("agentgym_trl.engines.hf")


def load_alone(name: str, path: Path) -> Any:
    """The module at ``path`` loaded as ``name`` without its package's ``__init__``."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_generation_module() -> tuple[Any, str]:
    """``agentgym_trl.engines.hf``, or the same file loaded alone (with the ``engines/base.py`` it imports) when the
    package cannot be imported (its ``__init__`` imports the trainer, hence TRL); ``(None, why)`` when neither
    works."""
    try:
        return import_package_generation(), "HFGenerator (agentgym_trl.engines.hf)"
    except Exception as error:  # noqa: BLE001 - ImportError without TRL; whatever else, the file alone is tried
        why = f"agentgym_trl does not import ({type(error).__name__}: {error})"
    engines = ROOT / "agentgym_trl" / "engines"
    try:
        if "agentgym_trl.engines.base" not in sys.modules:  # what hf.py imports, found here without the package
            load_alone("agentgym_trl.engines.base", engines / "base.py")
        module = load_alone("agentgym_generation_alone", engines / "hf.py")
        return module, f"HFGenerator (loaded from agentgym_trl/engines/hf.py: {why})"
    except Exception as error:  # noqa: BLE001 - any failure falls back to plain generate, and says so
        sys.modules.pop("agentgym_generation_alone", None)
        return None, f"transformers generate (HFGenerator unavailable: {why}; {type(error).__name__}: {error})"


def generate_one(shape: str, args: argparse.Namespace) -> dict[str, Any]:
    """One shape's multi-turn generation: contexts grow by the reply and a fake observation every turn."""
    import torch
    from transformers import GenerationConfig

    device = args.device
    contexts_n, turns, prompt_n, new_n, obs_n = WORKLOAD["quick" if args.quick else "full"]
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = build_model(shape, device, dtype)
    vocab = model.config.vocab_size
    stop_id = vocab - 1  # a random model samples it rarely; tokens are counted as generated, stops included
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0)
    module, engine = load_generation_module()
    generator = None
    if module is not None:
        generator = module.HFGenerator(model, config, pad_token_id=0, stop_ids=[stop_id], progress=False)
    rng = torch.Generator().manual_seed(0)

    def tokens(n: int) -> list[int]:
        return torch.randint(1, vocab - 1, (n,), generator=rng).tolist()

    def plain_turn(contexts: list[list[int]]) -> list[list[int]]:
        width = max(len(c) for c in contexts)
        ids = torch.tensor([[0] * (width - len(c)) + c for c in contexts], device=device)
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device)
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, max_new_tokens=new_n,
                             eos_token_id=stop_id)
        rows = out[:, width:].tolist()
        return [row[: row.index(stop_id) + 1] if stop_id in row else row for row in rows]

    def turn(contexts: list[list[int]]) -> list[list[int]]:
        if generator is None:
            with torch.no_grad():
                return plain_turn(contexts)
        return [output.ids for output in generator.generate(contexts, [new_n] * len(contexts))]

    warm = [tokens(8)]  # kernels and allocator warmed on one short context, outside the timing
    if generator is not None:
        with generator.session():
            turn(warm)
    else:
        turn(warm)
    torch.manual_seed(0)
    contexts = [tokens(prompt_n) for _ in range(contexts_n)]
    turn_s, generated = [], 0
    session = generator.session() if generator is not None else torch.no_grad()
    synchronize(device)
    started = time.perf_counter()
    with session:
        for index in range(turns):
            t0 = time.perf_counter()
            replies = turn(contexts)
            synchronize(device)
            turn_s.append(round(time.perf_counter() - t0, 3))
            generated += sum(len(reply) for reply in replies)
            contexts = [c + r + (tokens(obs_n) if index < turns - 1 else []) for c, r in zip(contexts, replies)]
    total = time.perf_counter() - started
    record = {"shape": shape, "engine": engine, "dtype": str(dtype).replace("torch.", ""),
              "contexts": contexts_n, "turns": turns, "prompt_tokens": prompt_n, "new_tokens_per_turn": new_n,
              "observation_tokens": obs_n, "generated_tokens": generated, "turn_s": turn_s,
              "total_s": round(total, 3), "tokens_per_s": round(generated / total, 1),
              "final_context_tokens_max": max(len(c) for c in contexts)}
    if device == "cuda":
        record["peak_gpu_gb"] = round(torch.cuda.max_memory_allocated() / GB, 2)
    model = generator = None  # the weights and states go before the next shape is built
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return record


def part_generation(args: argparse.Namespace) -> dict[str, Any]:
    """HF-generation throughput per shape (``generate_one``)."""
    return {"shapes": [generate_one(shape, args) for shape in args.gen_shapes]}


RUNNERS = {"system": part_system, "weight-sync": part_weight_sync, "generation": part_generation}


def run_one_part(args: argparse.Namespace) -> int:
    """The child process: run ``--one-part`` and write its record to ``--record``."""
    started = time.perf_counter()
    try:
        record = {"part": args.one_part, **RUNNERS[args.one_part](args), "ok": True}
    except Exception as error:  # noqa: BLE001 - reported in the record, the parent goes on with the next part
        record = {"part": args.one_part, "ok": False, "error": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()[-4000:]}
    record["part_s"] = round(time.perf_counter() - started, 2)
    Path(args.record).write_text(json.dumps(record))
    return 0


def run_part(name: str, args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """One part in a process of its own (so a hang is stopped and its memory handed back), with the timeout."""
    with tempfile.TemporaryDirectory() as folder:
        record_path = Path(folder) / "record.json"
        command = [sys.executable, str(Path(__file__).resolve()), *argv, "--one-part", name, "--record",
                   str(record_path)]
        try:
            done = subprocess.run(command, timeout=args.part_timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired as expired:
            tail = (expired.stderr or b"")[-2000:]
            return {"part": name, "ok": False, "error": f"timed out after {args.part_timeout:g} s",
                    "stderr_tail": tail.decode(errors="replace") if isinstance(tail, bytes) else tail}
        if record_path.exists():
            return json.loads(record_path.read_text())
        return {"part": name, "ok": False, "error": f"the part's process exited {done.returncode} with no record",
                "stderr_tail": done.stderr[-2000:]}


def main(argv: list[str] | None = None) -> int:
    """Run the parts, write ``gpu_bench.json``, print each record; the exit code says how it went."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.one_part:
        return run_one_part(args)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_bench: no CUDA device here (torch.cuda.is_available() is False); --device cpu --quick runs the "
              "same code on tiny shapes", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    records = []
    for part in args.parts:
        print(f"== gpu_bench: {part} ==", file=sys.stderr, flush=True)
        record = run_part(part, args, argv)
        records.append(record)
        print(json.dumps({k: v for k, v in record.items() if k != "traceback"}), file=sys.stderr, flush=True)
    summary = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "quick": args.quick,
               "torch": torch.__version__, "wall_s": round(time.perf_counter() - started, 1), "parts": records}
    (Path(args.out) / "gpu_bench.json").write_text(json.dumps(summary, indent=1) + "\n")
    failed = [r["part"] for r in records if not r.get("ok")]
    print(f"gpu_bench: {len(records) - len(failed)} of {len(records)} parts ok"
          + (f"; failed: {', '.join(failed)}" if failed else "") + f" ({summary['wall_s']} s)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
