"""A family is one folder: ``tests/toy_family`` registers from outside ``agentgym_envs`` and gets the
conformance checks, the server, the hostile checks and the listing for free."""

from __future__ import annotations

import json
from typing import Iterator

import gymnasium as gym
import pytest

import agentgym_envs
from agentgym_envs import cli, testing
from agentgym_envs.core import tasks as task_table

TOY = "AgentGym/Toy-v0"
TOY_SHORT = "AgentGym/Toy-Short-v0"


@pytest.fixture
def toy_family() -> Iterator[list[agentgym_envs.TaskSpec]]:
    """The toy family registered for one test, then taken out of both registries again."""
    registered, tables = set(gym.registry), (task_table._TASKS, task_table._FAMILY_PACKAGES)
    saved = [dict(table) for table in tables]
    try:
        yield agentgym_envs.register_family("toy_family")
    finally:
        for env_id in set(gym.registry) - registered:
            del gym.registry[env_id]
        for table, before in zip(tables, saved):
            table.clear()
            table.update(before)


def test_the_family_is_registered_from_its_own_package(toy_family: list[agentgym_envs.TaskSpec]) -> None:
    assert [spec.env_id for spec in toy_family] == [TOY, "AgentGym/Toy-Short-v0", "AgentGym/Toy-Long-v0"]
    assert [spec.env_id for spec in agentgym_envs.list_tasks("toy")] == [spec.env_id for spec in toy_family]
    spec = agentgym_envs.get_task(TOY_SHORT)
    assert spec.entry_point == "toy_family.env:FrogEnv" == gym.spec(TOY_SHORT).entry_point
    assert spec.max_turns == 10 == gym.spec(TOY_SHORT).max_episode_steps
    assert spec.split("test") == [4] and agentgym_envs.get_task(TOY).split("test") == [4, 7, 8]
    assert agentgym_envs.register_family("toy_family") == toy_family  # idempotent
    assert len(agentgym_envs.list_tasks("toy")) == 3


def test_the_conformance_and_hostile_checks_run_on_it(toy_family: list[agentgym_envs.TaskSpec]) -> None:
    assert testing.foreign_actions()["toy"] == "Thought: one more.\nAction: hop"
    testing.check_text_env(TOY_SHORT, memory_resets=20)
    report = testing.run_hostile_actions(TOY)
    assert report.steps > 0 and report.clean, report


def test_agentgym_list_shows_it(toy_family: list[agentgym_envs.TaskSpec], capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["list", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows[TOY]["test"] == 3 and rows[TOY]["turns"] == 10 and rows[TOY]["installed"] is True


def test_the_server_serves_it_with_its_declared_weight_and_protocol(toy_family: list[agentgym_envs.TaskSpec]) -> None:
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from agentgym_envs.server.app import LocalServer
    from agentgym_envs.server.sessions import env_weight

    assert env_weight(TOY) == 2
    with LocalServer(TOY) as server:
        number = httpx.post(f"{server.url}/create", json={}).json()
        assert number == 0  # the toy protocol's bare /create reply
        reset = httpx.post(f"{server.url}/reset", json={"id": number, "data_idx": 2}).json()
        assert reset["observation"] == "You are on stone 0. Reach stone 2."
        for stone in (1, 2):
            step = httpx.post(f"{server.url}/step", json={"id": number, "action": "Action: hop"}).json()
            assert step["observation"] == f"You are on stone {stone} of 2."
        assert step["done"] and step["reward"] == 0.5
        session = httpx.post(f"{server.url}/v1/sessions", json={"env_id": TOY}).json()
        assert session["env_id"] == TOY and session["max_turns"] == 10
        assert httpx.get(f"{server.url}/v1/metrics").json()["env_load"] == 4  # two toy envs of weight 2
        served = httpx.get(f"{server.url}/v1/envs").json()
        assert served == [{"env_id": TOY, "family": "toy", "subtask": None, "max_turns": 10, "train_items": 5,
                           "test_items": 3}]
