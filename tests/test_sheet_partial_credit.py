"""Sheet's edit tasks: our whole-workbook 0/1 rule by default, AgentGym's partial credit as ``partial_credit=True``.

``upstream_match`` re-writes, from reading WooooDyy/AgentGym's ``Toolusage/toolusage/environment/sheet_env.py``,
how its Sheet server scores an edit task: ``get_match_score(sheet1, sheet2)`` counts equal cells over
``min(len(sheet1), len(sheet2))`` rows and ``min(len(sheet1[0]), len(sheet2[0]))`` columns (0 when no sheet is
open: ``get_all_values`` then answers "Please open a sheet before operating it"), and ``update`` keeps the best
score of the episode (``self.reward = max(self.reward, reward)``). ``step`` calls ``update`` with the open sheet's
values after every step whose call parsed and whose answer does not contain "Invalid", and ends the episode only
when the action contains "finish" (any case).

Cells are compared in our canonical form on both sides (the tools and sheets are ours; upstream compares the
strings Google Sheets shows).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs  # noqa: F401  (registers the ids)
from agentgym_envs.core.tasks import get_task
from agentgym_envs.tools.sheet import trimmed

ENV_ID = "AgentGym/Sheet-v0"
NOT_OPEN = "Please open a sheet before operating it"


def upstream_match(sheet1: Any, sheet2: Any) -> float:
    """``get_match_score`` as upstream writes it."""
    if sheet1 == NOT_OPEN:
        return 0.0
    min_rows = min(len(sheet1), len(sheet2))
    min_cols = min(len(sheet1[0]) if sheet1 else 0, len(sheet2[0]) if sheet2 else 0)
    matching = total = 0
    for i in range(min_rows):
        for j in range(min_cols):
            total += 1
            if sheet1[i][j] == sheet2[i][j]:
                matching += 1
    return matching / total if total else 0


def open_values(env: gym.Env) -> Any:
    service = env.unwrapped.service
    return NOT_OPEN if service.open_id is None else trimmed(service.grid_of(service.open_name))


def edit_items() -> list[int]:
    """The edit (state) tasks among the test split and the first 60 train items."""
    task = get_task(ENV_ID)
    env = gym.make(ENV_ID).unwrapped
    items = []
    for item in [*task.split("test"), *task.split("train")[:60]]:
        env.reset(options={"item_id": item})
        if env.current.changes_state:
            items.append(item)
    env.close()
    return items


def call(tool: str, arguments: str = "{}") -> str:
    return f"Thought: go on.\n\nAction: {tool} with Action Input: {arguments}"


def test_partial_credit_scores_every_step_as_agentgyms_sheet_server() -> None:
    """The oracle's calls, an open-and-finish without edits, and seeded random calls (unknown tools among them),
    each ended by ``finish``: at every step our reward so far equals upstream's ``update`` and the episode ends
    only on "finish"."""
    items = edit_items()
    assert len(items) == 64
    env = gym.make(ENV_ID, partial_credit=True, max_episode_steps=40)
    rng = np.random.default_rng(0)
    steps = 0
    for item in items:
        for policy in ("oracle", "no_edit", "random"):
            env.reset(options={"item_id": item})
            base = env.unwrapped
            gold = base.current.target[0][1]
            best, total, right = 0.0, 0.0, False
            script = [call("open_sheet", repr({"sheet_name": base.current.target[0][0]})), call("finish")]
            for turn in range(30):
                if policy == "oracle":
                    action = base.oracle_action()
                elif policy == "no_edit":
                    action = script[min(turn, 1)]
                else:
                    action = base.random_action(rng) if turn < 8 else call("finish")
                if rng.random() < 0.1 and policy == "random":
                    action = call("no_such_tool")
                observation, reward, terminated, truncated, info = env.step(action)
                total += reward
                steps += 1
                right = right or trimmed_state_right(env)
                if "Invalid" not in observation:
                    best = max(best, upstream_match(open_values(env), gold))
                assert total == pytest.approx(best), (item, policy, turn, action)
                assert terminated == ("finish" in action.lower()), (item, policy, action)
                if terminated or truncated:
                    break
            assert info["success"] == right, (item, policy)
            if policy == "oracle":  # the expert finishes once the data is right
                assert right and terminated and total == 1.0, (item, total)
    env.close()
    assert steps > 500


def trimmed_state_right(env: gym.Env) -> bool:
    base = env.unwrapped
    return base.service.state() == base.current.target


def test_the_upstream_bug_an_edit_task_done_by_doing_nothing() -> None:
    """AgentGym's rule compares only the cells both sheets have, so a task that adds cells is scored 1 before any
    edit: "Add a new row at the end of the sheet ..." (item 40003), opened and finished, scores 1 with
    ``partial_credit=True``; our default scores it 0. Over the 64 edit tasks, doing nothing scores a mean 0.823
    under upstream's rule (1 on 32)."""
    scores = {}
    for partial in (True, False):
        env = gym.make(ENV_ID, partial_credit=partial)
        env.reset(options={"item_id": 40003})
        assert env.unwrapped.current.question.startswith("Add a new row at the end of the sheet")
        opened = env.step(call("open_sheet", repr({"sheet_name": env.unwrapped.current.target[0][0]})))[1]
        _, reward, terminated, _, info = env.step(call("finish"))
        assert terminated and not info["success"]
        scores[partial] = opened + reward
        env.close()
    assert scores == {True: 1.0, False: 0.0}

    env = gym.make(ENV_ID, partial_credit=True)
    no_edit = []
    for item in edit_items():
        env.reset(options={"item_id": item})
        opened = env.step(call("open_sheet", repr({"sheet_name": env.unwrapped.current.target[0][0]})))[1]
        no_edit.append(opened + env.step(call("finish"))[1])
    env.close()
    assert round(float(np.mean(no_edit)), 3) == 0.823 and sum(score == 1.0 for score in no_edit) == 32


def test_deleting_the_data_scores_almost_1_under_partial_credit_and_success_stays_the_data() -> None:
    """The other face of the overlap: a sheet cut to its header row overlaps the gold in the header alone, so
    deleting every data row scores 1 on 56 of the 64 edit tasks (mean 0.997) under AgentGym's rule. None of it is
    a success, and an unreadable call after an overlap of 1 does not make one either."""
    env = gym.make(ENV_ID, partial_credit=True)
    scores, successes = [], 0
    for item in edit_items():
        env.reset(options={"item_id": item})
        name = env.unwrapped.current.target[0][0]
        total = env.step(call("open_sheet", repr({"sheet_name": name})))[1]
        rows = len(env.unwrapped.service.grid_of(name))
        delete = {"dimension": "row", "index_list": list(range(2, rows + 1))}
        total += env.step(call("delete_batch_data", repr(delete)))[1]
        _, reward, terminated, _, info = env.step(call("finish"))
        scores.append(total + reward)
        successes += info["success"]
    assert round(float(np.mean(scores)), 3) == 0.997 and sum(score == 1.0 for score in scores) == 56 and successes == 0

    env.reset(options={"item_id": 40003})
    env.step(call("open_sheet", repr({"sheet_name": env.unwrapped.current.target[0][0]})))
    _, _, terminated, _, info = env.step("Action: update_cell with Action Input: {'position': ")
    assert not terminated and not info["success"] and not info["valid_action"]
    env.close()


def test_partial_credit_needs_agentgyms_rules() -> None:
    """With ``detailed_instruction=True`` (our rules) the option has no effect: edits are graded 0/1 at once."""
    env = gym.make(ENV_ID, partial_credit=True, detailed_instruction=True)
    assert not env.unwrapped.partial_credit
    env.close()
