"""The trainer's rollout: one batch of episodes of the policy through the episode loop, as TRL wants them.

Every row names an env id and an item id. ``run_rollout`` plays one episode per row with a
``ModelAgent`` (see ``agent.py`` for the token stream and the token limits) through the one
episode loop of ``agentgym_envs.core.loop`` (batched generation per turn, env steps concurrent in a
thread pool, the turn budget as each env's ``TimeLimit``), and returns the trajectories with the
time spent generating vs everything else. ``RolloutResult.to_trl`` is what TRL's ``rollout_func``
returns: prompt ids, completion ids, ``env_mask``, logprobs, plus per-episode outcome fields that
reward functions can read (``env_reward``, ``env_success``, ``env_turns``, ``env_stop_reason``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from agentgym_envs.core.episode import Trajectory
from agentgym_envs.core.loop import EnvPool, EpisodeError, EpisodeStart, PlayStats, play_batch
from agentgym_envs.evaluation.records import TRAJECTORIES_FILE, TrajectoryLog
from agentgym_envs.evaluation.runner import TurnProgress
from agentgym_trl.agent import ModelAgent
from agentgym_trl.chat import ChatEncoder
from agentgym_trl.engines import Generator


@dataclass
class RolloutResult(PlayStats):
    """A rollout's trajectories and where its time went (the loop's ``PlayStats``; the agent's time is generation)."""

    trajectories: list[Trajectory] = field(default_factory=list)
    #: positions the generator ran through the model in prefills (``prefilled_tokens`` of the HF engine, or the
    #: engine process's prompt tokens its prefix cache did not hold); None for an engine that does not count them
    prefilled_tokens: int | None = None

    @property
    def generation_s(self) -> float:
        """The agent's time, which for a model agent is generation: the name the rollout metrics use."""
        return self.agent_s

    @property
    def outside_model_s(self) -> float:
        """Everything but generation: env steps, chat templates, tokenisation, Python."""
        return self.outside_agent_s

    def to_trl(self) -> dict[str, list]:
        """The dict TRL's ``rollout_func`` contract asks for, plus per-trajectory outcome fields."""
        ts = self.trajectories
        return {
            "prompt_ids": [t.prompt_ids for t in ts],
            "completion_ids": [t.completion_ids for t in ts],
            "logprobs": [t.logprobs for t in ts],
            "env_mask": [t.env_mask for t in ts],
            "env_reward": [t.reward for t in ts],
            "env_success": [t.success for t in ts],
            "env_turns": [t.turns for t in ts],
            "env_stop_reason": [t.stop_reason for t in ts],
        }


class RolloutProgress(TurnProgress):
    """The rollout's progress as a line on stderr every ``interval`` seconds (turn, episodes still playing, model
    tokens per second), so a training step whose rollout takes minutes never looks stuck, on a terminal or in a
    log file alike."""

    def __init__(self, episodes: int, interval: float, label: str = "rollout"):
        super().__init__(bar=None, interval=interval)
        self.label = label
        self.start_batch(episodes)
        self.episodes = episodes

    def show(self, now: float) -> None:
        """Print one progress line (turn, episodes playing, tokens per second, elapsed), readable in a log file
        where a tqdm bar is not.
        """
        tokens = sum(self.tokens.values())
        print(f"[{self.label}] turn {self.turn}, {self.active}/{self.episodes} episodes playing, "
              f"{tokens / max(now - self.started, 1e-9):.1f} tok/s, {now - self.started:.0f} s", file=sys.stderr,
              flush=True)


def validate_rollout_output(output: Mapping[str, Sequence], expected: int) -> None:
    """Check the lengths TRL does not check (a wrong ``env_mask`` length silently misaligns the loss)."""
    for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask"):
        if len(output[key]) != expected:
            raise ValueError(f"rollout returned {len(output[key])} {key} for {expected} rows")
    for index, (ids, lps, mask) in enumerate(zip(output["completion_ids"], output["logprobs"], output["env_mask"])):
        if not (len(ids) == len(lps) == len(mask)):
            raise ValueError(
                f"trajectory {index}: {len(ids)} completion ids, {len(lps)} logprobs and {len(mask)} env_mask values"
            )
        if any(m not in (0, 1) for m in mask):
            raise ValueError(f"trajectory {index}: env_mask must hold only 0 and 1")
        if not output["prompt_ids"][index]:
            raise ValueError(f"trajectory {index}: empty prompt")


def episode_starts(rows: Sequence[Mapping[str, Any]], max_turns: int | Sequence[int],
                   oracle_prefix: int = 0) -> list[EpisodeStart]:
    """One start per row (``{"env_id", "item_id"[, "seed"]}``); the sample index counts repeats of an item.
    ``oracle_prefix``: start each after the oracle's first k actions (``agentgym_envs/core/oracle_prefix.py``)."""
    budgets = [int(max_turns)] * len(rows) if isinstance(max_turns, int) else [int(b) for b in max_turns]
    if len(budgets) != len(rows) or any(b < 1 for b in budgets):
        raise ValueError(f"max_turns must be a positive int or one per row, got {max_turns!r}")
    seen: dict[tuple[str, int], int] = {}
    starts = []
    for row, budget in zip(rows, budgets):
        group = (str(row["env_id"]), int(row["item_id"]))
        seen[group] = seen.get(group, -1) + 1  # the index within the GRPO group of this item
        seed = row.get("seed")
        starts.append(EpisodeStart(group[0], group[1], budget, seed=None if seed is None else int(seed),
                                   sample=seen[group], prefix=int(oracle_prefix)))
    return starts


def run_rollout(
    rows: Sequence[Mapping[str, Any]],
    generator: Generator,
    encoder: ChatEncoder,
    env_pool: EnvPool,
    *,
    max_turns: int | Sequence[int],
    max_turn_tokens: int,
    max_context_tokens: int,
    executor: Executor | None = None,
    truncated_turn: str = "end",
    mask_truncated_turns: bool = False,
    merged_first_turn: bool = False,
    on_step: Any = None,
    oracle_prefix: int = 0,
) -> RolloutResult:
    """Play one episode per row with the model and return their tokens and outcomes.

    Each episode opens as in AgentGym (instruction, acknowledgement, first observation) or, with
    ``merged_first_turn``, with one user turn holding the instruction and the first observation.
    ``max_turns``: one budget, or one per row. A reset that fails raises ``RuntimeError``.
    ``on_step(episode, observation, reward, ended)`` is called after every env step (e.g. ``RolloutProgress``).
    ``oracle_prefix``: each episode starts after the oracle's first k actions, shown as the conversation so far
    (prompt tokens: not trained on) and not counted in ``max_turns`` (``agentgym_envs/core/oracle_prefix.py``).
    """
    agent = ModelAgent(generator, encoder, max_turn_tokens=max_turn_tokens, max_context_tokens=max_context_tokens,
                       truncated_turn=truncated_turn, mask_truncated_turns=mask_truncated_turns, name="policy")
    prefilled_before = getattr(generator, "prefilled_tokens", None)
    try:
        trajectories, stats = play_batch(episode_starts(rows, max_turns, oracle_prefix), agent, env_pool,
                                         executor=executor,
                                         agentgym_order=not merged_first_turn, on_step=on_step)
    except EpisodeError as error:
        raise RuntimeError(f"rollout failed: {error}") from error
    finally:
        agent.close()
    prefilled = None if prefilled_before is None else generator.prefilled_tokens - prefilled_before
    return RolloutResult(**vars(stats), trajectories=trajectories, prefilled_tokens=prefilled)


def append_trajectories(result: RolloutResult, output_dir: str, rank: int, step: int, mode: str) -> None:
    """Append a rollout's episodes to the run's trajectory log, as records of ``step`` and ``mode``: each process
    to its own file (no gather of whole conversations across ranks)."""
    name = TRAJECTORIES_FILE if rank == 0 else TRAJECTORIES_FILE.replace(".jsonl", f".rank{rank}.jsonl")
    TrajectoryLog(os.path.join(output_dir, name)).append(
        t.to_record(step=step, mode=mode) for t in result.trajectories
    )
