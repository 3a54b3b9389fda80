"""The one record of an episode: ``Trajectory``, and its JSONL form.

Everything that plays episodes (the trainer's rollout, ``agentgym eval``, ``agentgym collect``,
``agentgym play``) fills a ``Trajectory`` through the one episode loop (``core.loop``), and
everything that reads episodes (the metrics, the viewer, the plots, SFT data, AgentEvol) reads
it or its record. The record (``Trajectory.to_record``) is one JSON object per episode:

=====================  ===================================================================================
``env_id``             the registered id; ``subtask`` its sub-task, ``split`` the item's split
``item_id``            the item; ``seed`` the reset seed; ``sample`` the index among an item's K samples
``max_turns``          the turn budget (the env's ``TimeLimit``) the episode was played under
``agent``              who played (``oracle``, ``random``, ``model``, ``endpoint``, ``policy``, ...)
``messages``           the conversation the agent saw and wrote: the opening (AgentGym's instruction,
                       acknowledgement and first observation, or one merged user turn), then each
                       action as an assistant turn and each later observation as a user turn, up to
                       the last action
``prompt_messages``    how many leading messages are the opening (the prompt, never trained on), replayed
                       oracle turns included
``prefix_actions``     only when the episode started after the oracle's first k actions (``core/oracle_prefix``):
                       those actions (in ``messages`` as assistant turns); ``prefix_rewards`` what they earned
``final_observation``  the env's answer to the last action (not shown to the agent), or null
``actions``            every response, one per turn (a response cut by a token limit included)
``parsed_actions``     per env step, the action the env's parser took from the response and played
                       (``info["parsed_action"]``), null where it found none; absent in older records
``cut``                the turns (1 = the first) whose response a token limit cut, when any was (a model's
                       ``max_turn_tokens``, an endpoint's ``max_tokens``)
``rewards``, ``valid``, ``scores``
                       per env step: reward, ``info["valid_action"]``, ``info["score"]``
``return``             the sum of ``rewards`` and ``prefix_rewards`` (the outcome on the env's reward scale)
``turns``              ``len(actions)`` (the agent's turns; replayed oracle turns are not counted)
``tokens``             model tokens, when the agent counts them
``info``               ``success``, ``score`` (the env's native final score) and ``stop_reason``
``timing``             seconds: ``env_s`` (this episode's env steps) and, from ``evaluate``, its batch's
                       ``batch_s``, ``batch_agent_s``, ``batch_env_s`` and ``batch_size``
``time``               when it ended; training logs add ``step`` and ``mode``
=====================  ===================================================================================

Token ids, masks and logprobs (when a model played) live on the ``Trajectory`` for the trainer and
are not written to the record; so does ``turn_ends`` (per turn, the completion index just past that
turn's tokens, its end-of-turn token included), which ties per-turn rewards to token positions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

# Why an episode ended: the one set of stop reasons, used by every loop and every metric.
TERMINATED = "terminated"  # the env said the episode is over (success or failure)
MAX_TURNS = "max_turns"  # the turn budget (the env's TimeLimit) ran out
ENV_TRUNCATED = "env_truncated"  # the env truncated on its own (e.g. an engine's step cap) before the budget
TURN_TOKENS = "turn_tokens"  # a model turn hit its token limit (and the agent ends cut turns)
CONTEXT = "context"  # the conversation no longer fits the model's context
ENV_ERROR = "env_error"  # the env raised (engine crash); the episode keeps what it earned
TOKEN_LIMITS = (TURN_TOKENS, CONTEXT)
STOP_REASONS = (TERMINATED, MAX_TURNS, ENV_TRUNCATED, TURN_TOKENS, CONTEXT, ENV_ERROR)

INSTRUCTION_SEPARATOR = "\n\n"
#: The acknowledgement used when an env's reset info names none (AgentGym's usual one).
ACKNOWLEDGEMENT = "OK. I'll follow your instructions and try my best to solve the task."

Message = dict[str, str]


def first_messages(info: Mapping[str, Any], observation: str, agentgym_order: bool = True) -> list[Message]:
    """The conversation before the agent's first response.

    In AgentGym's order (the default) the task instruction is a user turn, the assistant
    acknowledges it (``info["acknowledgement"]``, e.g. "Ok." for SearchQA and WebArena), then the
    first observation is a user turn: a model trained with AgentGym sees the same turns here, and
    the other way round. ``agentgym_order=False`` gives the merged layout (instruction and first
    observation in one user turn, the trainer's ``merged_first_turn``); see docs/fidelity.md. An env
    without an instruction starts with the observation alone.
    """
    instruction = info.get("instruction")
    if not instruction:
        return [{"role": "user", "content": observation}]
    if not agentgym_order:
        return [{"role": "user", "content": first_user_message(instruction, observation)}]
    return [
        {"role": "user", "content": instruction},
        {"role": "assistant", "content": info.get("acknowledgement") or ACKNOWLEDGEMENT},
        {"role": "user", "content": observation},
    ]


def first_user_message(instruction: str | None, observation: str) -> str:
    """The instruction and the first observation merged into one user turn (the merged layout)."""
    return f"{instruction}{INSTRUCTION_SEPARATOR}{observation}" if instruction else observation


def now_iso() -> str:
    """The current UTC time to the second, ISO 8601 (the records' timestamps)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Trajectory:
    """One episode: the conversation, what each step earned, why it ended, and the model's tokens."""

    env_id: str
    item_id: int
    seed: int | None = None
    sample: int = 0
    max_turns: int = 0
    split: str = ""
    subtask: str | None = None
    agent: str = ""
    messages: list[Message] = field(default_factory=list)
    prompt_messages: int = 0
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    parsed_actions: list[str | None] = field(default_factory=list)
    final_observation: str | None = None
    success: bool = False
    stop_reason: str | None = None
    tokens: int | None = None
    timing: dict[str, float] = field(default_factory=dict)
    # What a model agent adds (the trainer's input; not part of the record).
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    cut_turns: int = 0
    cut: list[int] = field(default_factory=list)  # which turns (1-based) a token limit cut
    template_fallbacks: int = 0
    # The oracle's replayed turns before the agent's first (reverse curriculum; empty otherwise).
    prefix_actions: list[str] = field(default_factory=list)
    prefix_rewards: list[float] = field(default_factory=list)

    # ---- what the loop records -----------------------------------------------------------------
    def open(self, info: Mapping[str, Any], observation: str, agentgym_order: bool = True) -> None:
        """Start the conversation from the env's reset."""
        self.item_id = int(info.get("item_id", self.item_id))
        self.split = str(info.get("split", self.split))
        self.subtask = info.get("subtask", self.subtask)
        self.messages = first_messages(info, observation, agentgym_order)
        self.prompt_messages = len(self.messages)

    def replay(self, action: str, observation: str, reward: float) -> None:
        """Record a replayed oracle turn as history: its response an assistant turn, the env's answer a user turn,
        both part of the prompt (``prompt_messages``). Call after ``open`` and before the agent's first turn."""
        if self.actions:
            raise RuntimeError("oracle turns are replayed before the agent's first turn")
        self.prefix_actions.append(action)
        self.prefix_rewards.append(float(reward))
        self.messages += [{"role": "assistant", "content": action}, {"role": "user", "content": observation}]
        self.prompt_messages = len(self.messages)

    def act(self, text: str) -> None:
        """Record the agent's response as the next action and assistant message."""
        self.actions.append(text)
        self.messages.append({"role": "assistant", "content": text})

    def observe(self, observation: str, reward: float, info: Mapping[str, Any], last: bool) -> None:
        """Record the env's answer to the last action; ``last``: no further turn will see it."""
        self.rewards.append(float(reward))
        self.valid.append(bool(info.get("valid_action", True)))
        self.scores.append(float(info.get("score", 0.0) or 0.0))
        parsed = info.get("parsed_action")
        self.parsed_actions.append(parsed if isinstance(parsed, str) else None)
        self.success = bool(info.get("success", self.success))
        if last:
            self.final_observation = observation
        else:
            self.messages.append({"role": "user", "content": observation})

    def end(self, reason: str) -> None:
        """Record why the episode ended (one of ``STOP_REASONS``; anything else is a ValueError)."""
        if reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {reason!r}; one of {STOP_REASONS}")
        self.stop_reason = reason

    # ---- what readers ask ----------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Whether the episode has ended (it has a stop reason)."""
        return self.stop_reason is not None

    @property
    def turns(self) -> int:
        """How many actions the agent took."""
        return len(self.actions)

    @property
    def reward(self) -> float:
        """The return: the sum of the env's rewards (the outcome, on its scale), replayed oracle turns' included."""
        return float(sum(self.prefix_rewards) + sum(self.rewards))

    @property
    def score(self) -> float:
        """The env's native score after the last step."""
        return self.scores[-1] if self.scores else 0.0

    @property
    def valid_actions(self) -> int:
        """How many of the actions the env accepted."""
        return sum(self.valid)

    @property
    def valid_action_rate(self) -> float:
        """The share of actions the env accepted (0 for an episode with no turn)."""
        return self.valid_actions / self.turns if self.turns else 0.0

    @property
    def token_truncated(self) -> bool:
        """A token limit cut one of its turns or ended it (the episode may have played on after a cut turn)."""
        return self.cut_turns > 0 or self.stop_reason in TOKEN_LIMITS

    @property
    def model_tokens(self) -> int:
        """The tokens the model generated: the sampled completion tokens, else the count the agent reported."""
        return sum(self.env_mask) if self.env_mask else int(self.tokens or 0)

    def add_tokens(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None = None) -> None:
        """Append completion tokens: ``mask`` 1 for tokens the model sampled, 0 for observation / template tokens."""
        self.completion_ids.extend(ids)
        self.env_mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    # ---- the record ----------------------------------------------------------------------------
    def to_record(self, **extra: Any) -> dict[str, Any]:
        """The episode as one JSON object (the schema in this module's docstring); ``extra`` adds fields."""
        return {
            "env_id": self.env_id,
            "subtask": self.subtask,
            "item_id": self.item_id,
            "seed": self.seed,
            "split": self.split,
            "sample": self.sample,
            "max_turns": self.max_turns,
            "agent": self.agent,
            "messages": [dict(m) for m in self.messages],
            "prompt_messages": self.prompt_messages,
            "final_observation": self.final_observation,
            "actions": list(self.actions),
            "rewards": list(self.rewards),
            "valid": list(self.valid),
            "scores": list(self.scores),
            "parsed_actions": list(self.parsed_actions),
            "return": self.reward,
            "turns": self.turns,
            "tokens": self.tokens if self.tokens is not None else (sum(self.env_mask) if self.env_mask else None),
            "info": {"success": self.success, "score": self.score, "stop_reason": self.stop_reason},
            "timing": {name: round(value, 4) for name, value in self.timing.items()},
            "time": now_iso(),
            **({"cut": list(self.cut)} if self.cut else {}),
            **({"prefix_actions": list(self.prefix_actions), "prefix_rewards": list(self.prefix_rewards)}
               if self.prefix_actions else {}),
            **extra,
        }
