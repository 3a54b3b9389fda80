"""Reverse curriculum from the oracle (R³): replayed prefixes, their clamp and budget, the loss mask, the schedule,
a tiny training run that logs k, and the learning curve over kept checkpoints."""

from __future__ import annotations

import json
import logging
import os

import gymnasium as gym
import pytest
import torch
from datasets import Dataset

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import agent_envs  # noqa: E402, F401  (registers the test envs)
from agent_envs import COUNTDOWN, CountdownEnv  # noqa: E402
from test_trainer import countdown_rows, make_trainer  # noqa: E402

from agentgym_envs.agents import BaseAgent, OracleAgent  # noqa: E402
from agentgym_envs.core.episode import MAX_TURNS, TERMINATED  # noqa: E402
from agentgym_envs.core.loop import EnvPool, EpisodeStart, play_batch  # noqa: E402
from agentgym_envs.core.tasks import get_task  # noqa: E402
from agentgym_trl import ScheduleError, env_rows  # noqa: E402
from agentgym_trl.learning_curve import main as learning_curve_main  # noqa: E402
from agentgym_trl.metrics import ORACLE_PREFIX_K as PREFIX_K  # noqa: E402
from agentgym_trl.reverse_curriculum import STATE_FILE, OraclePrefixCurriculum, PrefixSchedule  # noqa: E402

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"
NO_ORACLE = "AgentGymTest/NoOracle-v0"


class SaysOk(BaseAgent):
    """Countdown's oracle as an agent that needs no oracle: "ok" (even length) every turn."""

    def act_one(self, episode) -> str:
        return "ok"


class NoOracleEnv(CountdownEnv):
    def oracle_action(self) -> str:
        raise NotImplementedError("no oracle")


if NO_ORACLE not in gym.registry:
    gym.register(NO_ORACLE, entry_point=NoOracleEnv, max_episode_steps=30)


def oracle_episode(env_id: str, item: int) -> tuple[str, list[tuple[str, str]], bool]:
    """The oracle played by hand from the reset: the first observation, (action, observation) per step, success."""
    env = gym.make(env_id, max_episode_steps=30)
    try:
        first, _ = env.reset(seed=item, options={"item_id": item})
        steps, success = [], False
        for _ in range(30):
            action = env.unwrapped.oracle_action()
            observation, _, terminated, truncated, info = env.step(action)
            steps.append((action, observation))
            success = bool(info.get("success"))
            if terminated or truncated:
                break
        return first, steps, success
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["AgentGym/TextCraft-v0", "AgentGym/BabyAI-GoTo-v0"])
def test_a_replayed_prefix_reaches_the_state_that_playing_the_oracle_reaches(env_id: str) -> None:
    spec = get_task(env_id)
    if not spec.extra_installed():
        pytest.skip(spec.install_hint)
    item = spec.first_items("train", 1)[0]
    first, played, success = oracle_episode(env_id, item)
    assert len(played) >= 2 and success
    k = min(2, len(played) - 1)
    pool = EnvPool()
    try:
        (t,), _ = play_batch([EpisodeStart(env_id, item, max_turns=30, prefix=k)], OracleAgent(), pool)
    finally:
        pool.close()
    # the replayed turns are the conversation so far (all prompt), ending with the observation after the k-th action
    assert t.prefix_actions == [action for action, _ in played[:k]]
    assert t.messages[2]["content"] == first and t.prompt_messages == 3 + 2 * k
    replayed = t.messages[3:t.prompt_messages]
    assert replayed == [m for action, observation in played[:k]
                        for m in ({"role": "assistant", "content": action}, {"role": "user", "content": observation})]
    # from there the oracle plays on exactly as it would have: same actions, same observations, same outcome
    assert t.actions == [action for action, _ in played[k:]]
    assert [m["content"] for m in t.messages[t.prompt_messages + 1::2]] == [o for _, o in played[k:-1]]
    assert t.final_observation == played[-1][1] and t.success == success and t.stop_reason == TERMINATED


def test_a_prefix_is_clamped_to_leave_one_action_and_is_not_part_of_the_budget(caplog) -> None:
    pool = EnvPool()
    starts = [EpisodeStart(COUNTDOWN, 2, max_turns=1, prefix=5),  # a 3-action solution: 2 replayed, 1 left
              EpisodeStart(COUNTDOWN, 0, max_turns=1, prefix=2),  # a 1-action solution: nothing replayed
              EpisodeStart(COUNTDOWN, 2, max_turns=2, prefix=1),  # 1 replayed, 2 turns of the budget still left
              EpisodeStart(COUNTDOWN, 5, max_turns=1, prefix=1),  # 1 replayed, the 1-turn budget ends it unsolved
              EpisodeStart(NO_ORACLE, 2, max_turns=3, prefix=2)]  # no oracle: from the start, with a warning
    with caplog.at_level(logging.WARNING):
        trajectories, _ = play_batch(starts, SaysOk(), pool)
    pool.close()
    assert [len(t.prefix_actions) for t in trajectories] == [2, 0, 1, 1, 0]
    assert [t.turns for t in trajectories] == [1, 1, 2, 1, 3]
    assert [t.success for t in trajectories] == [True, True, True, False, True]
    assert [t.stop_reason for t in trajectories] == [TERMINATED, TERMINATED, TERMINATED, MAX_TURNS, TERMINATED]
    assert all(t.max_turns == s.max_turns for t, s in zip(trajectories, starts))
    assert trajectories[0].to_record()["prefix_actions"] == ["ok", "ok"] and trajectories[0].reward == 1.0
    assert "prefix_actions" not in trajectories[1].to_record()
    assert f"{NO_ORACLE} has no oracle" in caplog.text


def test_an_evaluation_from_an_oracle_prefix_is_a_run_of_its_own(tmp_path, capsys) -> None:
    """``agentgym eval --oracle-prefix K`` (success per k): every episode starts after K oracle actions, the run
    folder records K, and a folder of another K is refused rather than mixed."""
    from agentgym_envs.cli import main as cli_main

    out = tmp_path / "k2"
    flags = ["eval", "--env", "AgentGym/TextCraft-Depth2-v0", "--agent", "oracle", "--limit", "3",
             "--no-progress", "--out", str(out)]
    assert cli_main([*flags, "--oracle-prefix", "2"]) == 0
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["info"]["success"] for r in records)
    assert all(1 <= len(r["prefix_actions"]) <= 2 for r in records)  # clamped where 2 would finish the item
    assert any(len(r["prefix_actions"]) == 2 for r in records)
    assert json.loads((out / "run.json").read_text())["agent"]["oracle_prefix"] == 2
    assert cli_main(flags) != 0  # the same folder without the prefix: another run
    assert "oracle_prefix: 2 -> (unset)" in capsys.readouterr().err


def test_the_prefix_is_prompt_and_stays_out_of_the_loss(tmp_path) -> None:
    # dynamic sampling's refills (items of the same 3-action shape) start after the same prefix
    trainer = make_trainer(tmp_path, countdown_rows([2, 5, 8, 11]), oracle_prefix_schedule="0:2",
                           max_context_tokens=300, truncated_turn="step", dynamic_sampling=True,
                           dynamic_sampling_max_batches=2, beta=0.0)
    trainer.model.train()
    rows = [{"env_id": COUNTDOWN, "item_id": 2, "prompt": [{"role": "user", "content": "x"}]} for _ in range(4)]
    rows += [{"env_id": COUNTDOWN, "item_id": 5, "prompt": [{"role": "user", "content": "x"}]} for _ in range(4)]
    inputs = trainer._generate_and_score_completions(rows)
    trajectories = trainer.last_rollout.trajectories
    chat = trainer.chat
    for row, t in enumerate(trajectories):
        assert t.prefix_actions == ["ok", "ok"] and t.turns == 1  # item 2 and 5 need 3 actions: 2 replayed, 1 left
        # the prompt is the chat template's rendering of opening + replayed turns: assistant turns like the model's
        assert t.prompt_ids == chat.encode(chat.render(t.messages[:t.prompt_messages], add_generation_prompt=True))
        assert chat.decode(t.prompt_ids).count("ok") == 2 and "Tick 2 of 3." in chat.decode(t.prompt_ids)
        prompt = inputs["prompt_ids"][row][inputs["prompt_mask"][row].bool()].tolist()
        assert prompt == t.prompt_ids  # what TRL scores as prompt: no loss on any of it
        trained = (inputs["completion_mask"][row] * inputs["tool_mask"][row]).bool()
        completion = inputs["completion_ids"][row][inputs["completion_mask"][row].bool()].tolist()
        assert completion == t.completion_ids and int(trained.sum()) == t.model_tokens  # only the new turn's tokens
    metrics = trainer._metrics["train"]
    assert list(metrics[PREFIX_K]) == [2.0] and len(metrics["agent/success_k2"]) == 1
    assert not any(name.startswith("agent/success_k") and name != "agent/success_k2" for name in metrics)
    trainer.close_envs()


def test_the_schedule_parses_and_moves_by_steps_and_by_success(tmp_path) -> None:
    schedule = PrefixSchedule.parse("0:2,10:1,20:0")
    assert schedule.stages == ((0, 2), (10, 1), (20, 0)) and str(schedule) == "0:2,10:1,20:0"
    assert [schedule.stages[schedule.stage_index(s)][1] for s in (0, 9, 10, 19, 20, 500)] == [2, 2, 1, 1, 0, 0]
    for bad in ("0:1,5:2", "1:2", "0:2,0:1", "0:-1", "0:2,x"):
        with pytest.raises(ScheduleError):
            PrefixSchedule.parse(bad)
    curriculum = OraclePrefixCurriculum(PrefixSchedule.parse("0:2,100:1,200:0"), success_threshold=0.5, window=4)
    state = type("State", (), {"global_step": 0})()
    curriculum.on_train_begin(None, state, None)
    assert curriculum.k == 2
    metrics = curriculum.observe([{"success": 1.0, "prefix": 2}, {"success": 0.0, "prefix": 1}])
    assert metrics == {PREFIX_K: 2.0, "agent/success_k1": 0.0, "agent/success_k2": 1.0}
    state.global_step = 1
    curriculum.on_step_begin(None, state, None)
    assert curriculum.k == 2, "2 episodes are fewer than the window of 4"
    curriculum.observe([{"success": 1.0, "prefix": 2}] * 2)  # 3 of the last 4 succeeded: 0.75 >= 0.5
    state.global_step = 2
    curriculum.on_step_begin(None, state, None)
    assert curriculum.k == 1 and curriculum.recent == []
    curriculum.save(str(tmp_path))
    restored = OraclePrefixCurriculum(PrefixSchedule.parse("0:2,100:1,200:0"), success_threshold=0.5, window=4)
    assert restored.load(str(tmp_path)) and restored.k == 1
    restored.on_train_begin(None, state, None)
    assert restored.k == 1, "a resumed run keeps the stage success moved it to"
    state.global_step = 200
    restored.on_step_begin(None, state, None)
    assert restored.k == 0  # the schedule's step is the stage's latest start


def test_a_checkpoint_saved_under_another_schedule_is_not_applied_and_says_so(tmp_path, caplog) -> None:
    """The saved stage is an index into the saved schedule's stages: under another schedule it would be another k
    (issue 61, item 17). The resumed run follows its own schedule by steps, with a warning naming both."""
    saved = OraclePrefixCurriculum(PrefixSchedule.parse("0:3,100:2,200:0"), success_threshold=0.5, window=1)
    saved.moved_to = saved.stage = 1
    saved.save(str(tmp_path))
    resumed = OraclePrefixCurriculum(PrefixSchedule.parse("0:4,50:3,60:1"), success_threshold=0.5, window=1)
    with caplog.at_level(logging.WARNING, logger="agentgym_trl.reverse_curriculum"):
        assert not resumed.load(str(tmp_path))
    message = caplog.text
    assert "0:3,100:2,200:0" in message and "0:4,50:3,60:1" in message and "k=2 there" in message
    resumed.on_train_begin(None, type("State", (), {"global_step": 10})(), None)
    assert resumed.k == 4 and resumed.moved_to == 0  # not stage 1 (k=3) of this schedule
    same = OraclePrefixCurriculum(PrefixSchedule.parse("0:3, 100:2, 200:0"), success_threshold=0.5, window=1)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentgym_trl.reverse_curriculum"):
        assert same.load(str(tmp_path)) and same.k == 2  # the same schedule, however written: restored
    assert not caplog.text


def test_two_steps_log_k_and_kept_checkpoints_give_a_learning_curve(tmp_path) -> None:
    rows = Dataset.from_list(env_rows([TEXTCRAFT], max_items_per_env=2))
    settings = dict(env_ids=[TEXTCRAFT], oracle_prefix_schedule="0:1,1:0", max_steps=2, max_turns=1, beta=0.0,
                    max_turn_tokens=8, max_context_tokens=1500, item_draws="learnability")
    trainer = make_trainer(tmp_path, rows, save_strategy="steps", save_steps=1, **settings)
    trainer.train()
    logs = [h for h in trainer.state.log_history if PREFIX_K in h]
    assert [h[PREFIX_K] for h in logs] == [1.0, 0.0]
    assert "agent/success_k1" in logs[0] and "agent/success_k0" in logs[1]
    assert all(t.prefix_actions == [] for t in trainer.last_rollout.trajectories)  # step 2 starts from the reset
    trainer.close_envs()
    run = tmp_path / "run"
    for step in (1, 2):  # every checkpoint kept, with the trainer's own state beside the model
        for name in ("trainer_state.json", "item_estimates.json", STATE_FILE, "tokenizer.json"):
            assert (run / f"checkpoint-{step}" / name).is_file(), (step, name)
    resumed = make_trainer(tmp_path, rows, save_strategy="no", **settings)
    resumed.train(resume_from_checkpoint=str(run / "checkpoint-1"))
    assert [h[PREFIX_K] for h in resumed.state.log_history if PREFIX_K in h and h["step"] > 1] == [0.0]
    resumed.close_envs()
    items = get_task(TEXTCRAFT).first_items("test", 2)
    curve = learning_curve_main([str(run), "--env_ids", TEXTCRAFT, "--items", *map(str, items), "--max_turns", "1",
                                 "--max_turn_tokens", "8", "--max_context_tokens", "1500", "--bf16", "false"])
    assert json.loads((run / "learning_curve.json").read_text()) == curve
    assert [p["step"] for p in curve["steps"]] == [1, 2]
    for point in curve["steps"]:
        assert sorted(point["per_item"]) == sorted(f"{TEXTCRAFT}:{i}" for i in items)
        assert all(len(v) == 1 and v[0] in (0, 1) for v in point["per_item"].values())
        assert point["episodes"] == 2 and 0.0 <= point["success"] <= 1.0
