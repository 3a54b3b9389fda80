"""The training features (``agentgym_trl.features``): one declaration each, built from the config, their hooks
called by the trainer; adding one is a module and a registration (``toy_feature.py``)."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import agent_envs  # noqa: E402, F401  (registers the test envs)
import toy_feature  # noqa: E402
from agent_envs import COUNTDOWN  # noqa: E402
from test_trainer import countdown_rows, make_config  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl import AgentGRPOTrainer  # noqa: E402
from agentgym_trl.features import FEATURES, Feature, TrainingFeature, active_features, register_feature  # noqa: E402

BUILT_IN = ["item_draws", "dynamic_sampling", "oracle_prefix", "greedy_baseline", "critic"]


def test_the_built_in_features_in_the_order_their_hooks_run() -> None:
    assert [name for name in FEATURES if name in BUILT_IN] == BUILT_IN
    with pytest.raises(ValueError, match="'critic' is registered already"):
        register_feature(FEATURES["critic"])


@pytest.mark.parametrize("overrides, expected", [
    ({}, []),
    ({"dynamic_sampling": True, "beta": 0.0}, ["item_draws", "dynamic_sampling"]),
    ({"item_draws": "learnability", "oracle_prefix_schedule": "0:2,5:0"}, ["item_draws", "oracle_prefix"]),
    ({"advantage_estimator": "remax"}, ["greedy_baseline"]),
    ({"advantage_estimator": "gae", "value_head": "shared"}, ["critic"]),
])
def test_each_feature_is_on_when_the_config_says(tmp_path, overrides, expected) -> None:
    built = active_features(make_config(tmp_path, **overrides), countdown_rows(range(4)))
    assert [name for name in built if name in BUILT_IN] == expected
    assert all(isinstance(feature, TrainingFeature) for feature in built.values())


def test_only_one_feature_may_add_a_loss(tmp_path) -> None:
    class ExtraLoss(TrainingFeature):
        adds_loss = True

    declaration = Feature(name="toy_second_loss", summary="a second loss (tests)", is_on=lambda args: True,
                          build=lambda args, rows: ExtraLoss())
    register_feature(declaration)
    try:
        with pytest.raises(ValueError, match="only one training feature may add a loss"):
            active_features(make_config(tmp_path, advantage_estimator="gae", value_head="shared"),
                            countdown_rows(range(4)))
    finally:
        del FEATURES[declaration.name]


def toy_trainer(tmp_path, **overrides) -> AgentGRPOTrainer:
    settings = dict(output_dir=str(tmp_path / "run"), env_ids=[COUNTDOWN], max_turns=1, max_turn_tokens=8,
                    max_context_tokens=400, per_device_train_batch_size=4, num_generations=4, max_steps=2,
                    report_to="none", seed=0, use_cpu=True, cpu_threads=1, beta=0.0, dataloader_num_workers=0,
                    count_episodes=True)
    tokenizer = tiny_tokenizer("chatml")
    return AgentGRPOTrainer(tiny_model(tokenizer), args=toy_feature.ToyConfig(**{**settings, **overrides}),
                            train_dataset=countdown_rows(range(8)), processing_class=tokenizer)


def test_a_feature_added_outside_the_package_trains_logs_and_resumes(tmp_path) -> None:
    """``tests/toy_feature.py`` registers a feature; its config field turns it on, the trainer calls its hooks,
    logs its metric every step, saves its state in each checkpoint and restores it on resume."""
    trainer = toy_trainer(tmp_path, save_strategy="steps", save_steps=1)
    counter = trainer.features[toy_feature.NAME]
    assert isinstance(counter, toy_feature.EpisodeCounter) and counter.trainer is trainer
    trainer.train()
    logged = [h[toy_feature.METRIC] for h in trainer.state.log_history if toy_feature.METRIC in h]
    assert logged == [4.0, 8.0] and counter.seen == 8
    checkpoint = tmp_path / "run" / "checkpoint-1"
    assert json.loads((checkpoint / toy_feature.STATE_FILE).read_text()) == {"seen": 4}
    trainer.close_envs()

    resumed = toy_trainer(tmp_path, save_strategy="no")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    restored = resumed.features[toy_feature.NAME]
    assert restored.loaded_from == str(checkpoint)
    assert [h[toy_feature.METRIC] for h in resumed.state.log_history if h.get("step", 0) > 1
            and toy_feature.METRIC in h] == [8.0], "the resumed run counts on from the checkpoint's 4"
    resumed.close_envs()
    assert toy_feature.NAME not in toy_trainer(tmp_path, count_episodes=False).features
