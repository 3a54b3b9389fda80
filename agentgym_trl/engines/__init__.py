"""The generation engines: one declaration each, one way to make a generator, one vocabulary.

| kind | what samples each turn | where |
|---|---|---|
| ``hf`` | ``model.generate`` in this process (``hf.py``) | everywhere; the default |
| ``vllm-process`` | the project's vLLM engine process, in vLLM's own environment (``vllm_process.py``) | CPUs |
| ``vllm-trl`` | TRL's own ``VLLMGeneration``, colocated or ``trl vllm-serve`` (``trl_vllm.py``) | GPUs, ``[gpu]`` |

An ``Engine`` says what it is, which of the config's ``vllm_*`` options it applies and how it checks them, and how
a generator is built from a ``Sampling`` and the stop ids plus what that engine needs (``make_generator``). The
trainer, ``ModelAgent``, ``agentgym eval --engine`` and the stage evaluations all go through ``make_generator``;
adding an engine is one module here and one ``register_engine``. The heavy modules load only when a generator
is built, so the config can check options against these declarations without importing an engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym_trl.engines.base import Generator, Sampling, TurnOutput, cut_turn

logger = logging.getLogger(__name__)

__all__ = ["ENGINES", "Engine", "Generator", "Sampling", "TurnOutput", "cut_turn", "engine_kind", "engine_named",
           "make_generator", "register_engine", "required_model_len"]

# The config's vllm_* options by where they apply (tests/test_trl_vllm.py checks every vllm_* field is in one).
ANY_VLLM = frozenset({"vllm_engine", "vllm_mode", "vllm_importance_sampling_correction",
                      "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max",
                      "vllm_importance_sampling_clip_min", "vllm_importance_sampling_cap",
                      "vllm_structured_outputs_regex"})
SERVER_ONLY = frozenset({"vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout",
                         "vllm_group_port"})
COLOCATE_ONLY = frozenset({"vllm_tensor_parallel_size", "vllm_enable_sleep_mode", "vllm_gpu_memory_utilization",
                           "vllm_max_model_length", "vllm_model_impl"})
PROCESS_ONLY = frozenset({"vllm_python", "vllm_dtype", "vllm_kv_cache_gb", "vllm_enforce_eager"})
#: the weight dtypes vLLM takes by name
VLLM_DTYPES = ("auto", "bfloat16", "float16", "half", "float32", "float")


@dataclass(frozen=True)
class Engine:
    """One generation engine.

    ``options``: the config's ``vllm_*`` fields it applies; any other set away from its default is refused.
    ``check``: its own checks of a config that runs it (values, combinations), given the options set.
    ``build``: ``(sampling, stop_ids, **needs) -> Generator``, importing its module only then.
    """

    kind: str
    summary: str
    build: Callable[..., Generator]
    options: frozenset[str] = frozenset()
    refusal: str = "does not apply to this engine"
    check: Callable[[Any, set[str]], None] = field(default=lambda config, changed: None)


ENGINES: dict[str, Engine] = {}


def register_engine(engine: Engine) -> Engine:
    """Add an engine under its kind (a second one of the same kind is refused)."""
    if engine.kind in ENGINES:
        raise ValueError(f"an engine of kind {engine.kind!r} is registered already")
    ENGINES[engine.kind] = engine
    return engine


def engine_named(kind: str) -> Engine:
    """The engine of ``kind``; an unknown kind names the known ones."""
    if kind not in ENGINES:
        raise ValueError(f"unknown engine {kind!r}; the engines are: {', '.join(ENGINES)}")
    return ENGINES[kind]


def make_generator(kind: str, sampling: Sampling, stop_ids: Any, **needs: Any) -> Generator:
    """A generator of engine ``kind`` that samples with ``sampling`` and stops a turn at ``stop_ids``.

    ``needs`` are what engines build from; each takes what it uses and ignores the rest. The trainer passes
    ``model`` (the policy), ``generation_config`` (TRL's), ``pad_id``, ``unwrap`` (the policy gathered for a
    rollout) and ``device`` to every engine, and ``hf`` also gets ``share_prompt_prefill`` / ``sampling_dtype``,
    ``vllm-process`` its ``engine`` (or ``model`` + ``options``: the shared one), ``vllm-trl`` TRL's
    ``vllm_generation``, ``collective`` and ``filler_id``.
    """
    return engine_named(kind).build(sampling, tuple(stop_ids), **needs)


#: the vLLM engines by kind, as the config's ``vllm_engine`` also names them
VLLM_ENGINE_NAMES = {"vllm-process": "process", "vllm-trl": "trl"}
#: ``vllm_engine``'s values (the config's choice among the vLLM engines, with ``use_vllm``); ``auto``: by device
VLLM_CHOICES = {"auto": None, **{name: kind for kind, name in VLLM_ENGINE_NAMES.items()},
                **{kind: kind for kind in VLLM_ENGINE_NAMES}}


def engine_kind(use_vllm: bool, vllm_engine: str = "auto", cuda: bool = False) -> str:
    """The kind a config runs: ``hf`` without ``use_vllm``; with it, ``vllm_engine`` (``'trl'`` / ``'process'``, or
    ``'auto'``: TRL's vLLM with CUDA, the engine process without)."""
    if vllm_engine not in VLLM_CHOICES:
        raise ValueError(f"vllm_engine must be one of {list(VLLM_CHOICES)}, got {vllm_engine!r}")
    if not use_vllm:
        return "hf"
    return VLLM_CHOICES[vllm_engine] or ("vllm-trl" if cuda else "vllm-process")


def required_model_len(max_context_tokens: int, max_turn_tokens: int) -> int:
    """The engine context a turn may need: one call samples up to the batch's largest limit for every row, so a
    context near ``max_context_tokens`` may be sampled ``max_turn_tokens`` past it before it is cut."""
    return max_context_tokens + max_turn_tokens


def refuse(options: set[str], reason: str) -> None:
    """Raise for options set away from their defaults that do not apply, naming each and why."""
    if options:
        raise ValueError(f"{', '.join(sorted(options))} {reason}")


# ---- the built-in engines ----------------------------------------------------------------------------------------
def _build_hf(sampling: Sampling, stop_ids: tuple[int, ...], *, model: Any, generation_config: Any, pad_id: int,
              unwrap: Any = None, share_prompt_prefill: bool = True, sampling_dtype: Any = None,
              progress: bool | None = None, logprobs: bool = True, **_: Any) -> Generator:
    from agentgym_trl.engines.hf import HFGenerator

    return HFGenerator(model, sampling.generation_config(generation_config), pad_id, stop_ids, unwrap=unwrap,
                       share_prompt_prefill=share_prompt_prefill, sampling_dtype=sampling_dtype, progress=progress,
                       logprobs=logprobs)


def _build_process(sampling: Sampling, stop_ids: tuple[int, ...], *, engine: Any = None, model: Any = None,
                   options: Any = None, ignore_eos: bool = False, **_: Any) -> Generator:
    from agentgym_trl.engines.vllm_process import VLLMGenerator, shared_engine

    return VLLMGenerator(engine if engine is not None else shared_engine(model, options), sampling, stop_ids,
                         ignore_eos=ignore_eos)


def _build_trl(sampling: Sampling, stop_ids: tuple[int, ...], *, vllm_generation: Any, collective: bool,
               filler_id: int, device: Any = "cpu", **_: Any) -> Generator:
    from agentgym_trl.engines.trl_vllm import TRLVLLMGenerator

    return TRLVLLMGenerator(vllm_generation, sampling, stop_ids, collective=collective, filler_id=filler_id,
                            device=device)


#: the model code vLLM runs a model with (its ``model_impl``)
VLLM_MODEL_IMPLS = ("vllm", "transformers", "auto")


def _check_values(config: Any) -> None:
    """The vLLM options both engines apply, refused when the config is built rather than when an engine starts
    (minutes later, or on another host) or, worse, quietly taken."""
    memory = config.vllm_gpu_memory_utilization
    if not (isinstance(memory, (int, float)) and 0 < memory <= 1):
        raise ValueError(f"vllm_gpu_memory_utilization is the share of the GPU's memory vLLM may take: a number in "
                         f"(0, 1], got {memory!r}")
    if config.vllm_max_model_length is not None and config.vllm_max_model_length <= 0:
        raise ValueError(f"vllm_max_model_length must be a positive number of tokens (or unset), got "
                         f"{config.vllm_max_model_length}")
    if config.vllm_model_impl not in VLLM_MODEL_IMPLS:
        raise ValueError(f"vllm_model_impl must be one of {list(VLLM_MODEL_IMPLS)}, got {config.vllm_model_impl!r}")


def _check_process(config: Any, changed: set[str]) -> None:
    _check_values(config)
    space = config.vllm_kv_cache_gb
    if space is not None and (not isinstance(space, (int, float)) or space < 1 or space != int(space)):
        raise ValueError(f"vllm_kv_cache_gb must be a whole number of GiB, at least 1, got {space!r}: vLLM's CPU "
                         "backend reads its key/value cache size (VLLM_CPU_KVCACHE_SPACE) as an integer of GiB, so "
                         "any other value would be rounded")
    if config.vllm_dtype is not None and config.vllm_dtype not in VLLM_DTYPES:
        raise ValueError(f"vllm_dtype must be one of {list(VLLM_DTYPES)}, got {config.vllm_dtype!r}")
    _check_context(config)


def _check_context(config: Any) -> None:
    if config.vllm_max_model_length is not None and config.vllm_max_model_length < config.max_context_tokens:
        raise ValueError(f"vllm_max_model_length ({config.vllm_max_model_length}) must hold a whole episode: at "
                         f"least max_context_tokens ({config.max_context_tokens})")


def _check_trl(config: Any, changed: set[str]) -> None:
    _check_values(config)
    if not (isinstance(config.vllm_tensor_parallel_size, int) and config.vllm_tensor_parallel_size >= 1):
        raise ValueError(f"vllm_tensor_parallel_size is the number of GPUs one vLLM engine spans: at least 1, got "
                         f"{config.vllm_tensor_parallel_size!r}")
    if not config.vllm_server_timeout > 0:
        raise ValueError(f"vllm_server_timeout is the seconds to wait for the vLLM server: positive, got "
                         f"{config.vllm_server_timeout!r}")
    _check_context(config)
    needed = required_model_len(config.max_context_tokens, config.max_turn_tokens)
    if config.vllm_mode == "colocate":
        refuse(changed & SERVER_ONLY, "applies to vllm_mode='server'")
        if config.vllm_max_model_length is None:
            config.vllm_max_model_length = needed  # TRL's default would be the model's whole position range
        elif config.vllm_max_model_length < needed:
            logger.warning("vllm_max_model_length=%d: a turn that starts near max_context_tokens may be cut short by "
                           "the engine (room for a whole turn after a whole context: %d)",
                           config.vllm_max_model_length, needed)
    else:
        refuse(changed & COLOCATE_ONLY, "is set on the server in vllm_mode='server' (`trl vllm-serve --<option>` or "
               "`vllm serve --<option>`)")
    if config.value_head is not None:
        raise ValueError("value_head lives on the policy, and TRL's vLLM weight sync would send its tensors to "
                         "vLLM: use vllm_engine='process' or HF generation with gae")
    from trl.import_utils import is_vllm_available

    if not is_vllm_available():
        raise ValueError("vllm_engine='trl' runs vLLM in this environment, which has no vllm: install the GPU set "
                         "(`pip install -e '.[gpu]'`, docs/gpu.md), or use vllm_engine='process' "
                         "(scripts/setup_vllm.sh)")


register_engine(Engine(
    kind="hf", summary="transformers' generate in this process", build=_build_hf,
    refusal="applies only with use_vllm=True"))
register_engine(Engine(
    kind="vllm-process", summary="the project's vLLM engine process, in vLLM's own environment (CPUs)",
    build=_build_process,
    options=(ANY_VLLM - {"vllm_mode", "vllm_structured_outputs_regex"}) | PROCESS_ONLY
    | {"vllm_gpu_memory_utilization", "vllm_max_model_length", "vllm_model_impl"},
    refusal="is TRL's vLLM integration (vllm_engine='trl', on GPUs with the [gpu] extra); the engine process "
            "(vllm_engine='process') runs one colocated engine per training process",
    check=_check_process))
register_engine(Engine(
    kind="vllm-trl", summary="TRL's own vLLM: colocated, or trl vllm-serve (GPUs, the [gpu] extra)", build=_build_trl,
    options=ANY_VLLM | SERVER_ONLY | COLOCATE_ONLY,
    refusal="applies to the engine process (vllm_engine='process'), not to TRL's vLLM", check=_check_trl))
