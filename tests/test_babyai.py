"""BabyAI: item ids and splits, the description against the grid, compiled actions, bad input, oracle, random agent."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minigrid", reason="needs pip install 'agentgym-rl[babyai]'")

import agentgym_envs  # noqa: E402
from agentgym_envs.babyai import build_splits  # noqa: E402
from agentgym_envs.babyai.env import _make_level  # noqa: E402
from agentgym_envs.babyai.levels import (  # noqa: E402
    AGENTGYM_LEVELS,
    SUBTASK_LEVELS,
    TRAIN_FIRST_SEED,
    item_id,
    level_and_seed,
    subtask_of,
)
from agentgym_envs.babyai.world import TextWorld  # noqa: E402
from agentgym_envs.core.tasks import load_splits  # noqa: E402

FAMILY_ID = "AgentGym/BabyAI-v0"
OURS = {"text_layer": "ours"}  # most tests here check our text layer; AgentGym's: test_babyai_agentgym.py
PAPER_TEST_SIZES = {"GoTo": 55, "Pickup": 15, "ActionObjDoor": 5, "FindObjS7": 5, "OneRoomS20": 5, "SynthLoc": 5}


# ---- item ids and splits ------------------------------------------------------------------------
def test_item_ids_follow_agentgym_numbering() -> None:
    assert level_and_seed(0) == ("BabyAI-GoToRedBallGrey-v0", 0)
    assert level_and_seed(40 + 16) == ("BabyAI-Pickup-v0", 1)
    assert level_and_seed(7 * 40 + 35) == ("BabyAI-SynthLoc-v0", 7)
    assert item_id("BabyAI-OneRoomS20-v0", 3) == 3 * 40 + 32
    assert subtask_of(item_id("BabyAI-GoToImpUnlock-v0", 9)) == "GoTo"
    assert subtask_of(item_id("BabyAI-KeyCorridorS6R3-v0", 0)) is None  # an AgentGym level outside the six sub-tasks
    import minigrid  # noqa: F401  (registers the BabyAI-* ids)

    for levels in SUBTASK_LEVELS.values():
        for level in levels:
            assert level in AGENTGYM_LEVELS and level in gym.registry, level


def test_splits_have_the_paper_test_sizes_and_a_large_disjoint_train_split() -> None:
    table = load_splits("babyai")
    assert {sub: len(parts["test"]) for sub, parts in table.items()} == PAPER_TEST_SIZES
    train = [item for parts in table.values() for item in parts["train"]]
    test = [item for parts in table.values() for item in parts["test"]]
    assert len(train) >= 4000 and len(set(train)) == len(train)
    assert not set(train) & set(test)
    for sub, parts in table.items():
        for item in parts["train"] + parts["test"]:
            assert subtask_of(item) == sub
        assert all(level_and_seed(item)[1] < TRAIN_FIRST_SEED for item in parts["test"])
        assert all(level_and_seed(item)[1] >= TRAIN_FIRST_SEED for item in parts["train"])
    per_level = {level: sum(level_and_seed(i)[0] == level for i in table["GoTo"]["test"])
                 for level in SUBTASK_LEVELS["GoTo"]}
    assert set(per_level.values()) == {5}  # several seeds of every GoTo level


def test_unsolvable_levels_are_detected_and_kept_out_of_the_splits() -> None:
    # MiniGrid put the only blue key of this GoToImpUnlock level inside the room its door locks
    level, seed = level_and_seed(4286)
    engine = _make_level(level)
    engine.reset(seed=seed)
    assert not build_splits.is_solvable(engine)
    engine.reset(seed=0)
    assert build_splits.is_solvable(engine)
    assert 4286 not in load_splits("babyai")["GoTo"]["train"]


@pytest.mark.slow
def test_splits_json_is_what_build_splits_makes() -> None:
    table, _ = build_splits.build()
    assert table == load_splits("babyai")


# ---- hand-checked descriptions --------------------------------------------------------------------
def _scene(agent: tuple[int, int], direction: int, objects: dict[tuple[int, int], object],
           carrying: object = None) -> TextWorld:
    """An empty 8x8 room (interior 1..6) with the given objects; direction 0 right, 1 down, 2 left, 3 up."""
    world = TextWorld(_make_level("BabyAI-GoToRedBallNoDists-v0"))
    world.reset(seed=0)
    env = world.env
    for x in range(1, 7):
        for y in range(1, 7):
            env.grid.set(x, y, None)
    for (x, y), obj in objects.items():
        env.grid.set(x, y, obj)
        obj.init_pos = obj.cur_pos = np.array((x, y))
    env.agent_pos, env.agent_dir, env.carrying = agent, direction, carrying
    world.refresh(forget=True)
    return world


def _objects() -> dict[tuple[int, int], object]:
    from minigrid.core.world_object import Ball, Box, Door, Key

    return {
        (3, 3): Ball("red"),
        (1, 4): Key("blue"),
        (5, 5): Box("green"),
        (3, 0): Door("grey", is_locked=True),
        (0, 3): Door("purple"),
        (3, 6): Ball("yellow"),  # right behind the agent: out of view
    }


def test_description_places_objects_ahead_left_and_right() -> None:
    world = _scene((3, 5), 3, _objects())  # facing up (north)
    text = world.describe()
    assert "- red ball 1: 2 steps ahead\n" in text
    assert "- blue key 1: 1 step ahead and 2 steps to your left\n" in text
    assert "- green box 1: 2 steps to your right\n" in text
    assert "- grey door 1 (locked): 5 steps ahead\n" in text
    assert "- purple door 1 (closed): 2 steps ahead and 3 steps to your left\n" in text
    assert "yellow ball" not in text  # behind the agent, never seen
    assert "In front of you: empty floor." in text
    assert "Nearest walls: 3 steps to your left." in text  # ahead ends at a door, right and behind unseen
    assert "You are not carrying anything." in text
    assert world.visible == ["green box 1", "red ball 1", "blue key 1", "purple door 1", "grey door 1"]  # nearest first


def test_description_follows_turns_and_remembers_what_left_the_view() -> None:
    world = _scene((3, 5), 3, _objects())
    assert world.execute("turn right").valid  # now facing east
    text = world.describe()
    assert "- red ball 1: 2 steps to your left\n" in text  # same name, new relative position
    assert "- green box 1: 2 steps ahead\n" in text
    assert "- yellow ball 1: 1 step to your right\n" in text  # now in the agent's row of view, named after the others
    assert "Out of sight, you remember:\n- blue key 1: 2 steps behind you and 1 step to your left\n" in text
    assert "- grey door 1 (locked): 5 steps to your left\n" in text
    assert "- purple door 1 (closed): 3 steps behind you and 2 steps to your left\n" in text
    # left ends at the grey door (a door, not a wall); the yellow ball does not stop the ray to the right
    assert "Nearest walls: 4 steps ahead, 2 steps to your right, 3 steps behind you.\n" in text


def test_description_of_the_cell_in_front_door_states_and_carried_object() -> None:
    from minigrid.core.world_object import Door, Key

    objects = _objects()
    objects[(0, 3)] = Door("purple", is_open=True)
    world = _scene((1, 3), 2, objects, carrying=Key("yellow"))  # facing west, right at the purple door
    text = world.describe()
    assert "In front of you: the purple door 1 (open)." in text
    assert "- purple door 1 (open): 1 step ahead\n" in text
    assert "You are carrying the yellow key 1." in text
    assert "drop" not in world.available_actions()  # a door cell is not free floor
    world = _scene((3, 1), 3, _objects())
    assert "In front of you: the grey door 1 (locked)." in world.describe()
    result = world.execute("toggle")
    assert not result.valid and "locked" in result.message and "grey key" in result.message


_SEEN = re.compile(r"^- (\w+) (ball|box|key|door) \d+(?: \((open|closed|locked)\))?: (.+)$")


def _offset(where: str) -> tuple[int, int]:
    """'2 steps ahead and 1 step to your left' -> (2, -1) as (ahead, right)."""
    ahead = right = 0
    for part in where.split(" and "):
        count, _, direction = part.partition(" ")
        n = int(count)
        direction = direction.split(" ", 1)[1]
        if direction == "ahead":
            ahead = n
        elif direction == "behind you":
            ahead = -n
        elif direction == "to your right":
            right = n
        else:
            assert direction == "to your left", part
            right = -n
    return ahead, right


def test_listed_objects_match_the_grid_and_minigrid_view_along_oracle_episodes() -> None:
    """Every listed object is at the stated offset in the real grid; every object MiniGrid shows is listed."""
    from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT

    env = gym.make(FAMILY_ID, **OURS)
    checked = 0
    for index in range(0, 90, 7):
        env.reset(options={"split": "test", "index": index})
        world = env.unwrapped.world
        while True:
            text = world.describe()
            pose = world.pose
            fx, fy = world.env.dir_vec
            listed = set()
            for line in text.split("\n"):
                match = _SEEN.match(line)
                if match is None:
                    continue
                color, kind, state, where = match.groups()
                ahead, right = _offset(where)
                x, y = pose.x + fx * ahead - fy * right, pose.y + fy * ahead + fx * right
                obj = world.env.grid.get(x, y)
                assert obj is not None and (obj.color, obj.type) == (color, kind), (line, obj)
                if kind == "door":
                    assert state == ("open" if obj.is_open else "locked" if obj.is_locked else "closed")
                listed.add((x, y))
                checked += 1
            image = world.env.gen_obs()["image"]  # MiniGrid's own egocentric view
            size = image.shape[0]
            for i in range(size):
                for j in range(size):
                    kind = IDX_TO_OBJECT[int(image[i, j, 0])]
                    if kind in ("ball", "box", "key", "door") and (i, j) != (size // 2, size - 1):
                        ahead, right = size - 1 - j, i - size // 2
                        cell = (pose.x + fx * ahead - fy * right, pose.y + fy * ahead + fx * right)
                        assert cell in listed, (IDX_TO_COLOR[int(image[i, j, 1])], kind, cell, text)
            carried = world.carrying
            assert ("You are not carrying anything." in text) == (carried is None)
            obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            if terminated or truncated:
                break
    assert checked > 50
    env.close()


# ---- compiled actions ------------------------------------------------------------------------------
def test_go_to_and_pick_up_compile_to_shortest_primitive_plans() -> None:
    world = _scene((3, 5), 3, _objects())
    result = world.execute("go to red ball 1")
    assert result.valid and result.primitives == [2]  # one step north, then the ball is in front
    assert world.front_text() == "the red ball 1"
    result = world.execute("pick up blue key 1")
    assert result.valid and world.carrying.type == "key" and world.carrying.color == "blue"
    assert result.primitives[-1] == 3 and len(result.primitives) == 3  # turn left, forward, pick up
    full = world.execute("pick up red ball 1")
    assert not full.valid and "hands are full" in full.message
    assert world.execute("drop").valid and world.carrying is None


def test_toggle_opens_a_locked_door_with_its_key() -> None:
    from minigrid.core.world_object import Key

    world = _scene((3, 1), 3, _objects(), carrying=Key("grey"))
    door = world.env.grid.get(3, 0)
    result = world.execute("toggle")
    assert result.valid and "unlocked and opened" in result.message
    assert door.is_open and not door.is_locked
    assert "grey door 1 (open)" in world.describe()


def test_toggle_and_go_through_a_door_in_a_real_maze() -> None:
    env = gym.make("AgentGym/BabyAI-GoTo-v0", **OURS).unwrapped
    env.reset(options={"item_id": item_id("BabyAI-GoToObjMazeS7-v0", 0)})
    world = env.world
    action = next(a for a in world.available_actions() if a.startswith("toggle and go through "))
    door = world.object_named(action[len("toggle and go through "):])
    door_cell = world.position(door)
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["valid_action"] and door.is_open
    pose = world.pose
    # two cells past the facing pose: one step beyond the door, still heading the same way
    assert (pose.x - door_cell[0], pose.y - door_cell[1]) == tuple(int(v) for v in world.env.dir_vec)
    again = world.execute(f"toggle and go through {world.name_of(door)}")
    assert not again.valid and "already open" in again.message
    env.close()


def test_go_to_when_already_facing_the_target_completes_the_goto() -> None:
    env = gym.make("AgentGym/BabyAI-GoTo-v0", **OURS).unwrapped
    env.reset(options={"item_id": item_id("BabyAI-GoToRedBallNoDists-v0", 0)})
    world = env.world
    ball = next(obj for obj in world.env.grid.grid if obj is not None and obj.type == "ball")
    x, y = (int(v) for v in ball.cur_pos)
    world.env.agent_pos, world.env.agent_dir = (x, y + 1), 3  # just south of the ball, facing north
    world.refresh()
    obs, reward, terminated, truncated, info = env.step("go to red ball 1")
    assert terminated and info["success"] and "already facing" in obs
    assert reward == pytest.approx(1 - 0.9 * 1 / world.env.max_steps)  # MiniGrid's reward for one step
    env.close()


def test_unreachable_object_is_refused_without_moving() -> None:
    from minigrid.core.world_object import Ball, Box

    objects = {(1, 1): Ball("red"), (2, 1): Box("blue"), (1, 2): Box("green")}
    world = _scene((3, 4), 3, objects)
    before = (world.pose, world.env.step_count)
    result = world.execute("go to red ball 1")
    assert not result.valid and "no way" in result.message
    assert "go to red ball 1" not in world.available_actions() and "go to blue box 1" in world.available_actions()
    assert (world.pose, world.env.step_count) == before


# ---- bad input --------------------------------------------------------------------------------------
def test_bad_input_gets_feedback_and_leaves_the_episode_unchanged() -> None:
    env = gym.make(FAMILY_ID, **OURS)
    obs, info = env.reset(options={"split": "test", "index": 0})
    world = env.unwrapped.world
    state = (world.pose, world.env.step_count, world.carrying, world.describe())
    bad = {
        "dance": "Unknown action",
        "go to red ball 9": "You have not seen any 'red ball 9'",
        "go to the ball": "add the number",
        "pick up grey door 1": "doors cannot be picked up",
        "go through grey key 1": "is not a door",
        "drop": "not carrying anything",
        "toggle": "nothing in front of you",
        "go to 3 5": "is not an object name",
        "Thought: two\nAction: turn left\nAction: turn right": "more than one",
    }
    for response, expected in bad.items():
        obs, reward, terminated, truncated, info = env.step(response)
        assert expected in obs, (response, obs)
        assert not info["valid_action"] and reward == 0.0 and not terminated
        assert "Available actions:" in obs or "Action:" in obs
    assert (world.pose, world.env.step_count, world.carrying, world.describe()) == state
    env.close()


def test_capitalisation_extra_spaces_and_react_format_are_accepted() -> None:
    env = gym.make(FAMILY_ID, **OURS)
    env.reset(options={"split": "test", "index": 0})
    world = env.unwrapped.world
    target = next(a for a in world.available_actions() if a.startswith("go to "))[len("go to "):]
    obs, reward, terminated, truncated, info = env.step(f"Thought: go there.\n\nAction:\n  GO   TO  {target.upper()}. ")
    assert info["valid_action"], obs
    assert world.front_text().startswith(f"the {target}")
    env.close()


def test_actions_valid_only_in_another_state_are_refused() -> None:
    world = _scene((3, 1), 3, _objects())
    assert "move forward" not in world.available_actions()
    result = world.execute("move forward")  # a locked door is in front
    assert not result.valid and "cannot move forward" in result.message
    result = world.execute("go through grey door 1")
    assert not result.valid and "not open" in result.message
    world = _scene((3, 5), 3, _objects())
    result = world.execute("toggle and go through purple door 1")  # a door in the outer wall
    assert not result.valid and "other side leads nowhere" in result.message
    assert world.execute("pick up red ball 1").valid
    result = world.execute("pick up red ball 1")
    assert not result.valid and "already carrying" in result.message


def test_minigrid_step_limit_truncates_and_the_episode_stays_over() -> None:
    env = gym.make("AgentGym/BabyAI-GoTo-v0", **OURS).unwrapped  # no turn cap: run into MiniGrid's own limit
    env.reset(options={"item_id": item_id("BabyAI-GoToObjS4-v0", 0)})
    limit = env.world.env.max_steps
    for turn in range(limit):
        obs, reward, terminated, truncated, info = env.step("turn left")
        if truncated:
            break
    assert truncated and not info["success"] and turn == limit - 1 and "is over" in obs
    obs, reward, terminated, truncated, info = env.step("turn left")
    assert not info["valid_action"] and "over" in obs
    env.close()


def test_picking_up_the_wrong_object_fails_a_strict_level() -> None:
    env = gym.make("AgentGym/BabyAI-Pickup-v0", **OURS).unwrapped
    for seed in range(TRAIN_FIRST_SEED, TRAIN_FIRST_SEED + 20):
        env.reset(options={"item_id": item_id("BabyAI-PickupDistDebug-v0", seed)})
        targets = {id(obj) for obj in env.world.env.instrs.desc.obj_set}
        wrong = [a for a in env.world.available_actions()
                 if a.startswith("pick up ") and id(env.world.object_named(a[8:])) not in targets]
        if wrong:
            break
    obs, reward, terminated, truncated, info = env.step(wrong[0])
    assert terminated and not info["success"] and reward == 0.0 and "failed" in obs
    env.close()


# ---- agents -------------------------------------------------------------------------------------------
def test_a_primitive_action_agent_can_play_through_the_text_interface() -> None:
    """MiniGrid's own BabyAI bot, speaking only primitive actions, solves levels through the text env."""
    from minigrid.utils.baby_ai_bot import BabyAIBot

    words = {0: "turn left", 1: "turn right", 2: "move forward", 3: "pick up", 4: "drop", 5: "toggle"}
    env = gym.make(FAMILY_ID, **OURS).unwrapped
    for level in ("BabyAI-GoToLocalS8N7-v0", "BabyAI-GoToObjMazeS7-v0", "BabyAI-PickupLoc-v0", "BabyAI-FindObjS7-v0"):
        env.reset(options={"item_id": item_id(level, 1)})
        bot = BabyAIBot(env.world.env)
        for _ in range(300):
            obs, reward, terminated, truncated, info = env.step(words[int(bot.replan())])
            assert info["valid_action"], obs
            if terminated or truncated:
                break
        assert info["success"] and reward > 0, level
    env.close()


def test_oracle_solves_the_test_split_within_the_turn_cap() -> None:
    env = gym.make(FAMILY_ID, **OURS)  # with the 20-turn TimeLimit
    items = agentgym_envs.get_task(FAMILY_ID).split("test")
    solved, total_reward_ok = 0, True
    for index in range(len(items)):
        env.reset(options={"split": "test", "index": index})
        total = 0.0
        while True:
            obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            assert info["valid_action"], obs
            total += reward
            if terminated or truncated:
                break
        solved += info["success"]
        if info["success"]:
            expected = 1 - 0.9 * info["primitive_steps"] / info["max_primitive_steps"]
            total_reward_ok &= total == pytest.approx(expected) and info["score"] == pytest.approx(expected)
    assert solved / len(items) >= 0.95, f"oracle solved {solved}/{len(items)}"
    assert total_reward_ok  # rewards sum to MiniGrid's success reward
    env.close()


def test_random_agent_plays_valid_actions_and_does_worse_than_the_oracle() -> None:
    env = gym.make(FAMILY_ID, **OURS)
    items = agentgym_envs.get_task(FAMILY_ID).split("test")
    rng = np.random.default_rng(0)
    successes = []
    for index in range(0, len(items), 3):
        env.reset(options={"split": "test", "index": index})
        while True:
            obs, reward, terminated, truncated, info = env.step(env.unwrapped.random_action(rng))
            assert info["valid_action"] and isinstance(obs, str) and obs
            if terminated or truncated:
                break
        successes.append(info["success"])
    assert 0.0 < np.mean(successes) < 0.95
    env.close()


def test_instruction_lists_every_action() -> None:
    """The default instruction has AgentGym's action list; the detailed one (opt-in) explains ours."""
    env = gym.make("AgentGym/BabyAI-SynthLoc-v0", **OURS)
    obs, info = env.reset(options={"split": "test", "index": 0})
    for action in ("turn left", "turn right", "move forward", "go to <obj> <id>", "pick up <obj> <id>", "toggle",
                   "go through <door> <id>", "toggle and go through <door> <id>"):
        assert action in info["instruction"]
    detailed = gym.make("AgentGym/BabyAI-SynthLoc-v0", detailed_instruction=True, **OURS)
    _, info = detailed.reset(options={"split": "test", "index": 0})
    for action in ("turn left", "turn right", "move forward", "go to <object>", "pick up <object>", "drop", "toggle",
                   "go through <door>", "toggle and go through <door>", "check available actions"):
        assert action in info["instruction"]
    detailed.close()
    assert obs.startswith("Goal: ") and info["mission"] in obs and "Available actions: " in obs
    assert info["level"] == "BabyAI-SynthLoc-v0" and info["subtask"] == "SynthLoc"
    assert set(info["available_actions"]) >= {"turn left", "turn right", "check available actions"}
    env.close()


def test_actions_are_spelled_as_agentgym_by_default_and_both_spellings_work() -> None:
    """AgentGym lists 'pickup red ball 1' and names doors with their state ('red closed door 1')."""
    env = gym.make("AgentGym/BabyAI-v0", **OURS)
    for item in range(200):
        _, info = env.reset(options={"item_id": item})
        doors = [a for a in info["available_actions"] if a.startswith("toggle and go through ")]
        if doors:
            break
    assert re.fullmatch(r"toggle and go through \w+ (closed|locked) door \d+", doors[0])
    assert not any(a.startswith("pick up ") for a in info["available_actions"])
    ours = gym.make("AgentGym/BabyAI-v0", agentgym_names=False, **OURS)
    _, mine = ours.reset(options={"item_id": item})
    door = doors[0].replace(" closed door", " door").replace(" locked door", " door")
    assert door in mine["available_actions"]
    obs_agentgym = env.step(f"Action:\n{doors[0]}")
    obs_ours = ours.step(f"Action:\n{door}")
    assert obs_agentgym[1:4] == obs_ours[1:4] and obs_agentgym[4]["valid_action"]
    env.close()
    ours.close()


def test_copies_of_our_layer_keep_the_object_names() -> None:
    """A deepcopy or pickle of our layer in mid-episode steps as the original (names are keyed by object ids)."""
    import copy
    import pickle

    env = gym.make(FAMILY_ID, **OURS)
    rng = np.random.default_rng(0)
    for index in range(0, 90, 9):
        env.reset(options={"split": "test", "index": index})
        for _ in range(3):
            env.step(env.unwrapped.oracle_action())
        twins = [copy.deepcopy(env), pickle.loads(pickle.dumps(env))]
        for _ in range(4):
            action = env.unwrapped.random_action(rng)
            expected = env.step(action)
            for twin in twins:
                assert twin.step(action)[:4] == expected[:4], index
            if expected[2] or expected[3]:
                break
    env.close()
