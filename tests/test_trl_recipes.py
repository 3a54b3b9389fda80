"""Our envs in TRL's own GRPOTrainer (agentgym_trl.trl_recipes): the rollout_func plays multi-turn episodes with
the trainer's policy and hands TRL aligned tokens, log-probs and env mask; the environment_factory environment
plays an episode through its one tool. A tiny random Qwen2, one step (the docs page's example runs in
tests/test_docs.py on the same tiny model)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
torch.set_num_threads(1)

import agent_envs  # noqa: E402, F401  (registers the test envs)
from agent_envs import COUNTDOWN  # noqa: E402
from datasets import Dataset  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl import env_reward  # noqa: E402
from agentgym_trl.data import placeholder_prompt  # noqa: E402
from agentgym_trl.trl_recipes import EnvToolEnvironment, env_rollout_func, row_of_prompt  # noqa: E402

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"


def test_a_prompt_names_its_row_and_a_foreign_prompt_is_refused() -> None:
    assert row_of_prompt(placeholder_prompt(TEXTCRAFT, 12)) == {"env_id": TEXTCRAFT, "item_id": 12}
    with pytest.raises(ValueError, match="build_env_dataset"):
        row_of_prompt([{"role": "user", "content": "What is 2 + 2?"}])


def one_step_config(tmp_path, **settings):
    """TRL's own GRPOConfig for one CPU step in a group of 4, with ``settings`` on top."""
    from trl import GRPOConfig

    return GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, num_generations=4, report_to="none",
                      save_strategy="no", use_cpu=True, bf16=False, logging_steps=1, seed=0,
                      dataloader_num_workers=0, **settings)


def test_trls_grpo_trainer_trains_on_multi_turn_episodes(tmp_path) -> None:
    from trl import GRPOTrainer

    tokenizer = tiny_tokenizer("chatml")
    rollout = env_rollout_func(max_turns=3, max_turn_tokens=12, max_context_tokens=1500)
    args = one_step_config(tmp_path, per_device_train_batch_size=8)
    # a plain gym.register()ed env: items 1, 2, 4, 5 take 2 or 3 turns, and a random reply's reward varies
    rows = Dataset.from_list([{"prompt": placeholder_prompt(COUNTDOWN, i)} for i in (1, 2, 4, 5)])
    trainer = GRPOTrainer(
        tiny_model(tokenizer),
        reward_funcs=env_reward,
        args=args,
        processing_class=tokenizer,
        train_dataset=rows,
        rollout_func=rollout,
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    episodes = rollout.last_rollout.trajectories
    assert len(episodes) == 8 and len({(t.env_id, t.item_id) for t in episodes}) <= 2  # two GRPO groups
    assert any(t.turns > 1 for t in episodes)  # multi-turn: observations sit between the replies
    for t in episodes:
        assert len(t.completion_ids) == len(t.logprobs) == len(t.env_mask)
        assert 0 in t.env_mask and 1 in t.env_mask
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    assert 0 < trainer.state.log_history[0]["rewards/env_reward/mean"] < 1


def test_environment_factory_plays_an_episode_through_its_tool() -> None:
    import gymnasium as gym

    environment = EnvToolEnvironment(max_turns=5)
    row = {"prompt": placeholder_prompt(TEXTCRAFT, 12), "env_id": TEXTCRAFT, "item_id": 12}
    opening = environment.reset(**row)
    assert "Crafting commands" in opening and "`act` tool" in opening
    oracle = gym.make(TEXTCRAFT)
    oracle.reset(options={"item_id": 12})
    observation = ""
    while "over" not in observation:
        action = oracle.unwrapped.oracle_action()
        oracle.step(action)
        observation = environment.act(action)
    assert environment.get_reward() == 1.0
    assert environment.act("inventory").startswith("The episode is over")
    environment.reset(**row)  # TRL reuses instances across batches: reset starts afresh
    assert environment.get_reward() == 0.0


def test_trls_grpo_trainer_takes_the_env_as_its_environment_factory(tmp_path) -> None:
    """TRL probes the class (one tool, ``act``; ``get_reward`` as a reward source), resets one instance per
    rollout from its row and trains a step (a random model seldom writes a well-formed tool call)."""
    import copy

    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    from agentgym_trl import build_env_dataset

    tokenizer = copy.deepcopy(tiny_tokenizer("chatml"))
    tokenizer.chat_template = qwen3_chat_template  # a template that renders tool calls
    rows = build_env_dataset([TEXTCRAFT], max_items_per_env=4).map(
        lambda row: {"prompt": [{"role": "user", "content": ""}]}
    )
    args = one_step_config(tmp_path, per_device_train_batch_size=4, max_completion_length=16,
                           max_tool_calling_iterations=2)
    trainer = GRPOTrainer(
        tiny_model(tokenizer),
        args=args,
        processing_class=tokenizer,
        train_dataset=rows,
        environment_factory=lambda: EnvToolEnvironment(max_turns=3),
    )
    assert [tool.__name__ for tool in trainer.tools] == ["act"]
    trainer.train()
    assert len(trainer.environments) == 4 and all(env._env is not None for env in trainer.environments)
    assert "rewards/EnvToolEnvironment/mean" in trainer.state.log_history[0]


def one_id_per_env_class() -> list[str]:
    """The first registered id of each env class (every family, and each tool env of the tools family) whose extra
    is installed."""
    import agentgym_envs

    seen: dict[str, str] = {}
    for spec in agentgym_envs.list_tasks():
        if spec.entry_point not in seen and spec.extra_installed():
            seen[spec.entry_point] = spec.env_id
    return list(seen.values())


@pytest.mark.parametrize("env_id", one_id_per_env_class())
def test_the_act_tool_plays_every_familys_oracle_from_bare_commands(env_id) -> None:
    """Issue 62: a tool-calling model calls ``act(action="get 1 oak log")``. Each family's oracle, played through the
    tool with its actions alone (``info["parsed_action"]``, no ``Action:``, tags or backticks), scores what the
    oracle's whole replies score on the env, turn for turn (without the family's marker it scored 0)."""
    import gymnasium as gym

    import agentgym_envs

    item = agentgym_envs.get_task(env_id).split("train")[0]
    tool = EnvToolEnvironment()
    tool.reset(env_id=env_id, item_id=item)
    env = gym.make(env_id)
    env.reset(options={"item_id": item})
    total, over = 0.0, False
    try:
        while not over:
            observation, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            total, over = total + reward, terminated or truncated
            bare = info["parsed_action"].removeprefix("Action:").strip()
            assert not any(mark in bare for mark in ("Action:", "<search>", "<answer>", "```")), bare
            assert tool.act(bare).startswith(observation), bare
        assert total > 0 and tool.get_reward() == pytest.approx(total)
    finally:
        env.close()
        tool._env.close()
