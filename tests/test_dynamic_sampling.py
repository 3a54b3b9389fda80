"""Dynamic sampling (groups that teach replace groups that do not), the optimizer-step guard (idle steps, non-finite
gradients), training on named items, and the rollout's progress lines."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

from agent_envs import COUNTDOWN, CRASHING_ITEM, SLOW_COUNTDOWN  # noqa: E402
from datasets import Dataset  # noqa: E402
from test_trainer import countdown_rows, make_config, make_trainer  # noqa: E402

from agentgym_trl.data import env_rows, placeholder_prompt  # noqa: E402
from agentgym_trl.dynamic_sampling import fill_informative_groups, group_varies  # noqa: E402
from agentgym_trl.item_draws import ItemDrawer  # noqa: E402
from agentgym_trl.rollout import RolloutResult  # noqa: E402


def fake_rollout(rows, reward_of) -> RolloutResult:
    trajectories = [SimpleNamespace(reward=reward_of(row, i), success=reward_of(row, i) > 0, item=row["item_id"])
                    for i, row in enumerate(rows)]
    return RolloutResult(total_s=1.0, agent_s=0.5, trajectories=trajectories)


def rows_of(items, group_size=4):
    return [{"env_id": COUNTDOWN, "item_id": item, "prompt": placeholder_prompt(COUNTDOWN, item)}
            for item in items for _ in range(group_size)]


def mixed_if_odd(row, index):  # odd items teach (rewards 0 and 1 in the group), even items all score 0
    return float(row["item_id"] % 2 == 1 and index % 2 == 0)


def test_equal_reward_groups_are_replaced_by_groups_that_teach() -> None:
    rows = rows_of([1, 2, 4, 3])  # groups 2 and 4 score 0 everywhere
    prompt_objects = [row["prompt"] for row in rows]
    result = fake_rollout(rows, mixed_if_odd)
    draws = iter([[(COUNTDOWN, 6), (COUNTDOWN, 7), (COUNTDOWN, 9)], [(COUNTDOWN, 11)]])
    played = []

    def play(new_rows):
        played.append([row["item_id"] for row in new_rows[::4]])
        return fake_rollout(new_rows, mixed_if_odd)

    stats = fill_informative_groups(rows, result, 4, play, lambda count: next(draws)[:count], max_groups=12)

    assert [row["item_id"] for row in rows[::4]] == [1, 7, 9, 3], "each empty slot took the next group that teaches"
    assert [t.item for t in result.trajectories[::4]] == [1, 7, 9, 3], "rows and episodes stay aligned"
    assert all(group_varies([t.reward for t in result.trajectories[s:s + 4]]) for s in range(0, 16, 4))
    assert rows[4]["prompt"] is prompt_objects[4] and rows[4]["prompt"] == placeholder_prompt(COUNTDOWN, 7), \
        "the prompt list TRL logs is changed in place"
    assert (stats.groups_wanted, stats.groups_kept, stats.cap_hit) == (4, 4, False)
    assert stats.groups_drawn == 4 + 3 and played == [[6, 7, 9]]
    assert stats.groups_teaching == 2 + 2, "groups 1 and 3, then 7 and 9"
    assert stats.metrics()["dynamic/drawn_success"] == pytest.approx((2 * 2 + 2 * 2) / 28)
    assert result.total_s == 2.0, "the refills' time counts in the rollout's time"


def test_a_rank_with_nothing_to_refill_plays_empty_batches_while_another_refills() -> None:
    # under ZeRO-3 / FSDP the generator's any_active says whether any rank still refills; this rank's groups all
    # teach, so it plays empty batches (joining the others' synced generation) until none does
    rows = rows_of([1, 3])
    result = fake_rollout(rows, mixed_if_odd)
    asked, played = [], []
    others_refill = iter([True, True, False])

    def more(local: int) -> bool:
        asked.append(local)
        return bool(local) or next(others_refill)

    def play(new_rows):
        played.append(len(new_rows))
        return fake_rollout(new_rows, mixed_if_odd)

    stats = fill_informative_groups(rows, result, 4, play, lambda count: [], max_groups=8, more=more)
    assert asked == [0, 0, 0] and played == [0, 0]
    assert [row["item_id"] for row in rows[::4]] == [1, 3] and stats.groups_drawn == 2 and not stats.cap_hit

def test_the_cap_stops_the_draws_and_says_so() -> None:
    rows = rows_of([2, 4])
    result = fake_rollout(rows, mixed_if_odd)
    stats = fill_informative_groups(rows, result, 4, lambda new: fake_rollout(new, mixed_if_odd),
                                    lambda count: [(COUNTDOWN, 8)] * count, max_groups=5)
    assert (stats.groups_drawn, stats.groups_kept, stats.cap_hit) == (5, 0, True)
    assert stats.metrics()["dynamic/cap_hit"] == 1.0
    assert [row["item_id"] for row in rows[::4]] == [2, 4], "nothing that teaches was found: the batch stays"


def test_rows_must_form_whole_groups() -> None:
    rows = rows_of([1])[:3]
    with pytest.raises(ValueError, match="whole groups"):
        fill_informative_groups(rows, fake_rollout(rows, mixed_if_odd), 4, None, None, 8)


def test_item_draws_repeat_per_seed_step_and_process() -> None:
    drawer = ItemDrawer([(COUNTDOWN, i) for i in range(50)], seed=3)
    assert drawer.for_step(5)(6) == drawer.for_step(5)(6)
    assert drawer.for_step(5)(6) != drawer.for_step(6)(6)
    assert drawer.for_step(5, process=1)(6) != drawer.for_step(5)(6)
    assert ItemDrawer([(COUNTDOWN, i) for i in range(50)], seed=4).for_step(5)(6) != drawer.for_step(5)(6)


def test_training_with_dynamic_sampling_logs_what_it_drew(tmp_path) -> None:
    trainer = make_trainer(tmp_path, countdown_rows(range(12)), max_steps=2, dynamic_sampling=True, beta=0.0,
                           skip_zero_advantage=True, bf16=False, max_turns=1, log_trajectories=True)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "dynamic/groups_drawn" in h]
    assert len(logs) == 2
    for log in logs:
        assert 2 <= log["dynamic/groups_drawn"] <= 8 and 0 <= log["dynamic/groups_kept"] <= 2
        assert log["dynamic/cap_hit"] == float(log["dynamic/groups_kept"] < 2)
    records = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 16 and {r["item_id"] for r in records} <= set(range(12))


def test_a_step_with_nothing_to_learn_leaves_the_weights_alone(tmp_path) -> None:
    # every episode of the crashing item ends with reward 0: no group teaches, however many are drawn
    trainer = make_trainer(tmp_path, countdown_rows([CRASHING_ITEM] * 2), max_steps=2, dynamic_sampling=True,
                           dynamic_sampling_max_batches=2, beta=0.0, skip_zero_advantage=True, bf16=False,
                           learning_rate=1e-2)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters())), "Adam's momentum moved weights"
    logs = [h for h in trainer.state.log_history if "train/idle_step" in h]
    assert [log["train/idle_step"] for log in logs] == [1.0, 1.0]
    assert all(log["dynamic/cap_hit"] == 1.0 and log["dynamic/groups_drawn"] == 4 for logs_ in [logs] for log in logs_)


def test_a_step_that_teaches_moves_the_weights(tmp_path) -> None:
    trainer = make_trainer(tmp_path, countdown_rows(range(12)), max_steps=1, beta=0.0, skip_zero_advantage=True,
                           bf16=False, learning_rate=1e-2, max_turns=1, dynamic_sampling=True)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    (log,) = [h for h in trainer.state.log_history if "train/idle_step" in h]
    if log["dynamic/groups_kept"] == 0:
        pytest.fail("no group of 12 items x 4 samples varied: the tiny model's Countdown rewards should")
    assert log["train/idle_step"] == 0.0
    assert not all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_train_items_file_limits_the_rows(tmp_path) -> None:
    path = tmp_path / "items.json"
    path.write_text(json.dumps({"AgentGym/TextCraft-Depth1-v0": [3, 1, 3]}))
    config = make_config(tmp_path, env_ids=["AgentGym/TextCraft-Depth1-v0"], train_items_file=str(path))
    assert config.train_items() == {"AgentGym/TextCraft-Depth1-v0": [3, 1, 3]}
    rows = env_rows(config.env_ids, only_items=config.train_items())
    assert [row["item_id"] for row in rows] == [1, 3]
    with pytest.raises(ValueError, match="not in its 'train' split"):
        env_rows(config.env_ids, only_items={"AgentGym/TextCraft-Depth1-v0": [0]})  # item 0 is a test item
    path.write_text(json.dumps({"AgentGym/BabyAI-GoTo-v0": [1]}))
    with pytest.raises(ValueError, match="names no items for"):
        make_config(tmp_path, env_ids=["AgentGym/TextCraft-Depth1-v0"], train_items_file=str(path))
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold"):
        make_config(tmp_path, train_items_file=str(path))


def test_dynamic_sampling_needs_whole_groups_per_process(tmp_path) -> None:
    with pytest.raises(ValueError, match="multiple of num_generations"):
        make_config(tmp_path, dynamic_sampling=True, per_device_train_batch_size=6, num_generations=4)
    with pytest.raises(ValueError, match="dynamic_sampling_max_batches"):
        make_config(tmp_path, dynamic_sampling_max_batches=0)


def test_a_step_with_non_finite_gradients_is_skipped(tmp_path, caplog) -> None:
    # as cuDNN's bf16 attention backward did on an H100 (benchmarks/results/gpu_check_h100_nan.json): one NaN
    # gradient would turn every weight into NaN at the optimizer step
    trainer = make_trainer(tmp_path, countdown_rows(range(12)), max_steps=1, bf16=False, learning_rate=1e-2,
                           max_turns=1)
    poisoned = trainer.model.model.norm.weight
    poisoned.register_hook(lambda grad: torch.full_like(grad, float("nan")))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with caplog.at_level("WARNING", logger="agentgym_trl.step_guard"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    (log,) = [h for h in trainer.state.log_history if "train/nonfinite_grad_step" in h]
    assert log["train/nonfinite_grad_step"] == 1.0 and "non-finite gradients; the step is skipped" in caplog.text
    assert not any(trainer.optimizer.state.values()), "AdamW's state was never touched"


def test_a_slow_rollout_reports_its_progress_turn_by_turn(tmp_path, capfd) -> None:
    # 0.3 s per env step: the trainer's rollout prints where it is, so a long step never looks stuck
    trainer = make_trainer(tmp_path, Dataset.from_list([{"env_id": SLOW_COUNTDOWN, "item_id": 2}] * 2),
                           env_ids=[SLOW_COUNTDOWN], max_steps=1, max_turns=3, bf16=False, rollout_progress_s=0.2)
    trainer.train()
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("[step 1 rollout]")]
    assert lines, "no progress line"
    assert all(" episodes playing, " in line and line.endswith(" s") and "tok/s" in line for line in lines)
    assert any("/8 episodes playing" in line for line in lines)
    rates = [float(line.split(" tok/s")[0].rsplit(", ", 1)[1]) for line in lines]
    assert rates[-1] > 0, "tokens are counted while the episodes play, not only when they end"
    quiet = make_trainer(tmp_path, Dataset.from_list([{"env_id": SLOW_COUNTDOWN, "item_id": 2}] * 2),
                         env_ids=[SLOW_COUNTDOWN], max_steps=1, max_turns=3, bf16=False, rollout_progress_s=0)
    quiet.train()
    assert "rollout]" not in capfd.readouterr().err
