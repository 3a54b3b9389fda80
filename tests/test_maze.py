"""MAZE: generated mazes, wall feedback, action parsing, the search oracle, the splits."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs
from agentgym_envs.maze import build_splits
from agentgym_envs.maze.mazes import ITEMS_PER_SIZE, MAX_DISTANCE, MIN_DISTANCE, MOVES, SIZES, make_maze

ENV_ID = "AgentGym/Maze-v0"


@pytest.fixture
def env():
    env = gym.make(ENV_ID)
    yield env
    env.close()


@pytest.mark.parametrize("size_index", range(len(SIZES)))
def test_mazes_have_walls_around_and_a_reachable_goal_within_the_cap(size_index: int) -> None:
    size_name, side = list(SIZES.items())[size_index]
    for n in range(40):
        maze = make_maze(size_index * ITEMS_PER_SIZE + 1000 + n)
        assert maze.side == side and maze.size_name == size_name
        assert set(maze.rows[0]) == set(maze.rows[-1]) == {"#"}
        assert all(row[0] == row[-1] == "#" for row in maze.rows)
        assert maze.is_open(maze.start) and maze.is_open(maze.goal)
        distance = maze.distances_to_goal()[maze.start]
        assert MIN_DISTANCE[size_name] <= distance <= MAX_DISTANCE < agentgym_envs.get_task(ENV_ID).max_turns


def test_maze_is_a_pure_function_of_the_item_id() -> None:
    make_maze.cache_clear()
    first = make_maze(ITEMS_PER_SIZE + 5)
    make_maze.cache_clear()
    assert make_maze(ITEMS_PER_SIZE + 5) == first
    assert make_maze(ITEMS_PER_SIZE + 6) != first


def test_observation_reports_position_goal_and_the_true_walls(env) -> None:
    obs, info = env.reset(options={"split": "test", "index": 3})
    maze = env.unwrapped.maze
    row, col = maze.start
    assert f"You are at ({row}, {col})." in obs and f"The goal is at ({maze.goal[0]}, {maze.goal[1]})." in obs
    where = {"up": "above you", "down": "below you", "left": "to your left", "right": "to your right"}
    wall_line = next((line for line in obs.splitlines() if line.startswith("There is a wall")), "")
    open_line = next((line for line in obs.splitlines() if line.startswith("The way is open")), "")
    for move, phrase in where.items():
        blocked = maze.step(maze.start, move) is None
        assert (phrase in wall_line) == blocked and (phrase in open_line) == (not blocked)
    assert info["available_actions"] == ["move up", "move down", "move left", "move right"]


def test_walking_into_a_wall_is_rejected_and_leaves_the_agent_in_place(env) -> None:
    env.reset(options={"split": "test", "index": 0})
    base = env.unwrapped
    blocked = next(m for m in MOVES if base.maze.step(base.position, m) is None)
    before = base.position
    obs, reward, terminated, truncated, info = env.step(f"Thought: try it.\nAction: move {blocked}")
    assert not info["valid_action"] and "wall" in obs and base.position == before and reward == 0.0
    free = next(m for m in MOVES if base.maze.step(base.position, m) is not None)
    obs, _, _, _, info = env.step(f"go {free}")
    assert info["valid_action"] and base.position != before


@pytest.mark.parametrize("response", ["Move Up.", "up", "go north", "Action: move up", "MOVE  UP"])
def test_action_spellings(env, response: str) -> None:
    env.reset(options={"split": "test", "index": 0})
    obs, _, _, _, info = env.step(response)
    assert "not a valid action" not in obs


@pytest.mark.parametrize("response", ["move diagonally", "jump", "move up and left", "go to red ball 1", "inventory"])
def test_invalid_actions_get_feedback(env, response: str) -> None:
    env.reset(options={"split": "test", "index": 0})
    obs, reward, terminated, _, info = env.step(response)
    assert not info["valid_action"] and "Valid actions: move up, move down, move left, move right" in obs
    assert reward == 0.0 and not terminated


def run(policy: str, split: str = "test", seed: int = 0) -> tuple[list[bool], list[int]]:
    env = gym.make(ENV_ID)
    rng = np.random.default_rng(seed)
    successes, turns = [], []
    for index in range(len(agentgym_envs.get_task(ENV_ID).split(split))):
        env.reset(options={"split": split, "index": index})
        shortest = env.unwrapped.maze.distances_to_goal()[env.unwrapped.position]
        total = 0.0
        while True:
            base = env.unwrapped
            action = base.oracle_action() if policy == "oracle" else base.random_action(rng)
            _, reward, terminated, truncated, info = env.step(action)
            total += reward
            if terminated or truncated:
                break
        assert total == float(info["success"])
        successes.append(info["success"])
        turns.append(info["turn"] - shortest)
    env.close()
    return successes, turns


def test_oracle_solves_every_test_maze_by_a_shortest_path() -> None:
    successes, extra_turns = run("oracle")
    assert all(successes) and set(extra_turns) == {0}


def test_random_walker_rarely_succeeds() -> None:
    successes, _ = run("random")
    assert np.mean(successes) < 0.3


def test_splits_sizes_and_no_test_episode_in_train() -> None:
    spec = agentgym_envs.get_task(ENV_ID)
    assert len(spec.split("test")) == 25
    assert len(spec.split("train")) >= 3900
    test_episodes = {make_maze(i) for i in spec.split("test")}
    assert not any(make_maze(i) in test_episodes for i in spec.split("train"))
    assert build_splits.build() == agentgym_envs.core.load_splits("maze")


def test_reaching_the_goal_ends_the_episode_with_reward_one(env) -> None:
    obs, info = env.reset(options={"split": "test", "index": 1})
    assert info["subtask"] == "Small"
    while True:
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        if terminated:
            break
    assert reward == 1.0 and info["success"] and "reached the goal" in obs
    obs, reward, terminated, _, info = env.step("move up")
    assert "episode is over" in obs and reward == 0.0 and terminated


def test_ansi_render_shows_the_map() -> None:
    env = gym.make(ENV_ID, render_mode="ansi")
    env.reset(options={"split": "test", "index": 0})
    text = env.render()
    assert "A" in text and "G" in text and "#" in text
    env.close()
