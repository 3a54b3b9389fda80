"""Expert trajectory collection (``agentgym collect``): conversation format, keep rules, held-out split, dataset I/O."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import agentgym_envs
from agentgym_envs.agents import first_messages
from agentgym_envs.cli import main as cli_main
from agentgym_envs.collect import (
    COLUMNS,
    dataset_row,
    HeldOutSplitError,
    KeepRule,
    collect,
    episode_plan,
    load_trajectories,
    rows_to_dataset,
    save_trajectories,
)

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"
TEXTCRAFT_DEEP = "AgentGym/TextCraft-Depth2-v0"
BABYAI = "AgentGym/BabyAI-GoTo-v0"


@pytest.mark.parametrize("env_id", [TEXTCRAFT, TEXTCRAFT_DEEP, BABYAI])
def test_oracle_episodes_become_rollout_shaped_conversations(env_id: str) -> None:
    rows, counts = collect(env_id, 4, progress=False)
    assert counts[env_id]["played"] == 4 and counts[env_id]["kept"] == len(rows) == 4
    train_items = set(agentgym_envs.get_task(env_id).split("train"))
    env = gym.make(env_id)
    for row in rows:
        assert row["item_id"] in train_items and row["split"] == "train" and row["seed"] == row["item_id"]
        assert row["info"]["success"] and 0.5 < row["return"] <= 1.0  # BabyAI's reward shrinks with the steps taken
        messages = row["messages"]
        # the opening is built exactly as the rollout builds it, from the same reset: AgentGym's three turns
        observation, info = env.reset(seed=row["seed"], options={"item_id": row["item_id"]})
        assert row["prompt_messages"] == 3 and messages[:3] == first_messages(info, observation)
        played = messages[3:]
        assert [m["role"] for m in played] == ["assistant", "user"] * (row["turns"] - 1) + ["assistant"]
        for reply in played[::2]:  # ReAct responses with a reasoning line, in the env's own format
            thought, action = reply["content"].split("\n\nAction:\n")
            assert thought.startswith("Thought:\n") and len(thought) > len("Thought:\n") and action.strip()
        # replaying the assistant turns reproduces the observations and the outcome
        for reply, next_user in zip(played[::2], [*played[1::2], None]):
            observation, _, terminated, truncated, info = env.step(reply["content"])
            if next_user is not None:
                assert next_user["content"] == observation and not (terminated or truncated)
        assert terminated and info["success"] and observation == row["final_observation"]
    env.close()


def test_the_test_split_is_refused_unless_explicitly_allowed(tmp_path: Path, capsys) -> None:
    with pytest.raises(HeldOutSplitError, match="held out"):
        collect(TEXTCRAFT, 2, split="test", progress=False)
    code = cli_main(["collect", "--env", TEXTCRAFT, "--split", "test", "--n", "2", "--out", str(tmp_path / "x")])
    assert code == 2 and "--allow-held-out-split" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    rows, _ = collect(TEXTCRAFT, 2, split="test", allow_held_out=True, progress=False)
    test_items = set(agentgym_envs.get_task(TEXTCRAFT).split("test"))
    assert {row["item_id"] for row in rows} <= test_items and {row["split"] for row in rows} == {"test"}


def test_keep_rules_select_by_success_or_reward() -> None:
    # BabyAI's reward shrinks with the steps taken, so a random agent leaves failures and a spread of successes
    every, counts = collect(BABYAI, 16, agent="random", keep=KeepRule(keep_failures=True), progress=False)
    assert len(every) == counts[BABYAI]["played"] == 16
    solved_rewards = sorted(row["return"] for row in every if row["info"]["success"])
    assert any(not row["info"]["success"] for row in every) and len(set(solved_rewards)) > 2
    solved, counts = collect(BABYAI, 16, agent="random", progress=False)  # default: solved episodes only
    assert [r["item_id"] for r in solved] == [r["item_id"] for r in every if r["info"]["success"]]
    assert counts[BABYAI]["kept"] == counts[BABYAI]["success"] == len(solved) < 16
    threshold = solved_rewards[len(solved_rewards) // 2]
    above, _ = collect(BABYAI, 16, agent="random", keep=KeepRule(min_reward=threshold), progress=False)
    assert [r["item_id"] for r in above] == [r["item_id"] for r in every if r["return"] >= threshold]
    assert 0 < len(above) < len(solved)
    assert KeepRule(min_reward=0.5).keeps(0.5, False) and not KeepRule(min_reward=0.5).keeps(0.49, True)


def test_episode_plan_covers_items_before_repeating_them_with_new_seeds() -> None:
    items = agentgym_envs.get_task(TEXTCRAFT).split("train")
    plan = episode_plan(TEXTCRAFT, "train", len(items) + 3, seed=1)
    first_pass = plan[: len(items)]
    assert sorted(item for item, _ in first_pass) == sorted(items)
    assert all(seed == item for item, seed in first_pass)
    assert all(seed != item for item, seed in plan[len(items) :])
    assert plan == episode_plan(TEXTCRAFT, "train", len(items) + 3, seed=1)
    assert plan != episode_plan(TEXTCRAFT, "train", len(items) + 3, seed=2)


def test_cli_writes_a_dataset_that_loads_back(tmp_path: Path, capsys) -> None:
    out = tmp_path / "oracle"
    code = cli_main(["collect", "--env", TEXTCRAFT, "--env", BABYAI, "--n", "3", "--out", str(out)])
    assert code == 0 and "wrote 6 conversations" in capsys.readouterr().out
    dataset = load_trajectories(out)
    assert dataset.column_names == list(COLUMNS) and len(dataset) == 6
    assert sorted(set(dataset["env_id"])) == [BABYAI, TEXTCRAFT]
    expected, _ = collect([TEXTCRAFT, BABYAI], 3, progress=False)
    assert [dataset[i] for i in range(6)] == [dataset_row(row) for row in expected]


def test_an_empty_collection_is_not_saved(tmp_path: Path) -> None:
    rows, _ = collect(TEXTCRAFT, 2, agent="random", keep=KeepRule(min_reward=2.0), progress=False)
    assert rows == []
    with pytest.raises(ValueError, match="nothing to save"):
        save_trajectories(rows, tmp_path / "empty")
    assert len(rows_to_dataset(collect(TEXTCRAFT, 1, progress=False)[0])) == 1


def test_collection_needs_neither_torch_nor_datasets_until_saving() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from agentgym_envs.collect import collect; collect('AgentGym/TextCraft-Depth1-v0', 1, "
        "progress=False); heavy = [m for m in ('torch', 'datasets', 'transformers') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr


def test_an_engine_crash_skips_one_episode_and_keeps_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentgym_envs.collect as collect_module

    real_play = collect_module.run_episode
    crashed_item = episode_plan(TEXTCRAFT, "train", 4, 0)[1][0]

    def play_or_crash(env, agent, item_id, **options):
        if item_id == crashed_item:
            raise RuntimeError("the engine died")
        return real_play(env, agent, item_id, **options)

    monkeypatch.setattr(collect_module, "run_episode", play_or_crash)
    rows, counts = collect(TEXTCRAFT, 4, progress=False)
    assert counts[TEXTCRAFT]["crashed"] == 1 and counts[TEXTCRAFT]["played"] == 3
    assert len(rows) == 3 and crashed_item not in [row["item_id"] for row in rows]


def test_a_killed_collection_resumes_and_a_rerun_never_overwrites(tmp_path: Path, capsys, monkeypatch) -> None:
    import agentgym_envs.collect as collect_module

    out = tmp_path / "oracle"
    real_play, calls = collect_module.run_episode, []

    def killed_at_the_fourth(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 4:
            raise KeyboardInterrupt  # what a kill mid-run looks like to the loop
        return real_play(*args, **kwargs)

    monkeypatch.setattr(collect_module, "run_episode", killed_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        cli_main(["collect", "--env", TEXTCRAFT, "--n", "5", "--out", str(out)])
    monkeypatch.setattr(collect_module, "run_episode", real_play)
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 1 + 3  # settings + 3 episodes

    played = []
    monkeypatch.setattr(collect_module, "run_episode", lambda *a, **k: played.append(a[2]) or real_play(*a, **k))
    assert cli_main(["collect", "--env", TEXTCRAFT, "--n", "5", "--out", str(out)]) == 0
    assert len(played) == 2 and "3 from the journal" in capsys.readouterr().out
    expected, _ = collect(TEXTCRAFT, 5, progress=False)
    dataset = load_trajectories(out)
    assert [dataset[i] for i in range(5)] == [dataset_row(row) for row in expected]

    played.clear()  # a larger --n plays only the new episodes (append)
    assert cli_main(["collect", "--env", TEXTCRAFT, "--n", "6", "--out", str(out)]) == 0
    assert len(played) == 1 and len(load_trajectories(out)) == 6

    assert cli_main(["collect", "--env", TEXTCRAFT, "--n", "6", "--seed", "1", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    other = tmp_path / "not-a-collection"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert cli_main(["collect", "--env", TEXTCRAFT, "--n", "2", "--out", str(other)]) == 2
    assert "--overwrite" in capsys.readouterr().err and (other / "notes.txt").read_text() == "mine"
    assert cli_main(["collect", "--env", TEXTCRAFT, "--n", "2", "--seed", "1", "--out", str(out), "--overwrite"]) == 0
    assert len(load_trajectories(out)) == 2
