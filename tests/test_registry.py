"""Conformance tests derived from the registry: every registered id gets every check.

A family whose extra is not installed is skipped with the pip command that would install it.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs
from agentgym_envs import testing
from agentgym_envs.core.tasks import NAMESPACE

ALL_IDS = [spec.env_id for spec in agentgym_envs.list_tasks()]


def _require_extra(env_id: str) -> None:
    spec = agentgym_envs.get_task(env_id)
    if not spec.extra_installed():
        pytest.skip(f"{env_id} needs {spec.install_hint}")


@pytest.fixture(params=ALL_IDS)
def env_id(request: pytest.FixtureRequest) -> str:
    _require_extra(request.param)
    return request.param


def test_registered_in_gymnasium(env_id: str) -> None:
    spec = agentgym_envs.get_task(env_id)
    gym_spec = gym.spec(env_id)
    assert env_id.startswith(f"{NAMESPACE}/") and gym_spec.max_episode_steps == spec.max_turns
    assert spec.split("test"), f"{env_id} has no test items"
    assert not set(spec.split("test")) & set(spec.split("train")), f"{env_id}: train and test overlap"


@pytest.mark.parametrize("budget", ["1", "3", "cap", "cap+5"])
def test_an_episode_runs_under_the_budget_it_was_made_with(env_id: str, budget: str) -> None:
    cap = agentgym_envs.get_task(env_id).max_turns
    turns = {"1": 1, "3": 3, "cap": cap, "cap+5": cap + 5}[budget]
    testing.check_turn_budget(env_id, turns)


@pytest.fixture(scope="module")
def served_factory():
    """One loopback ``agentgym serve`` hosting every installed id, and the factory that makes them as local ids."""
    pytest.importorskip("fastapi")
    from agentgym_envs.server.app import LocalServer
    from agentgym_envs.server.hosts import RemoteEnvFactory

    installed = [env_id for env_id in ALL_IDS if agentgym_envs.get_task(env_id).extra_installed()]
    with LocalServer(installed, max_envs=10_000) as server:
        yield RemoteEnvFactory(server.url)


@pytest.mark.parametrize("budget", ["1", "3", "cap", "cap+5"])
def test_a_served_episode_runs_under_the_budget_it_was_made_with(env_id: str, budget: str, served_factory) -> None:
    """The same check through ``agentgym serve``: the served env is made with the budget and ends at it."""
    cap = agentgym_envs.get_task(env_id).max_turns
    turns = {"1": 1, "3": 3, "cap": cap, "cap+5": cap + 5}[budget]
    testing.check_turn_budget(env_id, turns, make=served_factory)


def test_check_env(env_id: str) -> None:
    testing.check_gymnasium_api(env_id)


def test_reset_determinism(env_id: str) -> None:
    testing.check_determinism(env_id)


def test_bad_actions(env_id: str) -> None:
    testing.check_bad_actions(env_id)


def test_hostile_actions(env_id: str) -> None:
    testing.check_hostile_actions(env_id)


# copying is a property of the env class: one id per entry point and engine kwargs (``mode="browser"``; the task id
# only picks data) covers each class
ONE_ID_PER_CLASS = list({
    (str(gym.spec(env_id).entry_point),
     str(sorted((key, value) for key, value in gym.spec(env_id).kwargs.items() if key != "task_id"))): env_id
    for env_id in reversed(ALL_IDS)}.values())


@pytest.mark.parametrize("class_id", ONE_ID_PER_CLASS)
def test_copy_steps_as_the_original_or_names_the_id(class_id: str) -> None:
    _require_extra(class_id)
    testing.check_copy(class_id)


# memory per reset is the engine's too: one id per class (the six WebArena ids share one browser engine: ~80 s of CI)
@pytest.mark.parametrize("class_id", ONE_ID_PER_CLASS)
def test_reset_memory(class_id: str) -> None:
    _require_extra(class_id)
    testing.check_reset_memory(class_id)


def test_close_twice(env_id: str) -> None:
    testing.check_close_twice(env_id)


def test_step_after_close(env_id: str) -> None:
    testing.check_step_after_close(env_id)


def test_reset_info_contract(env_id: str) -> None:
    env = gym.make(env_id)
    try:
        obs, info = env.reset(seed=0, options={"split": "test", "index": 0})
        for key in ("task", "item_id", "split", "instruction", "valid_action", "score", "success", "subtask"):
            assert key in info, f"{env_id}: reset info lacks {key!r}"
        assert info["split"] == "test" and info["item_id"] == agentgym_envs.get_task(env_id).split("test")[0]
        assert isinstance(obs, str) and obs and info["instruction"]
    finally:
        env.close()


def test_bad_reset_options_raise_clear_errors(env_id: str) -> None:
    env = gym.make(env_id)
    try:
        with pytest.raises(ValueError, match="split"):
            env.reset(options={"split": "validation"})
        with pytest.raises(ValueError, match="out of range"):
            env.reset(options={"split": "test", "index": 10**9})
        with pytest.raises(ValueError, match="unknown reset options"):
            env.reset(options={"item": 3})
    finally:
        env.close()


def test_reset_item_id_is_a_checked_int(env_id: str) -> None:
    """Non-integers are refused, not coerced to another item; ids outside the env are refused
    before any engine work (ALFWorld once wrote a game file for any id below 10 million)."""
    env = gym.make(env_id)
    try:
        for value in (True, False, 1.5, "3", None, np.float64(2.0), [1]):
            with pytest.raises(TypeError, match="must be an int"):
                env.reset(options={"item_id": value})
            with pytest.raises(TypeError, match="must be an int"):
                env.reset(options={"split": "test", "index": value})
        for value in (-1, 2**63, 10**100, -(10**100)):
            with pytest.raises(ValueError, match="is not an item"):
                env.reset(options={"item_id": value})
        first = agentgym_envs.get_task(env_id).split("test")[0]
        assert env.reset(options={"item_id": np.int64(first)})[1]["item_id"] == first
    finally:
        env.close()


def test_make_without_import_by_module_prefix() -> None:
    env = gym.make(f"agentgym_envs:{NAMESPACE}/TextCraft-Depth1-v0")
    env.reset(seed=0)
    env.close()
