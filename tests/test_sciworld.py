"""ScienceWorld family: gold replays, the JVM's lifecycle (reuse, crash, hang, close), bad input.

The conformance checks every id gets are in test_registry.py; the full 200-item gold replay and
the 500-episode memory run are in benchmarks/bench_sciworld.py.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("scienceworld", reason="needs pip install 'agentgym-rl[sciworld]'")

import agentgym_envs  # noqa: E402,F401
from agentgym_envs.core.tasks import load_splits  # noqa: E402
from agentgym_envs.sciworld.catalog import TASK_TYPES, TEST_SIZES, decode, item_id, task_types  # noqa: E402
from agentgym_envs.sciworld.env import stored_gold  # noqa: E402
from agentgym_envs.sciworld.jvm import JavaNotFound, JvmConfig, ScienceWorldJvm  # noqa: E402

FAMILY_ID = "AgentGym/SciWorld-v0"
SUBTASK_IDS = [f"AgentGym/SciWorld-{name}-v0" for name in TEST_SIZES]
REPLAYS_PER_SUBTASK = {"Measure": 7, "TestConductivity": 7, "Find": 7, "ChemMix": 5, "Lifespan": 6}


def replay_gold(env: gym.Env, item: int) -> tuple[bool, float, list[float], dict]:
    """Play the oracle (the gold path) on ``item`` through the text interface; (success, score, rewards, last info)."""
    obs, info = env.reset(options={"item_id": item})
    rewards: list[float] = []
    terminated = truncated = False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        rewards.append(reward)
    return bool(info["success"]), float(info["score"]), rewards, info


def fitting_test_items(subtask: str) -> list[int]:
    """Test items whose gold path fits the 30-turn cap (the unfiltered split also has longer ones)."""
    return [item for item in load_splits("sciworld")[subtask]["test"] if len(stored_gold()[item]) <= 30]


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a killed child not yet reaped is a zombie: not running
        return handle.read().split(") ")[-1][0] != "Z"


@pytest.fixture(scope="module")
def family_env():
    env = gym.make(FAMILY_ID)
    yield env
    env.close()


def test_item_ids_and_split_sizes() -> None:
    for task in TASK_TYPES:
        assert decode(item_id(task, 17)) == (task, 17)
    with pytest.raises(KeyError):
        decode(99_000)
    splits = load_splits("sciworld")
    assert {name: len(s["test"]) for name, s in splits.items()} == TEST_SIZES
    assert sum(TEST_SIZES.values()) == 200
    for subtask, ids in splits.items():
        assert not set(ids["test"]) & set(ids["train"])
        covered = {task.name for task in task_types(subtask)}
        assert {decode(i)[0].name for i in ids["test"]} == covered, f"{subtask}: test items miss a task type"
        assert all(str(i) in {str(k) for k in stored_gold()} for i in ids["test"])


def test_splits_follow_scienceworld_variation_sets() -> None:
    jvm = ScienceWorldJvm()
    try:
        splits = load_splits("sciworld")
        for task in TASK_TYPES:
            sets = jvm.variations(task.name)
            ids = splits[task.subtask]
            test = {decode(i)[1] for i in ids["test"] if decode(i)[0] == task}
            train = {decode(i)[1] for i in ids["train"] if decode(i)[0] == task}
            assert test <= set(sets["test"]), f"{task.name}: test items outside ScienceWorld's test variations"
            assert train == set(sets["train"]), f"{task.name}: train items are not ScienceWorld's train variations"
    finally:
        jvm.close()


def test_gold_replay_succeeds_on_test_items_of_every_subtask(family_env: gym.Env) -> None:
    tried = {}
    for subtask, count in REPLAYS_PER_SUBTASK.items():
        items = fitting_test_items(subtask)
        picks = [items[int(i)] for i in np.linspace(0, len(items) - 1, count)]
        for item in picks:
            success, score, rewards, info = replay_gold(family_env, item)
            assert success and score == 100, f"{subtask} item {item}: gold replay ended with score {score}"
            assert info["subtask"] == subtask and info["turn"] <= 30
            assert sum(rewards) == 100, "rewards are the score's increases in points: they add up to the final score"
            tried[item] = subtask
    assert len(tried) >= 30 and set(tried.values()) == set(TEST_SIZES)


def test_test_split_is_unfiltered_like_agentgyms() -> None:
    """Test items are drawn from all of ScienceWorld's test variations, long ones included."""
    splits = load_splits("sciworld")
    test_items = [item for sub in splits.values() for item in sub["test"]]
    assert len(test_items) == 200 and set(stored_gold()) == set(test_items)
    assert any(len(stored_gold()[item]) > 30 for item in test_items)  # the cap does not filter the set


def test_resets_reuse_one_jvm(family_env: gym.Env) -> None:
    base = family_env.unwrapped
    family_env.reset(options={"split": "test", "index": 0})
    pid, starts = base.jvm.pid, base.jvm.starts
    for index in (5, 60, 150, 199):
        family_env.reset(options={"split": "test", "index": index})
        family_env.step("look around")
    assert base.jvm.pid == pid and base.jvm.starts == starts


def test_observation_reward_and_info(family_env: gym.Env) -> None:
    obs, info = family_env.reset(options={"item_id": load_splits("sciworld")["Find"]["test"][0]})
    assert obs.startswith("Your task is to find") and "This room is called" in obs
    assert info["sciworld_task"] in {"find-living-thing", "find-plant", "find-animal"}
    assert "available_actions" not in info  # computed only when asked: that is most of a step's cost
    assert "Action:" in info["instruction"] and "focus on OBJ" in info["instruction"]
    obs, reward, terminated, truncated, info = family_env.step("Thought: let me look.\nAction: look around")
    assert info["valid_action"] and reward == 0.0 and not terminated and "This room is called" in obs


def test_bad_input_gets_feedback(family_env: gym.Env) -> None:
    family_env.reset(options={"item_id": load_splits("sciworld")["Find"]["test"][0]})
    # by default every command reaches the simulator, as on AgentGym's server, and gets its own words
    unknown = "No known action matches that input."
    for response in ["", "look around", "Action: " + "open " * 80, "Action: 拿起温度计", "Action: opne door",
                     "Action: Look around.", "Action: check valid actions"]:
        obs, reward, terminated, truncated, info = family_env.step(response)
        assert obs == unknown, f"{response[:30]!r} -> {obs[:200]!r}"
        assert info["valid_action"] is False and reward == 0.0 and not terminated and not truncated
    assert family_env.step("Action: reset task")[0] == "You reset the goal progress and focus."
    ours = gym.make(FAMILY_ID, extra_feedback=True)
    ours.reset(options={"item_id": load_splits("sciworld")["Find"]["test"][0]})
    cases = {"": "empty", "Action: " + "open " * 80: "characters long", "Action: 拿起温度计": "plain English",
             "Action: reset task": "not available"}
    for response, expected in cases.items():
        obs, reward, terminated, truncated, info = ours.step(response)
        assert expected in obs and info["valid_action"] is False and reward == 0.0, (response[:30], obs[:200])
    obs, _, _, _, info = ours.step("Action: check valid actions")
    lines = obs.splitlines()
    assert info["valid_action"] and lines[0] == "Valid actions:" and len(lines) > 5 and "reset task" not in lines
    for item in load_splits("sciworld")["Find"]["test"]:  # a start room with several doors
        obs, _ = family_env.reset(options={"item_id": item})
        if obs.count("A door to") >= 2:
            break
    ours.reset(options={"item_id": item})
    for env in (family_env, ours):
        obs, _, _, _, info = env.step("Action: open door")
        assert obs.startswith("Ambiguous request") and info["valid_action"]
    obs, _, _, _, info = family_env.step("Action: look around")  # AgentGym: the answer to the question
    assert obs.startswith("Unknown action.") and not info["valid_action"]
    obs, _, _, _, info = ours.step("Action: look around")  # extra_feedback: any other command cancels it
    assert "This room is called" in obs and info["valid_action"]
    ours.close()


def test_hostile_lone_surrogates_are_invalid_actions_and_the_jvm_lives(family_env: gym.Env) -> None:
    """#61 item 5: a lone surrogate killed the JVM session ("the JVM is unresponsive")."""
    family_env.reset(options={"item_id": fitting_test_items("Find")[0]})
    for action in ("Action: look at \ud800", "Action:\n\ud83d go forward"):
        obs, reward, terminated, truncated, info = family_env.step(action)
        assert info["valid_action"] is False and reward == 0 and not (terminated or truncated), obs
    obs, _, _, _, info = family_env.step("Action: look around")
    assert info["valid_action"] and "This room is called" in obs


def test_failing_the_task_ends_the_episode(family_env: gym.Env) -> None:
    """As in AgentGym, a failed task keeps the simulator's negative score: the outcome is -100."""
    family_env.reset(options={"item_id": load_splits("sciworld")["Find"]["test"][0]})
    obs, reward, terminated, truncated, info = family_env.step("Action: focus on chair")
    assert terminated and not info["success"] and info["score"] == -100 and reward == -100.0
    assert "failed" not in obs


def test_normalized_reward_is_the_score_in_hundredths() -> None:
    """``normalized_reward=True``: the 0-1 scale of the other families; the gold path's rewards sum to 1, a failure
    to -1, and ``info["score"]`` stays in points."""
    env = gym.make(FAMILY_ID, normalized_reward=True)
    item = load_splits("sciworld")["Find"]["test"][0]
    success, score, rewards, _ = replay_gold(env, item)
    assert success and score == 100 and sum(rewards) == pytest.approx(1.0) and max(rewards) <= 1.0
    env.reset(options={"item_id": item})
    _, reward, terminated, _, info = env.step("Action: focus on chair")
    assert terminated and reward == -1.0 and info["score"] == -100
    env.close()


def test_extra_feedback_and_nonnegative_reward_are_opt_in() -> None:
    env = gym.make(FAMILY_ID, extra_feedback=True, nonnegative_reward=True)
    _, info = env.reset(options={"item_id": load_splits("sciworld")["Find"]["test"][0]})
    assert "check valid actions" in info["instruction"]
    for response, expected in {"Action: opne door": "Did you mean: 'open ",
                               "Action: fly to the moon": "not a command ScienceWorld understands"}.items():
        obs, reward, _, _, info = env.step(response)
        assert expected in obs and not info["valid_action"] and reward == 0.0
    obs, reward, terminated, _, info = env.step("focus on chair")
    assert terminated and "failed" in obs and reward == 0.0 and info["score"] == -100
    env.close()


def test_oracle_plans_train_items_on_demand(family_env: gym.Env) -> None:
    item = load_splits("sciworld")["Lifespan"]["train"][0]
    assert item not in stored_gold()
    first = replay_gold(family_env, item)
    again = replay_gold(family_env, item)
    assert first[0] and first == again


def test_killed_jvm_ends_the_episode_and_the_next_reset_works(caplog: pytest.LogCaptureFixture) -> None:
    env = gym.make("AgentGym/SciWorld-Find-v0")
    try:
        base = env.unwrapped
        item = fitting_test_items("Find")[1]
        env.reset(options={"item_id": item})
        env.step(base.oracle_action())
        pid = base.jvm.pid
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        obs, reward, terminated, truncated, info = env.step(base.oracle_action())
        assert time.monotonic() - started < 10
        assert truncated and not info["valid_action"] and reward == 0.0
        assert "exited" in info["engine_error"] and "reset()" in obs
        obs, _, _, truncated, info = env.step("look around")  # still over, still no exception
        assert truncated and "engine_error" in info
        assert not is_running(pid)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "py4j tracebacks leaked into the logs"
        success, score, _, _ = replay_gold(env, item)
        assert success and base.jvm.starts == 2 and base.jvm.pid != pid
    finally:
        env.close()


def test_a_hanging_jvm_is_stopped_by_the_timeout() -> None:
    env = gym.make("AgentGym/SciWorld-Lifespan-v0", step_timeout=2.0)
    try:
        base = env.unwrapped
        item = base.task.split("test")[0]
        env.reset(options={"item_id": item})
        pid = base.jvm.pid
        os.kill(pid, signal.SIGSTOP)  # the JVM stops answering without dying
        started = time.monotonic()
        obs, reward, terminated, truncated, info = env.step("look around")
        assert time.monotonic() - started < 8
        assert truncated and "within 2 s" in info["engine_error"]
        assert not is_running(pid)
        assert replay_gold(env, item)[0]
    finally:
        env.close()


def test_several_envs_at_once() -> None:
    counts = {"Find": 3, "Lifespan": 3, "TestConductivity": 2}
    jobs = {name: fitting_test_items(name)[:count] for name, count in counts.items()}
    results: dict[str, list] = {}
    pids: dict[str, int] = {}

    def play(subtask: str, items: list[int]) -> None:
        env = gym.make(f"AgentGym/SciWorld-{subtask}-v0")
        try:
            results[subtask] = [replay_gold(env, item)[:2] for item in items]
            pids[subtask] = env.unwrapped.jvm.pid
        finally:
            env.close()

    threads = [threading.Thread(target=play, args=job) for job in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert set(results) == set(jobs), "an env thread failed"
    assert all(success and score == 100 for outcomes in results.values() for success, score in outcomes)
    assert len(set(pids.values())) == len(jobs), "each env must own its JVM"


def test_interleaved_envs_do_not_disturb_each_other() -> None:
    items = load_splits("sciworld")["ChemMix"]["test"][:2]
    one, two = gym.make("AgentGym/SciWorld-ChemMix-v0"), gym.make("AgentGym/SciWorld-ChemMix-v0")
    try:
        alone = [replay_gold(one, item) for item in items]
        one.reset(options={"item_id": items[0]})
        two.reset(options={"item_id": items[1]})
        traces: dict[int, list] = {0: [], 1: []}
        done = [False, False]
        while not all(done):
            for index, env in enumerate((one, two)):
                if not done[index]:
                    _, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
                    traces[index].append(reward)
                    done[index] = terminated or truncated
        assert traces[0] == alone[0][2] and traces[1] == alone[1][2]
    finally:
        one.close()
        two.close()


def test_close_stops_the_jvm() -> None:
    env = gym.make("AgentGym/SciWorld-Lifespan-v0")
    env.reset(options={"split": "test", "index": 0})
    pid = env.unwrapped.jvm.pid
    assert is_running(pid)
    env.close()
    assert not is_running(pid)
    env.close()


def test_missing_java_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JavaNotFound, match="default-jre-headless"):
        JvmConfig().java_executable()
    env = gym.make("AgentGym/SciWorld-Lifespan-v0")
    try:
        with pytest.raises(RuntimeError, match="no `java` executable"):
            env.reset(options={"split": "test", "index": 0})
    finally:
        env.close()
