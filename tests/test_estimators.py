"""The estimator registry: each declaration is consistent, and a new entry is all the config and trainer need."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import agent_envs  # noqa: E402, F401  (registers the test envs)
from test_algorithms import scored  # noqa: E402
from test_trainer import make_config, make_trainer  # noqa: E402

from agentgym_trl.config import AgentGRPOConfig  # noqa: E402
from agentgym_trl.estimators import (  # noqa: E402
    EPISODE,
    ESTIMATORS,
    TOKEN,
    Estimator,
    episode_level_advantages,
    estimator_named,
)


def no_baseline(returns, groups, scale, greedy_returns):
    return torch.zeros_like(returns), torch.ones_like(returns)


REINFORCE = Estimator("reinforce", "the plain return, no baseline", EPISODE, baseline=no_baseline, min_group_size=1)


def test_each_declaration_is_consistent() -> None:
    # the order of the config's messages
    assert list(ESTIMATORS) == ["grpo", "rloo", "reinforce_pp", "remax", "gae", "rft"]
    for name, estimator in ESTIMATORS.items():
        assert estimator.name == name and estimator.level in (EPISODE, TOKEN)
        assert (estimator.baseline is not None) == (estimator.level == EPISODE) == estimator.supports_turn_credit
        assert (estimator.token_advantages is not None) == (estimator.level == TOKEN)
    assert [n for n, e in ESTIMATORS.items() if e.same_as_trl] == ["grpo"]
    assert [n for n, e in ESTIMATORS.items() if e.kl_in_reward] == ["reinforce_pp"]
    assert [n for n, e in ESTIMATORS.items() if e.needs_critic] == ["gae"]
    assert [n for n, e in ESTIMATORS.items() if e.needs_greedy_rollout] == ["remax"]
    with pytest.raises(ValueError, match="gives a baseline"):
        Estimator("half", "no maths", EPISODE)
    with pytest.raises(ValueError, match="advantage_estimator must be one of"):
        estimator_named("ppo")


def test_the_config_help_names_every_estimator() -> None:
    fields = {f.name: f for f in dataclasses.fields(AgentGRPOConfig)}
    help_text = fields["advantage_estimator"].metadata["help"]
    assert all(f"'{name}' ({e.summary})" in help_text for name, e in ESTIMATORS.items())
    assert "for grpo / rloo / remax / rft:" in fields["turn_credit"].metadata["help"]


def test_a_new_estimator_is_one_entry(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(ESTIMATORS, REINFORCE.name, REINFORCE)
    config = make_config(tmp_path, advantage_estimator="reinforce", turn_credit="per_turn")
    assert config.custom_advantages
    with pytest.raises(ValueError, match="value_head is used only by 'gae', not by 'reinforce'"):
        make_config(tmp_path, advantage_estimator="reinforce", value_head="shared")

    rewards, mask = torch.tensor([[0.0, 1.0], [0.0, 0.0]]), torch.ones(2, 2)
    advantages = episode_level_advantages(rewards, mask, torch.zeros(2, 2, dtype=torch.long), torch.tensor([0, 0]),
                                          estimator="reinforce", credit="none")
    assert advantages.tolist() == [1.0, 0.0], "the return itself"

    trainer = make_trainer(tmp_path, advantage_estimator="reinforce", truncated_turn="step", max_turn_tokens=10)
    inputs = scored(trainer)
    rewards = torch.tensor([t.reward for t in trainer.last_rollout.trajectories])
    assert torch.allclose(inputs["advantages"].cpu(), rewards)


def test_a_group_size_the_estimator_cannot_use_fails_when_the_config_is_built(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(ESTIMATORS, "big_groups", dataclasses.replace(REINFORCE, name="big_groups", min_group_size=16))
    with pytest.raises(ValueError, match="needs num_generations >= 16"):
        make_config(tmp_path, advantage_estimator="big_groups")


def test_explained_variance_is_cleanrls() -> None:
    import math

    from agentgym_trl.estimators import explained_variance

    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])

    def mean(values: torch.Tensor) -> float:
        return float((values * mask).sum() / mask.sum())

    targets = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    assert explained_variance(targets.clone(), targets, mean) == pytest.approx(1.0)  # a perfect critic
    assert explained_variance(torch.full_like(targets, 2.0), targets, mean) == pytest.approx(0.0, abs=1e-5)  # the mean
    assert math.isnan(explained_variance(torch.zeros_like(targets), torch.ones_like(targets), mean))  # no variance


def test_metric_names_live_in_metrics_py() -> None:
    """No module but metrics.py spells a namespaced metric name: the others import its constants."""
    import ast
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "agentgym_trl"
    shape = re.compile(r"^[a-z_]{2,}/[a-z_]{2,}$")
    spelled = {}
    for path in sorted(package.rglob("*.py")):
        if path.name == "metrics.py":
            continue
        names = {node.value for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and shape.match(node.value)}
        if names:
            spelled[str(path.relative_to(package))] = sorted(names)
    assert not spelled, f"metric names spelled outside metrics.py: {spelled}"
