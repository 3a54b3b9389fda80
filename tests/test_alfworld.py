"""ALFWorld on TextWorld: generated games, engine parity with TextWorld's PddlEnv, commands and
their feedback, the oracle, the planner, the disk cache, and real ALFWorld game directories.

The oracle over all 200 test games is in ``benchmarks/bench_games.py``; here a sample of each type.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("textworld")
pytest.importorskip("alfworld")

import agentgym_envs  # noqa: E402
from agentgym_envs.alfworld import build_splits, engine, generator  # noqa: E402
from agentgym_envs.alfworld.engine import AlfredEngine, display_names  # noqa: E402
from agentgym_envs.alfworld.expert import World, parse_goal  # noqa: E402

ENV_ID = "AgentGym/ALFWorld-v0"


@pytest.fixture(scope="module")
def env():
    env = gym.make(ENV_ID)
    yield env
    env.close()


def play_oracle(env, **options) -> tuple[dict, list[str], float]:
    obs, info = env.reset(options=options)
    commands, total = [], 0.0
    while True:
        response = env.unwrapped.oracle_action()
        commands.append(response.rsplit("\n", 1)[-1])
        obs, reward, terminated, truncated, info = env.step(response)
        total += reward
        if terminated or truncated:
            return info, commands, total


# ---- generation ---------------------------------------------------------------------------------
def test_generated_games_cover_the_six_task_types_in_valid_rooms() -> None:
    for item in range(12):
        game = generator.generate_game(item)
        meta = game["agentgym"]
        assert meta["task_type"] == generator.TASK_TYPES[item % 6]
        assert meta["room"] in generator.ROOMS_OF_TYPE[meta["task_type"]]
        assert f"Your task is to: {meta['goal']}." in game["grammar"]
        assert 'template :: "put {o} in/on {r}";' in game["grammar"]
        assert game["pddl_domain"].startswith(";; Specification in PDDL of the Alfred domain")
        goal = parse_goal(game["pddl_problem"])
        kind = {"pick_and_place_simple": "place", "look_at_obj_in_light": "look", "pick_two_obj_and_place": "two",
                "pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
                "pick_cool_then_place_in_recep": "cool"}[meta["task_type"]]
        assert goal is not None and goal.kind == kind and goal.object_type == meta["object_type"].lower()


def test_generation_is_deterministic_and_cached_on_disk(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path))
    assert generator.generate_game(17) == generator.generate_game(17) != generator.generate_game(23)
    path = generator.game_path(17)
    assert path.is_relative_to(tmp_path) and json.loads(path.read_text()) == generator.generate_game(17)
    mtime = path.stat().st_mtime_ns
    assert generator.game_path(17) == path and path.stat().st_mtime_ns == mtime  # reused, not rewritten


def test_alfworld_display_names() -> None:
    ids = ["cabinet_bar__plus_00_dot_68_bar__plus_00_dot_50", "cabinet_bar__minus_01_dot_00_bar__plus_00_dot_40",
           "sink_bar__minus_01_dot_90_bar__plus_00_dot_97_bar_sinkbasin", "agent1", "appletype"]
    names = display_names(ids)
    assert names["cabinet_bar__minus_01_dot_00_bar__plus_00_dot_40"] == "cabinet 2"  # first sorted id: highest number
    assert names["cabinet_bar__plus_00_dot_68_bar__plus_00_dot_50"] == "cabinet 1"
    assert names["sink_bar__minus_01_dot_90_bar__plus_00_dot_97_bar_sinkbasin"] == "sinkbasin 1"
    assert names["agent1"] == "agent1" and names["appletype"] == "appletype"


def test_splits_200_test_games_and_thousands_of_train_games() -> None:
    spec = agentgym_envs.get_task(ENV_ID)
    test, train = spec.split("test"), spec.split("train")
    assert sorted(test) == list(range(200)) and len(train) == 3000 and not set(test) & set(train)
    table = agentgym_envs.core.load_splits("alfworld")
    assert {name: len(v["test"]) for name, v in table.items()} == {
        "Pick": 34, "Look": 34, "Clean": 33, "Heat": 33, "Cool": 33, "PickTwo": 33}
    assert build_splits.build() == table


# ---- the engine is TextWorld's ------------------------------------------------------------------
def test_engine_matches_textworld_pddl_env_text_and_commands() -> None:
    """Our fast path gives exactly what TextWorld's own PddlEnv (with ALFWorld's names) gives."""
    from textworld import EnvInfos
    from textworld.envs.pddl import PddlEnv

    game = json.loads(generator.game_path(2).read_text())
    stock = PddlEnv(EnvInfos(admissible_commands=True))
    stock.load(game)
    names = display_names(list(stock._entity_infos))
    for key, info in stock._entity_infos.items():
        info.name = names[key]
    state = stock.reset()
    ours = AlfredEngine()
    try:
        ours.load(game)
        assert state.feedback == "-= Welcome to TextWorld, ALFRED! =-\n\n" + ours.reset()
        assert state["admissible_commands"] == ours.admissible_commands
        rng = np.random.default_rng(0)
        for _ in range(12):
            command = ours.admissible_commands[int(rng.integers(len(ours.admissible_commands)))]
            state, _, _ = stock.step(command)
            assert ours.step(command) == state.feedback
            assert ours.admissible_commands == state["admissible_commands"] and ours.won == state["won"]
    finally:
        ours.close()


def test_planner_fallback_solves_a_game() -> None:
    game = json.loads(generator.game_path(3).read_text())
    ours = AlfredEngine(generator.cache_dir())
    try:
        ours.load(game)
        ours.reset()
        plan = ours.plan()
        assert 3 <= len(plan) <= 12
        for command in plan:
            assert ours.step(command) is not None
        assert ours.won
    finally:
        ours.close()


# ---- the gym env --------------------------------------------------------------------------------
def test_observation_lists_available_actions_like_the_info(env) -> None:
    """AgentGym's first observation: the room, the task and the actions joined by commas; later
    observations are TextWorld's feedback alone (``extra_feedback=True`` lists the actions each turn)."""
    obs, info = env.reset(options={"split": "test", "index": 0})
    assert obs.startswith("You are in the middle of a room.") and f"\nYour task is to: {info['goal']}." in obs
    listed = obs.rsplit("\nAVAILABLE ACTIONS: ", 1)[1].split(",")
    obs, *_ = env.step(f"Action:\n{listed[0]}")
    assert "AVAILABLE ACTIONS" not in obs
    assert listed == info["available_actions"] and "look" in listed and "inventory" in listed
    assert all(a.startswith("go to ") for a in listed if a not in ("help", "inventory", "look"))
    assert info["task_type"] == "pick_and_place_simple" and info["subtask"] == "Pick"


def test_oracle_solves_two_test_games_of_each_type(env) -> None:
    spec = agentgym_envs.get_task(ENV_ID)
    by_type = {}
    for item in spec.split("test"):
        by_type.setdefault(item % 6, []).append(item)
    for items in by_type.values():
        for item in items[:2]:
            info, commands, total = play_oracle(env, item_id=item)
            assert info["success"] and total == 1.0 and info["turn"] <= spec.max_turns, (item, commands)
            assert info["score"] == 1.0


def test_command_spellings_old_and_new(env) -> None:
    """By default a command runs only as spelled (TextWorld's exact lookup), or in ALFWorld's other put
    spelling; our forgiving spellings (case, punctuation, synonyms, "the") need ``extra_feedback=True``."""
    lenient = gym.make(ENV_ID, extra_feedback=True)
    for game, strict in ((env, True), (lenient, False)):
        game.reset(options={"item_id": 0})  # put a newspaper in diningtable
        base = game.unwrapped
        world = World(base.engine.facts())
        obj = next(o for o in world.objects(base.goal.object_type) if o in world.inside)
        holder = world.inside[obj]
        target = world.receptacles(base.goal.receptacle_type)[0]
        exact = [f"go to {holder}", f"open {holder}" if world.closed(holder) else None,
                 f"take {obj} from {holder}", f"go to {target}"]
        forgiving = [f"Go to {holder}.", None, f"Pick up {obj} from the {holder}.", f"goto {target}"]
        for right, loose in zip(exact, forgiving):
            if loose is None:  # opening the holder, when it is closed, is spelled as it is
                if right is not None:
                    game.step("Action: " + right)
                continue
            obs, _, _, _, info = game.step("Action: " + loose)
            assert info["valid_action"] is not strict, (loose, obs)
            if strict:
                assert obs == "Nothing happens."
                obs, _, _, _, info = game.step("Action: " + right)
                assert info["valid_action"], (right, obs)
        if World(base.engine.facts()).closed(target):
            game.step(f"Action: open {target}")
        obs, reward, terminated, _, info = game.step(f"Action: move {obj} to {target}")  # alfworld 0.4.2's spelling
        assert info["valid_action"] and terminated and info["success"] and reward == 1.0
    lenient.close()


def test_toggle_is_use(env) -> None:
    info, commands, _ = play_oracle(env, item_id=1)  # a look-at-in-light game
    assert info["success"] and commands[-1].startswith("use ")
    env.reset(options={"item_id": 1})
    for command in commands[:-1]:
        env.step("Action: " + command)
    lamp = commands[-1].removeprefix("use ")
    holder = World(env.unwrapped.engine.facts()).inside[lamp]
    obs, reward, terminated, _, info = env.step(f"Action: toggle {lamp} {holder}")  # AgentGym's toggle spelling
    assert info["valid_action"] and terminated and reward == 1.0


def test_invalid_commands_explain_what_is_wrong() -> None:
    """With ``extra_feedback=True``; by default a refused command gets TextWorld's "Nothing happens."."""
    env = gym.make(ENV_ID, extra_feedback=True)
    env.reset(options={"item_id": 3})  # a heat task in a kitchen
    base = env.unwrapped
    world = World(base.engine.facts())

    def expect(command: str, message: str) -> None:
        obs, reward, terminated, _, info = env.step(command)
        assert not info["valid_action"] and reward == 0.0 and not terminated, (command, obs)
        assert obs.startswith("Nothing happens: ") and message in obs.split("\nAVAILABLE ACTIONS")[0], (command, obs)

    expect("take apple 9 from countertop 1", "there is no 'apple 9' here.")
    expect("go to fridge", "name the fridge with its number, e.g. 'fridge 1'.")
    expect("dance wildly", "is not a command of this game")
    obj = next(o for o in world.objects(base.goal.object_type) if o in world.inside)
    holder = world.inside[obj]
    expect(f"take {obj} from {holder}", f"you are not at the {holder}; go to it first.")
    expect(f"put {obj} in/on {holder}", f"you are not carrying the {obj}.")
    closed = next((r for r in world.receptacles() if world.closed(r) and any(v == r for v in world.inside.values())),
                  None)
    if closed is not None:
        env.step(f"go to {closed}")
        inside = next(o for o, r in World(base.engine.facts()).inside.items() if r == closed)
        expect(f"take {inside} from {closed}", f"the {closed} is closed; open it first.")
    env.step(f"go to {holder}")
    if World(base.engine.facts()).closed(holder):
        env.step(f"open {holder}")
    assert env.step(f"take {obj} from {holder}")[4]["valid_action"]
    other = next(o for o, r in World(base.engine.facts()).inside.items() if r == holder and o != obj) if \
        any(r == holder and o != obj for o, r in World(base.engine.facts()).inside.items()) else None
    if other:
        expect(f"take {other} from {holder}", f"you are already carrying the {obj}")
    fridge = World(base.engine.facts()).receptacles("fridge")[0]
    expect(f"heat {obj} with {fridge}", "you can only heat things with a microwave.")
    # the episode is still playable: the oracle finishes it
    while True:
        _, _, terminated, truncated, info = env.step(base.oracle_action())
        if terminated or truncated:
            break
    assert info["success"]
    env.close()


def test_translation_cache_on_disk_is_used(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path))
    first = gym.make(ENV_ID)
    obs_first, _ = first.reset(options={"item_id": 5})
    first.close()
    assert list(tmp_path.rglob("game-5.tw-pddl")) and list(tmp_path.rglob("*.sas.gz"))
    engine._MEMORY_TRANSLATIONS.clear()
    import fast_downward

    def no_grounding(*args, **kwargs):
        raise AssertionError("the cached translation should have been used")

    monkeypatch.setattr(fast_downward, "pddl2sas", no_grounding)
    second = gym.make(ENV_ID)
    obs_second, _ = second.reset(options={"item_id": 5})
    second.close()
    assert obs_second == obs_first


def test_finished_games_leave_textworld_memo(env) -> None:
    from mementos.core import _memento_cache

    env.reset(options={"item_id": 7})
    first_ids = {o.name for o in env.unwrapped.engine._translation.task.objects if "_bar_" in o.name}
    for item in (8, 9):
        env.reset(options={"item_id": item})

    def mentions_first_game(key) -> bool:
        return isinstance(key, tuple) and len(key) == 3 and isinstance(key[2], tuple) and any(
            isinstance(arg, tuple) and arg[0] in first_ids for arg in key[2])

    assert first_ids and not [key for key in list(_memento_cache) if mentions_first_game(key)]


def test_same_episode_in_another_process_with_another_hash_seed() -> None:
    script = ("import gymnasium as gym, agentgym_envs\n"
              "env = gym.make('AgentGym/ALFWorld-v0')\n"
              "obs, info = env.reset(options={'item_id': 4})\n"
              "out = [obs]\n"
              "for _ in range(8):\n"
              "    obs, r, te, tr, info = env.step(env.unwrapped.oracle_action()); out.append(obs)\n"
              "    if te: break\n"
              "print(repr(out))\n")
    outputs = []
    for seed in ("1", "2"):
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                                env={**os.environ, "PYTHONHASHSEED": seed})
        assert result.returncode == 0, result.stderr[-2000:]
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]


# ---- real ALFWorld game files -------------------------------------------------------------------
def _fake_alfworld_tree(root: Path) -> None:
    """An ALFWorld-style data folder: json_2.1.1/<split>/<task>/<trial>/game.tw-pddl + traj_data.json,
    with alfworld 0.4.2's own grammar (``move X to Y``) and the goal left as ``UNKNOWN GOAL``."""
    game = generator.generate_game(3)  # heat some apple and put it in countertop
    meta = game.pop("agentgym")
    _, grammar_path, _ = generator.alfworld_paths()
    game["grammar"] = grammar_path.read_text()
    trial = "pick_heat_then_place_in_recep-Apple-None-CounterTop-14"
    folder = root / "json_2.1.1" / "valid_unseen" / trial / "trial_T1"
    folder.mkdir(parents=True)
    (folder / "game.tw-pddl").write_text(json.dumps(game))
    (folder / "traj_data.json").write_text(json.dumps({
        "task_type": meta["task_type"],
        "pddl_params": {"object_target": meta["object_type"], "parent_target": meta["receptacle_type"],
                        "toggle_target": "", "mrecep_target": "", "object_sliced": False}}))
    broken = root / "json_2.1.1" / "valid_unseen" / "pick_and_place_simple-Mug-None-Desk-1" / "trial_T2"
    broken.mkdir(parents=True)
    (broken / "game.tw-pddl").write_text(json.dumps({**game, "solvable": False}))


def test_real_alfworld_game_directory(tmp_path) -> None:
    _fake_alfworld_tree(tmp_path)
    env = gym.make(ENV_ID, game_dir=str(tmp_path / "json_2.1.1" / "valid_unseen"))
    try:
        base = env.unwrapped
        assert len(base.game_files) == 1  # the unsolvable game is skipped
        obs, info = env.reset()
        assert info["split"] == "test" and info["item_id"] == 0 and info["subtask"] == "Heat"
        assert info["goal"] == "put a hot apple in countertop"
        assert "Your task is to: put a hot apple in countertop." in obs
        with pytest.raises(ValueError, match="not an item"):
            env.reset(options={"item_id": 1})
        info, commands, total = play_oracle(env, split="test", index=0)
        assert info["success"] and total == 1.0
        assert commands[-1].startswith("move ") and " to " in commands[-1]  # the game's own put spelling
        env.reset(options={"split": "test", "index": 0})
        for command in commands[:-1]:
            env.step("Action: " + command)
        obj, recep = commands[-1].removeprefix("move ").split(" to ")
        _, reward, terminated, _, info = env.step(f"Action: put {obj} in/on {recep}")  # AgentGym's spelling still works
        assert terminated and reward == 1.0
    finally:
        env.close()


def test_damaged_or_foreign_cache_files_are_regenerated(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path))
    path = generator.game_file(11)
    path.parent.mkdir(parents=True)
    path.write_text("{ not json")
    assert generator.load_game(11) == generator.generate_game(11)
    path.write_text(json.dumps(generator.generate_game(12)))  # another item's game under this name
    assert generator.load_game(11)["agentgym"]["item_id"] == 11
    assert json.loads(path.read_text())["agentgym"]["item_id"] == 11
