"""Reverse curriculum from the oracle's demonstrations (R³, Xi et al. 2024): the k of oracle-prefix starts.

With ``AgentGRPOConfig.oracle_prefix_schedule`` set, every training episode starts from the state the env's
oracle reaches after its first ``k`` actions (``agentgym_envs/core/oracle_prefix.py``: the replayed turns are
the conversation so far, prompt tokens, never trained on; they do not count against the turn budget, so the
new turns get the budget of the turn schedule; ``k`` is clamped per item so that at least one action remains).
``k`` moves from late to early, e.g. 2 -> 1 -> 0:

* **by steps**: ``"0:2,10:1,20:0"`` = ``k=2`` for the first 10 optimizer steps, 1 for the next 10, then 0.
  A stage's step is the number of optimizer steps finished before it, as in the turn schedule;
* **by measured success** as well, with ``oracle_prefix_success=0.6``: a stage also ends early once the success
  of the last ``oracle_prefix_window`` training episodes played at it (every one: dynamic sampling's refills
  too, not only the kept groups, whose outcomes are mixed by design) reaches the threshold; the steps of the
  schedule are then the latest starts of its stages (write large ones to move by success alone).

Every episode of a step has the same ``k`` (so the episodes of a GRPO group share their start); evaluations
always start from the beginning (``k=0``). Logged every step: ``curriculum/oracle_prefix_k`` (the scheduled
``k``) and ``agent/success_k{j}`` (the success of the step's episodes that replayed ``j`` actions: ``j`` is
below ``k`` for items whose solution is that short). The success-moved stage and its window are saved with
each checkpoint (``oracle_prefix.json``) and restored on resume.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from agentgym_trl.curriculum import ScheduleError, check_stage_steps, parse_stage_pairs
from agentgym_trl.metrics import ORACLE_PREFIX_K, SUCCESS_AT_PREFIX

logger = logging.getLogger(__name__)

STATE_FILE = "oracle_prefix.json"


@dataclass(frozen=True)
class PrefixSchedule:
    """Stages ``(first_step, k)``: starts at step 0, steps strictly increase, ``k`` never increases (late to early)."""

    stages: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if not self.stages:
            raise ScheduleError("an oracle prefix schedule needs at least one stage")
        steps = [s for s, _ in self.stages]
        ks = [k for _, k in self.stages]
        check_stage_steps(steps, "oracle prefix schedule")
        if any(k < 0 for k in ks):
            raise ScheduleError(f"oracle prefix lengths must be at least 0, got {ks}")
        if any(b > a for a, b in zip(ks, ks[1:])):
            raise ScheduleError(f"oracle prefix lengths must not increase (a reverse curriculum starts late and moves "
                                f"to the start), got {ks}")

    @classmethod
    def parse(cls, spec: str | Sequence[Sequence[int]]) -> PrefixSchedule:
        """``"0:2,10:1,20:0"`` (the command-line form) or a list of ``(step, k)`` pairs."""
        return cls(parse_stage_pairs(spec, "oracle prefix schedule", "step:k", "0:2,10:1,20:0"))

    def stage_index(self, step: int) -> int:
        """The index of the stage in force at optimizer step ``step`` (by steps alone)."""
        return bisect.bisect_right([s for s, _ in self.stages], max(int(step), 0)) - 1

    def __str__(self) -> str:
        return ",".join(f"{step}:{k}" for step, k in self.stages)


class OraclePrefixCurriculum(TrainerCallback):
    """Sets the oracle prefix ``k`` of each training step and logs it with the success per replayed ``k``.

    Args:
        schedule: the stages.
        success_threshold: move to the next stage once the rolling success at the current one reaches this
            (None: by steps alone).
        window: how many of the latest episodes of the current stage the rolling success is taken over (it moves
            only once it has that many).
    """

    def __init__(self, schedule: PrefixSchedule, success_threshold: float | None = None, window: int = 32):
        if success_threshold is not None and not 0.0 < success_threshold <= 1.0:
            raise ValueError(f"oracle_prefix_success must be in (0, 1], got {success_threshold}")
        if window < 1:
            raise ValueError(f"oracle_prefix_window must be at least 1, got {window}")
        self.schedule = schedule
        self.success_threshold = success_threshold
        self.window = window
        self.moved_to = 0  # the stage measured success has reached (0: none moved early)
        self.recent: list[float] = []  # successes of the current stage's latest episodes
        self.stage = 0
        self.k = schedule.stages[0][1]

    @classmethod
    def from_config(cls, args: Any) -> OraclePrefixCurriculum | None:
        """The curriculum of an ``AgentGRPOConfig`` (None without ``oracle_prefix_schedule``)."""
        if not getattr(args, "oracle_prefix_schedule", None):
            return None
        return cls(PrefixSchedule.parse(args.oracle_prefix_schedule), args.oracle_prefix_success,
                   args.oracle_prefix_window)

    def _apply(self, step: int, announce: bool = False) -> None:
        stage = max(self.schedule.stage_index(step), self.moved_to)
        if stage != self.stage:
            self.recent = []
        if announce or stage != self.stage:
            logger.info("oracle prefix: episodes start after %d oracle actions from step %d (stage %d of %d, "
                        "schedule %s)", self.schedule.stages[stage][1], step, stage + 1, len(self.schedule.stages),
                        self.schedule)
        self.stage, self.k = stage, self.schedule.stages[stage][1]

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        """Set the ``k`` of the starting step (a resumed run lands in its stage)."""
        self._apply(state.global_step, announce=True)

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        """Set the ``k`` of the step about to roll out."""
        self._apply(state.global_step)

    def observe(self, stats: Sequence[dict[str, Any]]) -> dict[str, float]:
        """Take one training rollout's episodes (``metrics.episode_stats`` of every process, so every rank moves
        alike) and return the step's metrics; with a success threshold, move to the next stage when it is met."""
        by_k: dict[int, list[float]] = defaultdict(list)
        for s in stats:
            by_k[int(s.get("prefix", 0))].append(float(s["success"]))
        metrics = {ORACLE_PREFIX_K: float(self.k)}
        for k, successes in sorted(by_k.items()):
            metrics[SUCCESS_AT_PREFIX.format(k)] = sum(successes) / len(successes)
        if self.success_threshold is not None and self.stage + 1 < len(self.schedule.stages):
            self.recent = (self.recent + [float(s["success"]) for s in stats])[-self.window:]
            if len(self.recent) >= self.window and sum(self.recent) / len(self.recent) >= self.success_threshold:
                logger.info("oracle prefix: success %.2f over the last %d episodes at k=%d reached %.2f; the next "
                            "step moves to k=%d", sum(self.recent) / len(self.recent), len(self.recent), self.k,
                            self.success_threshold, self.schedule.stages[self.stage + 1][1])
                self.moved_to = self.stage + 1
        return metrics

    def save(self, folder: str) -> None:
        """Write the success-moved stage and the rolling window into a checkpoint folder."""
        with open(os.path.join(folder, STATE_FILE), "w", encoding="utf-8") as handle:
            json.dump({"schedule": str(self.schedule), "stage": self.stage, "moved_to": self.moved_to,
                       "recent": self.recent}, handle)

    def load(self, folder: str) -> bool:
        """Restore what ``save`` wrote (False when the folder holds nothing of it, or when it was saved under another
        schedule: its stage is an index into that schedule's stages, so this run's schedule applies by steps alone,
        with a warning naming both)."""
        path = os.path.join(folder, STATE_FILE)
        if not os.path.exists(path):
            return False
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
        if "schedule" in saved and str(saved["schedule"]) != str(self.schedule):
            logger.warning("oracle prefix: %s was saved under the schedule %s, this run's is %s; its stage (%s, "
                           "k=%s there) is not carried over: k follows this run's schedule by steps from the resumed "
                           "step", path, saved["schedule"], self.schedule, saved.get("stage"),
                           _k_of(saved["schedule"], saved.get("stage")))
            return False
        self.moved_to = min(int(saved.get("moved_to", 0)), len(self.schedule.stages) - 1)
        self.stage = min(int(saved.get("stage", 0)), len(self.schedule.stages) - 1)
        self.recent = [float(v) for v in saved.get("recent", [])]
        self.k = self.schedule.stages[self.stage][1]
        return True


def _k_of(schedule: Any, stage: Any) -> str:
    """The ``k`` of stage ``stage`` of a saved schedule's text, for the resume warning ("?" if unreadable)."""
    try:
        return str(PrefixSchedule.parse(str(schedule)).stages[int(stage)][1])
    except (ScheduleError, IndexError, TypeError, ValueError):
        return "?"
