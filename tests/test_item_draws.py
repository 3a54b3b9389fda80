"""Learnability-aware item draws: the teaching probability, draws by weight (never below the floor), reproducibility,
checkpointed estimates, and the trainer drawing, counting and logging them."""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

from agent_envs import COUNTDOWN  # noqa: E402
from test_trainer import countdown_rows, make_config, make_trainer  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl.item_draws import (  # noqa: E402
    ESTIMATES_FILE,
    LearnabilityDrawer,
    assign_items,
    beta_moment,
    group_rows,
    item_rows,
    replace_row,
    teach_probability,
)

ITEMS = [(COUNTDOWN, i) for i in range(20)]


def test_the_teaching_probability_is_the_beta_predictive_one() -> None:
    # Beta(1, 1) is uniform: E[p^2] = 1/3, so a pair differs with probability 1 - 2/3
    assert teach_probability(0, 0, group_size=2, prior=2.0) == pytest.approx(1 / 3)
    rng = np.random.default_rng(0)
    p = rng.beta(2.3, 6.7, size=400_000)  # 2 successes and 6 failures seen under Beta(0.3, 0.7)
    monte_carlo = np.mean(1 - p**4 - (1 - p) ** 4)
    assert teach_probability(2, 6, group_size=4, prior=1.0, prior_mean=0.3) == pytest.approx(monte_carlo, abs=2e-3)
    assert beta_moment(3.0, 1.0, 0) == 1.0
    unseen, mixed = teach_probability(0, 0, 4, 1.0), teach_probability(4, 4, 4, 1.0)
    always_failed, always_solved = teach_probability(0, 16, 4, 1.0), teach_probability(16, 0, 4, 1.0)
    assert mixed > unseen > always_failed and always_failed == pytest.approx(always_solved)
    assert always_failed < unseen / 4
    # in a pool that mostly fails, one group that failed is enough to sink an item
    assert teach_probability(0, 4, 4, 1.0, prior_mean=0.1) < teach_probability(0, 4, 4, 1.0, prior_mean=0.5) / 2


def test_items_that_cannot_teach_are_drawn_rarely_but_never_forgotten() -> None:
    drawer = LearnabilityDrawer(ITEMS, seed=0, group_size=4, floor=0.05)
    drawer.observe([(COUNTDOWN, i, False) for i in range(10) for _ in range(40)])  # items 0-9: never solved
    drawer.observe([(COUNTDOWN, i, k % 2 == 0) for i in range(10, 20) for k in range(8)])  # items 10-19: half
    counts = Counter(item for step in range(300) for _, item in drawer.for_step(step)(1))
    hopeless, teaching = sum(counts[i] for i in range(10)), sum(counts[i] for i in range(10, 20))
    assert teaching > 8 * hopeless, counts
    assert hopeless > 0, "the floor keeps hopeless items in the draw"
    assert all(weight >= 0.05 for weight in drawer.weights())


def test_draws_repeat_per_seed_step_and_process_without_repeats_within_a_step() -> None:
    drawer = LearnabilityDrawer(ITEMS, seed=3, group_size=4)
    draw = drawer.for_step(5)
    first, second = draw(12), draw(8)
    assert len(set(first + second)) == 20, "within a step no item repeats while others remain"
    assert len(draw(3)) == 3, "past every item, a step draws afresh"
    assert drawer.for_step(5)(6) == drawer.for_step(5)(6)
    assert drawer.for_step(5)(6) != drawer.for_step(6)(6)
    assert drawer.for_step(5, process=1)(6) != drawer.for_step(5)(6)
    assert drawer.for_step(5, process=None)(6) == drawer.for_step(5, process=None)(6) != drawer.for_step(5)(6), \
        "the global batch's draw is the same on every process"


def test_estimates_survive_a_checkpoint(tmp_path) -> None:
    drawer = LearnabilityDrawer(ITEMS, seed=0, group_size=4)
    drawer.observe([(COUNTDOWN, 3, True), (COUNTDOWN, 3, False), (COUNTDOWN, 7, False), ("AgentGym/Other-v0", 1, True)])
    drawer.save(tmp_path)
    restored = LearnabilityDrawer(ITEMS, seed=0, group_size=4)
    assert restored.load(tmp_path)
    assert np.array_equal(restored.successes, drawer.successes) and np.array_equal(restored.failures, drawer.failures)
    assert restored.successes.sum() == 1, "episodes of items outside the train set are not counted"
    assert not LearnabilityDrawer(ITEMS, seed=0, group_size=4).load(tmp_path / "elsewhere")


def test_assigning_items_rewrites_whole_groups_in_place() -> None:
    rows = group_rows([(COUNTDOWN, 1), (COUNTDOWN, 2)], 3)
    prompts = [row["prompt"] for row in rows]
    assign_items(rows, [(COUNTDOWN, 8), (COUNTDOWN, 9)], 3)
    assert [row["item_id"] for row in rows] == [8, 8, 8, 9, 9, 9]
    assert rows[4]["prompt"] is prompts[4] and "item 9" in rows[4]["prompt"][0]["content"]
    with pytest.raises(ValueError, match="do not cover rows 0-5"):
        assign_items(rows, [(COUNTDOWN, 1), (COUNTDOWN, 2)], 2)
    # a process's half of a global batch whose group of 4 spans two processes of 2 rows each
    second = group_rows([(COUNTDOWN, 1)], 2)
    assign_items(second, [(COUNTDOWN, 5)], 4, offset=2)
    assert [row["item_id"] for row in second] == [5, 5]


def test_bad_learnability_settings_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="item_draws must be one of"):
        make_config(tmp_path, item_draws="greedy")
    with pytest.raises(ValueError, match="learnability_floor"):
        make_config(tmp_path, item_draws="learnability", learnability_floor=0.0)


def test_training_draws_by_learnability_counts_every_episode_and_resumes_its_estimates(tmp_path) -> None:
    trainer = make_trainer(tmp_path, countdown_rows(range(12)), max_steps=2, item_draws="learnability",
                           dynamic_sampling=True, beta=0.0, skip_zero_advantage=True, bf16=False, max_turns=1,
                           log_trajectories=True, save_strategy="steps", save_steps=2)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "items/estimate_spread" in h]
    assert len(logs) == 2 and all(0 < log["items/drawn_teach_prob"] <= 1 for log in logs)
    records = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    drawer = trainer.features["item_draws"].drawer
    played = sum(log["dynamic/drawn_episodes"] for log in logs)
    assert drawer.successes.sum() + drawer.failures.sum() == played >= len(records) == 16, \
        "every episode played, refills thrown away included, is counted once"
    saved = json.loads((tmp_path / "run" / "checkpoint-2" / ESTIMATES_FILE).read_text())
    assert sum(saved["successes"]) + sum(saved["failures"]) == played
    resumed = make_trainer(tmp_path, countdown_rows(range(12)), max_steps=2, item_draws="learnability",
                           beta=0.0, bf16=False, max_turns=1)
    resumed._load_from_checkpoint(str(tmp_path / "run" / "checkpoint-2"))
    assert np.array_equal(resumed.features["item_draws"].drawer.failures, drawer.failures)


def test_a_moved_row_takes_its_new_items_whole_row_or_is_refused() -> None:
    """Issue 62: replace_row changed env_id, item_id and prompt and left a judge's reference answer of another
    item. A moved row takes the new item's whole row; a column the new row lacks is refused."""
    table = item_rows([{"env_id": COUNTDOWN, "item_id": i, "reference": f"answer {i}"} for i in range(4)])
    rows = group_rows([(COUNTDOWN, 1)], 2, table)
    assert rows[0] == {"env_id": COUNTDOWN, "item_id": 1, "reference": "answer 1"} and rows[0] is not table[
        (COUNTDOWN, 1)]
    assign_items(rows, [(COUNTDOWN, 3)], 2, table=table)
    assert [(row["item_id"], row["reference"]) for row in rows] == [(3, "answer 3")] * 2
    with pytest.raises(ValueError, match=r"keeps the columns \['reference'\]"):
        replace_row(rows[0], group_rows([(COUNTDOWN, 2)], 1)[0])  # a row without the column: refused
    assert rows[0]["reference"] == "answer 3"


def test_reward_functions_read_the_columns_of_the_item_a_moved_row_played(tmp_path) -> None:
    """Learnability draws and dynamic sampling's refills move rows: a reward function reading a dataset column
    (a judge's reference answer) gets the column of the item its episode played, every time."""
    from datasets import Dataset

    from agentgym_trl import AgentGRPOTrainer

    dataset = Dataset.from_list([{"env_id": COUNTDOWN, "item_id": i, "reference": f"answer {i}"} for i in range(12)])
    seen: list[tuple[int, str]] = []

    def judge(completions, item_id, reference, **_):
        seen.extend(zip(item_id, reference))
        return [0.0] * len(completions)

    tokenizer = tiny_tokenizer("chatml")
    trainer = AgentGRPOTrainer(
        tiny_model(tokenizer), reward_funcs=[judge], train_dataset=dataset, processing_class=tokenizer,
        args=make_config(tmp_path, item_draws="learnability", dynamic_sampling=True, beta=0.0, bf16=False,
                         max_turns=1))
    trainer.train()
    assert len(seen) == 8 and all(reference == f"answer {item}" for item, reference in seen), seen
