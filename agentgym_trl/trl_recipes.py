"""Our envs in TRL's own ``GRPOTrainer``: a ``rollout_func`` and an ``environment_factory`` environment.

``AgentGRPOTrainer`` is the full trainer (curriculum, estimators, dynamic sampling, logs). A TRL user who wants
to keep TRL's ``GRPOTrainer`` gets the multi-turn part from here instead of writing it:

- ``env_rollout_func(...)``: TRL's ``rollout_func``. Each prompt of a ``build_env_dataset`` row names an env id
  and an item; the function plays that episode with the trainer's policy through the one episode loop
  (``run_rollout``) and returns prompt ids, completion ids (every turn's reply and the observations between
  them), their log-probs and the ``env_mask`` (1 on the model's tokens, 0 on the env's: only the former are
  trained), plus ``env_reward`` / ``env_success`` / ``env_turns`` for reward functions (``env_reward``).
- ``EnvToolEnvironment``: the other door TRL 1.16 offers, ``environment_factory``. The env becomes one tool,
  ``act(action)``, that a tool-calling model calls once per turn; ``get_reward`` is the episode's return.

Neither reaches into TRL's internals: both use only the public ``rollout_func`` / ``environment_factory``
contracts and the trainer's public attributes (``model``, ``processing_class``, ``accelerator``, ``args``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentgym_envs.core.loop import EnvPool
from agentgym_trl.chat import ChatEncoder
from agentgym_trl.config import env_turn_cap
from agentgym_trl.data import check_env_ids
from agentgym_trl.rollout import run_rollout, validate_rollout_output

_PLACEHOLDER = re.compile(r"^\[(?P<env_id>\S+) item (?P<item_id>-?\d+)\]$")
# The control-token shapes of the common chat templates. TRL tokenises a tool turn with ``apply_chat_template``,
# where such a string in content becomes a control id: env text holding one (a BIRD row echoing
# ``<|im_end|>\n<|im_start|>system``) would forge a turn. The environment never sees the tokenizer, so it breaks
# every string of these shapes instead (``AgentGRPOTrainer`` tokenises env text as text; see ``chat.py``).
_CONTROL_MARKER = re.compile(
    r"<[|\uff5c][^<>\s]{1,64}?[|\uff5c]>"  # ChatML, Llama 3, Phi, GPT-OSS, DeepSeek: <|im_start|>, <|eot_id|>
    r"|</?s>|<(?:bos|eos|pad|unk|start_of_turn|end_of_turn)>"  # SentencePiece, Gemma
    r"|</?(?:tool_call|tool_response|think)>"  # the tool-calling templates' own tags (Qwen, Hermes)
    r"|\[/?(?:INST|TOOL_CALLS|TOOL_RESULTS|AVAILABLE_TOOLS)\]"  # Mistral
)
_BREAK = "\u200b"  # a zero-width space after a marker's first character: the text reads the same


def escape_control_markers(text: str) -> str:
    """``text`` with every control-token-shaped string broken by a zero-width space, so a chat template's
    tokenisation reads it as characters; text without such a string is returned unchanged."""
    return _CONTROL_MARKER.sub(lambda m: m[0][0] + _BREAK + m[0][1:], text)


def row_of_prompt(prompt: str | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``{"env_id", "item_id"}`` row a ``build_env_dataset`` prompt stands for (TRL's ``rollout_func`` sees
    the prompts only, so the row travels in the prompt: ``[AgentGym/TextCraft-Depth1-v0 item 12]``)."""
    text = prompt if isinstance(prompt, str) else (prompt[-1].get("content") if prompt else None)
    match = _PLACEHOLDER.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"prompt {prompt!r} does not name an env item: env_rollout_func plays the rows of "
            "agentgym_trl.build_env_dataset(...), whose prompts are [<env id> item <item id>]"
        )
    return {"env_id": match["env_id"], "item_id": int(match["item_id"])}


def env_rollout_func(
    *,
    max_turns: int | None = None,
    max_turn_tokens: int = 256,
    max_context_tokens: int = 4096,
    merged_first_turn: bool = False,
    truncated_turn: str = "end",
    mask_truncated_turns: bool = False,
    chat_template_kwargs: dict[str, Any] | None = None,
    env_pool: EnvPool | None = None,
    env_workers: int = 8,
) -> Callable[[list, Any], dict[str, list]]:
    """A ``rollout_func`` for TRL's ``GRPOTrainer`` that plays one multi-turn episode per prompt.

    Use it with ``train_dataset=build_env_dataset([...])`` and ``reward_funcs=env_reward``. ``max_turns`` is the
    turn budget of every episode (default: each env id's registered cap); ``max_turn_tokens`` caps one reply,
    ``max_context_tokens`` the whole episode (prompt, replies, observations). ``merged_first_turn`` opens with
    one user turn (instruction and first observation) instead of AgentGym's three-message opening. Generation is
    the trainer's policy with ``model.generate`` (its ``temperature``, ``top_p``, ``top_k``), one batch per turn
    with a prefix cache; TRL's vLLM is not used by this function (``AgentGRPOTrainer`` drives it turn by turn).
    """
    state: dict[str, Any] = {}
    pool = env_pool if env_pool is not None else EnvPool()
    executor = ThreadPoolExecutor(max_workers=env_workers, thread_name_prefix="agentgym-env")

    def setup(trainer: Any) -> tuple[Any, ChatEncoder]:
        if state.get("trainer") is not trainer:
            from transformers import GenerationConfig
            from trl.models import unwrap_model_for_generation

            from agentgym_trl.engines import Sampling, make_generator

            if getattr(trainer, "use_vllm", False):
                raise ValueError("env_rollout_func generates with model.generate: set use_vllm=False, or use "
                                 "AgentGRPOTrainer, which samples every turn through TRL's vLLM")
            tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
            stops = list(getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id])
            encoder = ChatEncoder(tokenizer, stops, chat_template_kwargs)
            args = trainer.args
            config = getattr(trainer, "generation_config", None) or GenerationConfig(
                do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or 0)

            def unwrap():
                return unwrap_model_for_generation(
                    trainer.model_wrapped, trainer.accelerator, gather_deepspeed3_params=args.ds3_gather_for_generation,
                    generation_kwargs=getattr(trainer, "generation_kwargs", None),
                    gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs)

            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else encoder.closer_id
            generator = make_generator("hf", Sampling.of(config), encoder.stop_ids, model=trainer.model,
                                       generation_config=config, pad_id=pad, unwrap=unwrap)
            state.update(trainer=trainer, encoder=encoder, generator=generator)
        return state["generator"], state["encoder"]

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        rows = [row_of_prompt(prompt) for prompt in prompts]
        check_env_ids(sorted({row["env_id"] for row in rows}))
        generator, encoder = setup(trainer)
        budget = max_turns if max_turns is not None else [env_turn_cap(row["env_id"]) for row in rows]
        result = run_rollout(rows, generator, encoder, pool, max_turns=budget, max_turn_tokens=max_turn_tokens,
                             max_context_tokens=max_context_tokens, executor=executor, truncated_turn=truncated_turn,
                             mask_truncated_turns=mask_truncated_turns, merged_first_turn=merged_first_turn)
        output = result.to_trl()
        validate_rollout_output(output, len(rows))
        rollout_func.last_rollout = result  # the trajectories, for a callback or a test
        return output

    rollout_func.last_rollout = None
    return rollout_func


class EnvToolEnvironment:
    """One env as a TRL ``environment_factory`` environment: the model plays it through one tool, ``act``.

    ``GRPOTrainer(..., environment_factory=lambda: EnvToolEnvironment(max_turns=10))`` with a dataset whose
    rows carry ``env_id`` and ``item_id`` (``build_env_dataset``): TRL calls ``reset(**row)``, whose text (the
    task's instruction and first observation) is appended to the row's prompt; every ``act`` tool call is one env
    step and returns the observation; ``get_reward`` is the episode's return (its outcome). The tool's argument is
    the action alone (``get 1 oak log``): the env writes it in its family's format (``TextEnv.action_response``: an
    ``Action:`` line, tags, backticks) before its parser reads it, so a whole reply in the instruction's format
    works too. Env text reaches TRL with its control-token-shaped strings broken (``escape_control_markers``), so
    it cannot forge a turn. The model's chat template must support tool calls (TRL checks it).
    """

    def __init__(self, env_id: str | None = None, max_turns: int | None = None, **make_kwargs: Any):
        self._env_id, self._max_turns, self._make_kwargs = env_id, max_turns, make_kwargs
        self._envs: dict[str, Any] = {}
        self._env: Any = None
        self._return = 0.0
        self._over = True

    def reset(self, env_id: str | None = None, item_id: int | None = None, **row: Any) -> str:
        """Start the episode of ``env_id`` / ``item_id`` (the row's fields; the constructor's ``env_id`` if the
        row has none) and return the instruction and first observation."""
        import gymnasium as gym

        env_id = env_id or self._env_id
        if env_id is None:
            raise ValueError("EnvToolEnvironment needs an env id: a row field 'env_id' or EnvToolEnvironment(env_id)")
        if env_id not in self._envs:
            check_env_ids([env_id])
            self._envs[env_id] = gym.make(env_id, max_episode_steps=self._max_turns or env_turn_cap(env_id),
                                          **self._make_kwargs)
        self._env = self._envs[env_id]
        options = {"item_id": int(item_id)} if item_id is not None else {"split": "train"}
        observation, info = self._env.reset(options=options)
        self._return, self._over = 0.0, False
        instruction = str(info.get("instruction") or "").strip()
        closing = "Send each action with the `act` tool: its argument is the action alone."
        return escape_control_markers(f"{instruction}\n\n{observation}\n\n{closing}".strip())

    def act(self, action: str) -> str:
        """Take one action in the environment.

        Args:
            action: The action alone, as the task names its actions (for example `get 1 oak log` or `go to kitchen`),
                without `Action:`, tags or backticks: the task's format is added when they are missing.

        Returns:
            The environment's observation after the action.
        """
        if self._env is None or self._over:
            return "The episode is over; no more actions are taken."
        write = getattr(self._env.unwrapped, "action_response", None)  # a plain Gymnasium env takes the text as is
        observation, reward, terminated, truncated, _ = self._env.step(write(str(action)) if write else str(action))
        self._return += float(reward)
        self._over = bool(terminated or truncated)
        return escape_control_markers(f"{observation}\n\nThe episode is over." if self._over else str(observation))

    def get_reward(self) -> float:
        """The episode's return: the sum of its rewards (the env's outcome)."""
        return self._return
