"""Turn-budget schedules and the callback that applies them (no model needed)."""

from __future__ import annotations

import json
import logging

import pytest
from transformers import TrainerControl, TrainerState, TrainingArguments

from agentgym_trl.curriculum import TRUNCATED_METRIC, ScheduleError, TurnBudgetCallback, TurnSchedule
from agentgym_trl.metrics import MetricsFileCallback
from agentgym_trl.reverse_curriculum import PrefixSchedule


def test_paper_rounds_switch_every_100_steps() -> None:
    schedule = TurnSchedule.from_rounds([10, 20, 30], every=100)
    assert schedule.stages == ((0, 10), (100, 20), (200, 30))
    assert [schedule.at(s) for s in (0, 99, 100, 199, 200, 10_000)] == [10, 10, 20, 20, 30, 30]
    assert schedule.max_turns == 30 and str(schedule) == "0:10,100:20,200:30"


def test_parse_and_fixed() -> None:
    assert TurnSchedule.parse("0:5, 80:8 ,160:15").stages == ((0, 5), (80, 8), (160, 15))
    assert TurnSchedule.parse([(0, 6), (100, 13)]).at(150) == 13
    assert TurnSchedule.fixed(7).at(123) == 7


@pytest.mark.parametrize(
    "spec, message",
    [
        ("0:10,100:20,100:30", "strictly increase"),
        ("0:10,200:20,100:30", "strictly increase"),
        ("0:20,100:10", "must not decrease"),
        ("10:5,100:10", "start at step 0"),
        ("0:10,abc", "step:max_turns"),
        ("0:0", "at least 1 turn"),
        ("", "at least one stage"),
    ],
)
def test_bad_schedules_fail_clearly(spec: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        TurnSchedule.parse(spec)


@pytest.mark.parametrize("stages", [[(0, 2.9)], [(0.5, 2)], [(0, True)], [(0, None)], [(0, float("inf"))],
                                    [(0, "2.5")]])
def test_list_schedules_refuse_what_is_not_a_whole_number(stages) -> None:
    """``(0, 2.9)`` was the stage ``0:2`` (``int`` truncated it); a whole number written as 2.0 or "2" still reads
    (issue 61, item 17)."""
    with pytest.raises(ScheduleError, match="whole numbers"):
        TurnSchedule.parse(stages)
    with pytest.raises(ScheduleError, match="whole numbers"):
        PrefixSchedule.parse(stages)


def test_whole_numbers_in_any_form_read_and_rounds_refuse_fractions() -> None:
    assert TurnSchedule.parse([(0, 2.0), ("10", 3)]).stages == ((0, 2), (10, 3))
    with pytest.raises(ScheduleError, match=r"got 2.9 \(it would be cut to 2\)"):
        TurnSchedule.parse([(0, 2.9)])
    with pytest.raises(ScheduleError, match="whole numbers"):
        TurnSchedule.from_rounds([10, 20.5], every=100)
    with pytest.raises(ScheduleError, match="whole numbers"):
        TurnSchedule.from_rounds([10, 20], every=2.5)
    with pytest.raises(ScheduleError, match="whole numbers"):
        TurnSchedule.fixed(7.5)


def test_rounds_need_positive_every() -> None:
    with pytest.raises(ScheduleError, match="every"):
        TurnSchedule.from_rounds([10, 20], every=0)


def _state(step: int) -> TrainerState:
    state = TrainerState()
    state.global_step = step
    return state


def test_callback_recomputes_the_stage_from_the_global_step(tmp_path) -> None:
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    callback = TurnBudgetCallback(TurnSchedule.from_rounds([10, 20, 30], every=100))
    assert callback.budget == 10
    callback.on_train_begin(args, _state(150), TrainerControl())  # resumed from checkpoint-150
    assert (callback.stage, callback.budget) == (1, 20)
    for step, budget in ((150, 20), (199, 20), (200, 30)):
        callback.on_step_begin(args, _state(step), TrainerControl())
        assert callback.budget == budget


def test_callback_warns_loudly_on_truncation_and_writes_json_lines(tmp_path, caplog) -> None:
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    path = tmp_path / "metrics.jsonl"
    callback = TurnBudgetCallback(TurnSchedule.fixed(5), truncation_warning_threshold=0.2)
    sink = MetricsFileCallback(path)  # the JSON-lines copy of the logs, a callback of its own (when asked)
    with caplog.at_level(logging.WARNING, logger="agentgym_trl.curriculum"):
        for state, logs in ((_state(1), {TRUNCATED_METRIC: 0.1, "loss": 0.5}),
                            (_state(2), {TRUNCATED_METRIC: 0.6, "agent/truncated_turn_tokens_frac": 0.6})):
            callback.on_log(args, state, TrainerControl(), logs=logs)
            sink.on_log(args, state, TrainerControl(), logs=logs)
            if state.global_step == 1:
                assert not caplog.records
    assert callback.truncation_warnings == 1
    assert "60% of the episodes at step 2 hit a token limit" in caplog.text and "max_turn_tokens" in caplog.text
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2] and lines[1][TRUNCATED_METRIC] == 0.6


def test_a_stage_starts_after_its_step_count_of_finished_steps() -> None:
    """docs/training.md: the main job's ``0:3,5:4`` gives logged steps 1-5 three turns and steps 6-10 four (a step's
    budget is read at ``global_step`` = the steps finished before it; the logs number that step global_step + 1)."""
    schedule = TurnSchedule.parse("0:3,5:4")
    budgets = {global_step + 1: schedule.at(global_step) for global_step in range(10)}
    assert [logged for logged, turns in budgets.items() if turns == 4] == [6, 7, 8, 9, 10]
