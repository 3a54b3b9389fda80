"""The turn-budget curriculum (ScalingInter-RL): how many turns a rollout may use at each training step.

The paper raises the interaction horizon in stages, e.g. TextCraft ``[10, 20, 30]`` turns switching
every 100 steps: short horizons first, so the policy learns to finish tasks before it may explore
long ones. A schedule here is a list of ``(first_step, max_turns)`` stages, built from

* a fixed budget: ``TurnSchedule.fixed(10)``;
* explicit stages: ``TurnSchedule.parse("0:10,100:20,200:30")`` or ``[(0, 10), (100, 20), (200, 30)]``;
* rounds: ``TurnSchedule.from_rounds([10, 20, 30], every=100)``.

``TurnBudgetCallback`` applies it: the budget is recomputed from ``state.global_step`` at the start
of training and of every step, so resuming from a checkpoint lands in the right stage. It also
watches the logged rollout metrics and warns loudly when many episodes are cut by a token limit
(silent truncation is the commonest way multi-turn GRPO learns nothing).
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from agentgym_trl.metrics import CUT_TURN_FRAC, TRUNCATED_CONTEXT_FRAC, TRUNCATED_METRIC, TRUNCATED_TURN_TOKENS_FRAC

logger = logging.getLogger(__name__)



class ScheduleError(ValueError):
    """A turn schedule that makes no sense (the message says what to fix)."""


def parse_stage_pairs(spec: str | Sequence[Sequence[int]], what: str, form: str,
                      example: str) -> tuple[tuple[int, int], ...]:
    """``(step, value)`` pairs from ``"0:10,100:20"`` (the command-line form) or a list of pairs.

    Args:
        spec: the schedule as written.
        what: its name in errors (``"turn schedule"``).
        form: one stage as the error shows it (``"step:max_turns"``).
        example: a whole schedule as the error shows it.
    """
    if isinstance(spec, str):
        pairs = []
        for part in spec.replace(";", ",").split(","):
            part = part.strip()
            if not part:
                continue
            try:
                step, value = part.split(":")
                pairs.append((int(step), int(value)))
            except ValueError:
                raise ScheduleError(
                    f"cannot read stage {part!r} of the {what} {spec!r}; write '{form},...', e.g. '{example}'"
                ) from None
        return tuple(pairs)
    try:
        return tuple((whole_number(step, what), whole_number(value, what)) for step, value in spec)
    except ScheduleError:
        raise
    except (TypeError, ValueError):
        raise ScheduleError(f"a {what} is a list of ({form.replace(':', ', ')}) pairs, got {spec!r}") from None


def whole_number(value: Any, what: str) -> int:
    """``value`` as an int when it is one (``7``, ``7.0``, ``"7"``); anything else (``2.9``, ``True``, ``None``) is a
    ``ScheduleError``: ``int()`` alone would truncate, and ``(0, 2.9)`` became the stage ``0:2`` silently."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ScheduleError(f"the {what} takes whole numbers, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        cut = f" (it would be cut to {int(value)})" if math.isfinite(value) else ""
        raise ScheduleError(f"the {what} takes whole numbers, got {value!r}{cut}")
    try:
        return int(value)
    except (ValueError, OverflowError):  # "2.9", "x", inf
        raise ScheduleError(f"the {what} takes whole numbers, got {value!r}") from None


def check_stage_steps(steps: Sequence[int], name: str, stages: Sequence[tuple[int, int]] | None = None) -> None:
    """A schedule's first steps: the first stage at step 0, then strictly increasing (``name``, e.g. "turn schedule",
    says whose; ``stages``, when given, are quoted in the step-0 error)."""
    if steps[0] != 0:
        article = "an" if name[0] in "aeiou" else "a"
        quoted = f" (stages {list(stages)})" if stages is not None else ""
        raise ScheduleError(f"{article} {name} must start at step 0, got {steps[0]}{quoted}")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ScheduleError(f"{name} steps must strictly increase, got {steps}")


@dataclass(frozen=True)
class TurnSchedule:
    """Stages ``(first_step, max_turns)``: starts at step 0, steps strictly increase, budgets never decrease."""

    stages: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if not self.stages:
            raise ScheduleError("a turn schedule needs at least one stage")
        steps = [s for s, _ in self.stages]
        turns = [t for _, t in self.stages]
        check_stage_steps(steps, "turn schedule", self.stages)
        if any(t < 1 for t in turns):
            raise ScheduleError(f"every stage needs at least 1 turn, got {turns}")
        if any(b < a for a, b in zip(turns, turns[1:])):
            raise ScheduleError(
                "turn budgets must not decrease from one stage to the next (ScalingInter grows the horizon), "
                f"got {turns}"
            )

    # ---- constructors --------------------------------------------------------------------------
    @classmethod
    def fixed(cls, max_turns: int) -> TurnSchedule:
        """One budget at every step: no curriculum, the schedule a plain ``--max_turns`` gives.

        Args:
            max_turns: the turn budget of every rollout.

        Returns:
            A single-stage schedule.
        """
        return cls(((0, whole_number(max_turns, "turn budget")),))

    @classmethod
    def from_rounds(cls, rounds: Sequence[int], every: int) -> TurnSchedule:
        """``rounds[k]`` turns from step ``k * every`` on (the paper's ``[10, 20, 30]`` every 100 steps)."""
        if every is None or whole_number(every, "round length (every)") < 1:
            raise ScheduleError(f"rounds need a positive 'every' (steps per round), got {every!r}")
        every = whole_number(every, "round length (every)")
        return cls(tuple((k * every, whole_number(turns, "turn schedule")) for k, turns in enumerate(rounds)))

    @classmethod
    def parse(cls, spec: str | Sequence[Sequence[int]]) -> TurnSchedule:
        """``"0:10,100:20"`` (the command-line form) or a list of ``(step, max_turns)`` pairs."""
        return cls(parse_stage_pairs(spec, "turn schedule", "step:max_turns", "0:10,100:20,200:30"))

    # ---- queries -------------------------------------------------------------------------------
    def stage_index(self, step: int) -> int:
        """Which stage is in force at a step, so the callback can tell when a new stage begins.

        Args:
            step: the global step.

        Returns:
            The index into ``stages`` of the last stage starting at or before ``step``.
        """
        return bisect.bisect_right([s for s, _ in self.stages], int(step)) - 1

    def at(self, step: int) -> int:
        """The budget in force during the optimizer step that starts at ``global_step == step``."""
        return self.stages[self.stage_index(max(int(step), 0))][1]

    @property
    def max_turns(self) -> int:
        """The last (largest) budget: the horizon the trained policy ends with, which held-out evaluations play."""
        return self.stages[-1][1]

    def __str__(self) -> str:
        return ",".join(f"{step}:{turns}" for step, turns in self.stages)


class TurnBudgetCallback(TrainerCallback):
    """Sets the rollout's turn budget from the global step; warns on heavy truncation."""

    def __init__(self, schedule: TurnSchedule, truncation_warning_threshold: float = 0.2):
        self.schedule = schedule
        self.truncation_warning_threshold = truncation_warning_threshold
        self.budget = schedule.at(0)
        self.stage = 0
        self.truncation_warnings = 0

    def _apply(self, step: int, announce: bool = False) -> None:
        stage = self.schedule.stage_index(step)
        budget = self.schedule.at(step)
        if announce or stage != self.stage:
            logger.info(
                "turn budget: %d turns from step %d (stage %d of %d, schedule %s)",
                budget,
                step,
                stage + 1,
                len(self.schedule.stages),
                self.schedule,
            )
        self.stage, self.budget = stage, budget

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        """Set and announce the budget of the starting step (a resumed run lands in its stage)."""
        self._apply(state.global_step, announce=True)

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        """Set the budget of the step about to roll out, logging a stage change."""
        self._apply(state.global_step)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        """Warn loudly (main process) when the logged share of token-limit-cut episodes passes the threshold."""
        logs = logs or {}
        truncated = logs.get(TRUNCATED_METRIC)
        if truncated is not None and truncated > self.truncation_warning_threshold and state.is_world_process_zero:
            self.truncation_warnings += 1
            logger.warning(
                "\n%s\n!! %.0f%% of the episodes at step %d hit a token limit: %s of all model turns were cut at "
                "--max_turn_tokens.\n!! Episodes that a limit ended: %s by the per-turn limit, %s by the context "
                "limit; the others went on after the cut turn.\n"
                "!! Cut turns carry no complete action, so those episodes rarely succeed and the policy mostly learns\n"
                "!! from truncation, not from the task. Raise --max_turn_tokens / --max_context_tokens, or shorten\n"
                "!! the prompts.\n%s",
                "!" * 100,
                100 * truncated,
                state.global_step,
                _pct(logs.get(CUT_TURN_FRAC)),
                _pct(logs.get(TRUNCATED_TURN_TOKENS_FRAC)),
                _pct(logs.get(TRUNCATED_CONTEXT_FRAC)),
                "!" * 100,
            )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"
