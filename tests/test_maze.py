"""MAZE: AgentGym's double-T maze step for step, generated mazes (opt-in and the train split), AgentGym's wording
(our explanations opt-in), action parsing, the oracle, the splits."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs
from agentgym_envs.maze import build_splits
from agentgym_envs.maze.mazes import ITEMS_PER_SIZE, MAX_DISTANCE, MIN_DISTANCE, MOVES, SIZES, make_maze

# conftest.py makes the `env` (AgentGym's wording) and `ours` (extra_feedback=True) fixtures of it.
ENV_ID = "AgentGym/Maze-v0"


def agentgym_description(maze, position) -> str:
    """What AgentGym's LMRL-Gym server says at ``position``: walls listed right, left, above, below."""
    where = {"right": "to your right", "left": "to your left", "up": "above you", "down": "below you"}
    walls = [phrase for move, phrase in where.items() if maze.step(position, move) is None]
    wall_text = ("There are no walls near you." if not walls else
                 f"There is a wall {walls[0]}." if len(walls) == 1 else f"There are walls {', '.join(walls)}.")
    return (f"The goal is at position {maze.goal[0]}, {maze.goal[1]}. "
            f"Your current position is at position {position[0]}, {position[1]}. {wall_text}")


def test_the_conversation_opens_as_agentgyms_maze_client(env) -> None:
    obs, info = env.reset(options={"split": "test", "index": 3})
    assert info["instruction"] == "You are an expert maze solver."
    assert info["acknowledgement"] == "OK. I'll follow your instructions and try my best to solve the task."
    assert obs.startswith("Your objective is to reach the goal in as few steps as possible. At each step you will be "
                          "given information about where the goal is, your current position,\nand the walls that "
                          "surround you. \n\nWhen you move right you increase your y position by 1, when you move "
                          "down you increase your x position by 1. \n")
    assert ('Your possible actions are "move up", "move down", "move left", "move right". Formally, your return '
            "should be in this format:\nThought:\n<Your Thought>\n\nAction:\n<Your Action>\n\n") in obs
    assert "environment: Success\n```" in obs
    rules_end = "make the optimal action given the current environment state:\n"
    maze = env.unwrapped.maze
    assert obs.endswith(rules_end + agentgym_description(maze, maze.start))


def test_every_answer_is_the_servers_description_and_success_at_the_goal(env) -> None:
    env.reset(options={"split": "test", "index": 0})
    base = env.unwrapped
    blocked = next(m for m in MOVES if base.maze.step(base.position, m) is None)
    start = base.position
    for response in (f"Thought:\nA wall.\n\nAction:\nmove {blocked}", "jump", "Move Up", "go north",
                     "Action: move up."):
        obs, reward, terminated, _, info = env.step(response)
        assert obs == agentgym_description(base.maze, start) and not info["valid_action"]
        assert base.position == start and reward == 0.0 and not terminated
    while True:
        obs, reward, terminated, _, info = env.step(base.oracle_action())
        if terminated:
            break
        assert obs == agentgym_description(base.maze, base.position) and info["valid_action"]
    assert obs == "Success\n" and reward == 1.0 and info["success"] and info["score"] == 1.0


def test_the_action_is_what_agentgyms_client_sends() -> None:
    from agentgym_envs.maze.env import agentgym_client_action

    assert agentgym_client_action("Thought:\nGo.\n\nAction:\nmove left") == "move left"
    assert agentgym_client_action("Thought: Go.\nAction: move left\nAction: move up") == "move left"
    assert agentgym_client_action("  move down \n") == "move down"


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


def test_our_observation_reports_position_goal_and_the_true_walls(ours) -> None:
    env = ours
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


def test_walking_into_a_wall_is_rejected_and_leaves_the_agent_in_place(ours) -> None:
    env = ours
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
def test_our_action_spellings(ours, response: str) -> None:
    env = ours
    env.reset(options={"split": "test", "index": 0})
    obs, _, _, _, info = env.step(response)
    assert "not a valid action" not in obs


@pytest.mark.parametrize("response", ["move diagonally", "jump", "move up and left", "go to red ball 1", "inventory"])
def test_our_invalid_action_feedback(ours, response: str) -> None:
    env = ours
    env.reset(options={"split": "test", "index": 0})
    obs, reward, terminated, _, info = env.step(response)
    assert not info["valid_action"] and "Valid actions: move up, move down, move left, move right" in obs
    assert reward == 0.0 and not terminated


def run(policy: str, split: str = "test", seed: int = 0, **kwargs) -> tuple[list[bool], list[int]]:
    env = gym.make(ENV_ID, **kwargs)
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


@pytest.mark.parametrize("extra_feedback", [False, True])
def test_oracle_solves_every_test_maze_by_a_shortest_path(extra_feedback: bool) -> None:
    successes, extra_turns = run("oracle", extra_feedback=extra_feedback)
    assert all(successes) and set(extra_turns) == {0}


def test_random_walker_rarely_succeeds() -> None:
    successes, _ = run("random")  # AgentGym's 25 games, 50 moves: 23 of 200 walks (11.5%) over seeds 0-7
    assert np.mean(successes) < 0.3


def test_splits_sizes_and_no_test_episode_in_train() -> None:
    """Test: AgentGym's 25 games (items 0-24); train: generated mazes, none the same as a generated test item."""
    spec = agentgym_envs.get_task(ENV_ID)
    assert spec.split("test") == list(range(25))
    assert len(spec.split("train")) >= 3900 and min(spec.split("train")) >= 1000
    test_episodes = {make_maze(i) for i in spec.split("test")}
    assert not any(make_maze(i) in test_episodes for i in spec.split("train"))
    assert build_splits.build() == agentgym_envs.core.load_splits("maze")


def test_reaching_the_goal_ends_the_episode_with_reward_one(ours) -> None:
    env = ours
    obs, info = env.reset(options={"split": "test", "index": 1})
    assert info["subtask"] == "DoubleT"
    while True:
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        if terminated:
            break
    assert reward == 1.0 and info["success"] and "reached the goal" in obs
    obs, reward, terminated, _, info = env.step("move up")
    assert "episode is over" in obs and reward == 0.0 and terminated


def test_ansi_render_shows_the_map(make_env) -> None:
    env = make_env(ENV_ID, render_mode="ansi")
    env.reset(options={"split": "test", "index": 0})
    text = env.render()
    assert "A" in text and "G" in text and "#" in text


class UpstreamMaze:
    """AgentGym's maze server as its code reads (``agentenv_lmrlgym/maze``: ``setup_maze_env("double_t_maze",
    start_position=...)`` over LMRL-Gym's ``MazeEnv``, ``max_steps=50``, its ``describe_observation``)."""

    LAYOUT = [[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1],
              [1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1], [1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1],
              [1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1],
              [1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1],
              [1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]]
    STARTS = [(1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (1, 7), (1, 8), (1, 9), (1, 10), (1, 11), (2, 3), (3, 3),
              (4, 3), (5, 3), (5, 4), (5, 5), (5, 6), (6, 6), (7, 6), (5, 7), (5, 8), (5, 9), (4, 9), (3, 9), (2, 9),
              (8, 6)]
    ACTIONS = {"move left\n": (0, -1), "move right\n": (0, 1), "move up\n": (-1, 0), "move down\n": (1, 0)}

    def __init__(self, game: int):
        self.position, self.goal, self.num_steps = list(self.STARTS[game]), [8, 6], 0

    def describe(self) -> str:
        walls = [k for k, (dy, dx) in {"to your right": (0, 1), "to your left": (0, -1), "above you": (-1, 0),
                                        "below you": (1, 0)}.items()
                 if self.LAYOUT[self.position[0] + dy][self.position[1] + dx] == 1]
        wall = ("There are no walls near you." if not walls else f"There is a wall {walls[0]}." if len(walls) == 1
                else f"There are walls {', '.join(walls)}.")
        return (f"The goal is at position {self.goal[0]}, {self.goal[1]}. "
                f"Your current position is at position {self.position[0]}, {self.position[1]}. {wall}")

    def step(self, response: str) -> tuple[str, float, bool]:
        parts = response.split("Action:")
        action = (parts[1] if len(parts) > 1 else parts[0]).strip() + "\n"
        if self.num_steps >= 50:
            return "Failure\n", -1.0, True
        if action in self.ACTIONS:
            dy, dx = self.ACTIONS[action]
            if self.LAYOUT[self.position[0] + dy][self.position[1] + dx] == 0:
                self.position = [self.position[0] + dy, self.position[1] + dx]
        if self.position == self.goal:
            return "Success\n", 1.0, True
        self.num_steps += 1
        return self.describe(), 0.0, False


def test_agentgym_maze_matches_its_server_step_for_step() -> None:
    """The 25 games: the first description, then oracle, random, invalid and wall moves, past the 50-move limit."""
    env = gym.make(ENV_ID, max_episode_steps=60).unwrapped
    rng = np.random.default_rng(0)
    invalid = ["jump", "Move Up", "go north", "Action: move up.", "", "move  up", "up"]
    equal = steps = failures = successes = 0
    for game in range(25):
        obs, _ = env.reset(options={"item_id": game})
        upstream = UpstreamMaze(game)
        assert obs.endswith("\n" + upstream.describe())
        oracle_share = 0.9 if game % 2 else 0.2  # odd games mostly reach the goal, even games mostly run out
        for _ in range(60):
            draw = rng.random()
            response = (env.oracle_action() if draw < oracle_share else
                        env.random_action(rng) if draw < 0.9 else invalid[int(rng.integers(len(invalid)))])
            observation, reward, terminated, _, info = env.step(response)
            expected = upstream.step(response)
            steps += 1
            equal += (observation, reward, terminated) == expected
            assert info["score"] == expected[1] or not terminated
            if terminated or expected[2]:
                failures += expected[0] == "Failure\n"
                successes += expected[0] == "Success\n"
                break
    env.close()
    print(f"maze: {equal}/{steps} steps equal, {successes} successes, {failures} failures")
    assert equal == steps, f"{equal}/{steps} steps equal"
    assert successes >= 8 and failures >= 5


@pytest.mark.parametrize("nonnegative", [False, True])
def test_the_move_limits_failure_is_rewarded_minus_one_as_lmrl_gyms_unless_floored(nonnegative: bool) -> None:
    """AgentGym-RL trains on the last reward of the client, LMRL-Gym's -1 after the 50 moves; 0 is the opt-in."""
    env = gym.make(ENV_ID, max_episode_steps=51, nonnegative_reward=nonnegative)
    env.reset(options={"item_id": 0})
    rewards = [env.step("Action: jump")[1] for _ in range(50)]
    observation, reward, terminated, _, info = env.step("Action: jump")
    assert observation == "Failure\n" and terminated and set(rewards) == {0.0}
    assert reward == (0.0 if nonnegative else -1.0) and info["score"] == -1.0 and not info["success"]
    env.close()


def test_generated_mazes_are_an_option() -> None:
    env = gym.make(ENV_ID, maze="generated").unwrapped
    env.reset(options={"item_id": 3})
    assert env.maze == make_maze(3) and env.maze.size_name == "Small"
    env.reset(options={"item_id": 3 + ITEMS_PER_SIZE})
    assert env.maze.size_name == "Medium"
    default = gym.make(ENV_ID).unwrapped
    default.reset(options={"item_id": 3})
    assert default.maze.rows[1] == "#.....#.....#" and default.maze.start == (1, 4) and default.maze.goal == (8, 6)
    default.reset(options={"split": "train", "index": 0})  # train items: generated mazes by AgentGym's rules
    assert default.maze == make_maze(default.item_id)
