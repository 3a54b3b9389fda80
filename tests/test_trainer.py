"""AgentGRPOTrainer with a tiny random Qwen2: loss masking, curriculum, rewards, mixtures, LoRA, bad configs."""

from __future__ import annotations

import os

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import agent_envs  # noqa: E402, F401  (registers the test envs)
import agentgym_envs  # noqa: E402
from agent_envs import COUNTDOWN  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer, ScheduleError, env_rows  # noqa: E402

TEXTCRAFT = "AgentGym/TextCraft-Depth1-v0"
BABYAI = "AgentGym/BabyAI-GoTo-v0"


def make_config(tmp_path, **overrides) -> AgentGRPOConfig:
    settings = dict(
        output_dir=str(tmp_path / "run"),
        env_ids=[COUNTDOWN],
        max_turns=3,
        max_turn_tokens=12,
        max_context_tokens=400,
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        use_cpu=True,
        dataloader_num_workers=0,
        cpu_threads=1,  # the suite runs beside other jobs; one thread each (the default would take every core)
    )
    settings.update(overrides)
    return AgentGRPOConfig(**settings)


def countdown_rows(items) -> Dataset:
    return Dataset.from_list([{"env_id": COUNTDOWN, "item_id": int(i)} for i in items])


def make_trainer(tmp_path, dataset=None, template: str = "chatml", **overrides) -> AgentGRPOTrainer:
    tokenizer = tiny_tokenizer(template)
    return AgentGRPOTrainer(
        tiny_model(tokenizer),
        args=make_config(tmp_path, **overrides),
        train_dataset=dataset if dataset is not None else countdown_rows(range(12)),
        processing_class=tokenizer,
    )


def agent_logs(trainer: AgentGRPOTrainer) -> list[dict]:
    return [h for h in trainer.state.log_history if "agent/max_turns" in h]


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_gradient_is_exactly_zero_on_prompt_and_observation_tokens(tmp_path, loss_type: str) -> None:
    trainer = make_trainer(tmp_path, loss_type=loss_type, truncated_turn="step", max_turn_tokens=10)
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this test bypasses
    rows = [dict(r) for r in countdown_rows([2, 5]) for _ in range(4)]
    for row in rows:
        row["prompt"] = [{"role": "user", "content": "x"}]
    torch.manual_seed(0)
    inputs = trainer._generate_and_score_completions(rows)
    mask = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
    assert mask.any() and (~mask & inputs["completion_mask"].bool()).any(), "need both model and observation tokens"
    inputs["advantages"] = torch.linspace(-1.0, 1.0, len(rows)) + 0.05  # every trajectory gets a non-zero signal

    captured = {}
    hook = model.model.norm.register_forward_hook(lambda m, i, out: captured.__setitem__("h", out) or out.retain_grad())
    loss = trainer.compute_loss(model, inputs)
    loss.backward()
    hook.remove()
    # The final hidden state at position p only feeds the prediction of token p + 1, so its gradient is the probe
    # of whether token p + 1 is in the loss.
    grad = captured["h"].grad.norm(dim=-1)  # (batch, prompt + completion)
    prompt_len = inputs["prompt_ids"].shape[1]
    predicts_completion = grad[:, prompt_len - 1 : -1]
    assert torch.all(grad[:, : prompt_len - 1] == 0), "prompt tokens must get no gradient"
    assert torch.all(predicts_completion[~mask] == 0), "observation tokens must get exactly zero gradient"
    assert torch.all(predicts_completion[mask] > 0), "every model token must get a gradient"


def test_schedule_changes_the_turns_and_resume_restores_the_stage(tmp_path) -> None:
    needs_three = countdown_rows([i for i in range(60) if i % 3 == 2])

    class Recorder(TrainerCallback):
        def __init__(self, trainer):
            self.trainer, self.begin_budget, self.turns = trainer, None, {}

        def on_train_begin(self, args, state, control, **kwargs):
            self.begin_budget = self.trainer.curriculum.budget

        def on_step_end(self, args, state, control, **kwargs):
            self.turns[state.global_step] = max(t.turns for t in self.trainer.last_rollout.trajectories)

    settings = dict(
        max_turns=None,
        max_turns_schedule="0:1,2:3",
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        truncated_turn="step",
    )
    trainer = make_trainer(tmp_path, needs_three, **settings)
    recorder = Recorder(trainer)
    trainer.add_callback(recorder)
    trainer.train()
    assert [h["agent/max_turns"] for h in agent_logs(trainer)] == [1, 1, 3, 3]
    assert recorder.turns == {1: 1, 2: 1, 3: 3, 4: 3}
    checkpoint = tmp_path / "run" / "checkpoint-2"
    assert checkpoint.is_dir()

    resumed = make_trainer(tmp_path, needs_three, **settings)  # a fresh process would build exactly this
    recorder = Recorder(resumed)
    resumed.add_callback(recorder)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert recorder.begin_budget == 3, "resuming at step 2 must land in the second stage"
    assert recorder.turns == {3: 3, 4: 3}
    assert [h["agent/max_turns"] for h in agent_logs(resumed) if h["step"] > 2] == [3, 3]


def test_rewards_and_success_reach_the_trainer_for_each_trajectory(tmp_path) -> None:
    seen: dict[str, list] = {}

    def spy_reward(completions, env_reward, env_success, env_turns, **kwargs):
        seen.update(env_reward=list(env_reward), env_success=list(env_success), env_turns=list(env_turns))
        return [0.0] * len(completions)

    tokenizer = tiny_tokenizer("chatml")
    args = make_config(tmp_path, truncated_turn="step", per_device_eval_batch_size=8, max_steps=1)
    trainer = AgentGRPOTrainer(
        tiny_model(tokenizer),
        args=args,
        train_dataset=countdown_rows(range(12)),
        eval_dataset=countdown_rows([1, 2]),
        processing_class=tokenizer,
        reward_funcs=[spy_reward],
    )
    torch.manual_seed(0)
    trainer.train()
    trajectories = trainer.last_rollout.trajectories
    assert seen["env_reward"] == [t.reward for t in trajectories]
    assert seen["env_success"] == [t.success for t in trajectories]
    assert seen["env_turns"] == [t.turns for t in trajectories]
    assert all(t.reward == float(t.success) for t in trajectories)
    log = agent_logs(trainer)[0]
    mean = sum(seen["env_reward"]) / len(trajectories)
    assert log["rewards/env_reward/mean"] == pytest.approx(mean)
    assert log["reward"] == pytest.approx(mean) and log["agent/success"] == pytest.approx(mean)
    assert log[f"agent/{COUNTDOWN}/reward"] == pytest.approx(mean)
    assert "kl" in log and (tmp_path / "run" / "reference_model" / "config.json").is_file()  # beta > 0 by default
    metrics = trainer.evaluate()
    assert metrics["eval_agent/max_turns"] == 30  # evaluation plays to the env's own turn cap
    # after saving, examples/grpo.py hands back the optimizer's state and the weights before its evaluation
    trainer.release_training_memory(keep_model=False)
    assert trainer.optimizer is None and all(p.device.type == "meta" for p in trainer.model.parameters())


@pytest.mark.parametrize("second", [BABYAI, COUNTDOWN])
def test_mixture_of_two_env_families_trains(tmp_path, second: str) -> None:
    if second == BABYAI:
        try:
            spec = agentgym_envs.get_task(BABYAI)
        except KeyError:
            pytest.skip("BabyAI is not registered yet")
        if not spec.extra_installed():
            pytest.skip(spec.install_hint)
        rows = env_rows([TEXTCRAFT, BABYAI], max_items_per_env=1)
    else:
        rows = env_rows([TEXTCRAFT], max_items_per_env=1) + [{"env_id": COUNTDOWN, "item_id": 2}]
    trainer = make_trainer(
        tmp_path,
        Dataset.from_list(rows),
        env_ids=[TEXTCRAFT, second],
        max_steps=2,
        max_turns=2,
        max_turn_tokens=16,
        max_context_tokens=1500,
    )
    trainer.train()
    logs = agent_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        for env_id in (TEXTCRAFT, second):
            assert f"agent/{env_id}/success" in log and f"agent/{env_id}/turns_mean" in log
        assert 1 <= log["agent/turns_mean"] <= 2 and 0 <= log["agent/valid_action_rate"] <= 1
    assert {t.env_id for t in trainer.last_rollout.trajectories} == {TEXTCRAFT, second}
    trainer.close_envs()


def test_default_dataset_comes_from_the_train_split(tmp_path) -> None:
    trainer = AgentGRPOTrainer(
        tiny_model(tiny_tokenizer("chatml")),
        args=make_config(tmp_path, env_ids=[TEXTCRAFT], max_items_per_env=5),
        processing_class=tiny_tokenizer("chatml"),
    )
    train_items = set(agentgym_envs.get_task(TEXTCRAFT).split("train"))
    assert len(trainer.train_dataset) == 5
    assert set(trainer.train_dataset["item_id"]) <= train_items and set(trainer.train_dataset["env_id"]) == {TEXTCRAFT}


def test_lora_trains_only_the_adapter(tmp_path) -> None:
    from peft import LoraConfig

    tokenizer = tiny_tokenizer("chatml")
    model = tiny_model(tokenizer)
    base_before = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    trainer = AgentGRPOTrainer(
        model,
        args=make_config(tmp_path, learning_rate=1e-2, truncated_turn="step"),
        train_dataset=countdown_rows(range(12)),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    lora_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    torch.manual_seed(0)
    trainer.train()
    params = dict(trainer.model.named_parameters())
    assert any(not torch.equal(params[n], before) for n, before in lora_before.items())
    base_after = trainer.model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
    assert torch.equal(base_after, base_before)


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        (dict(env_ids=["AgentGym/NoSuchEnv-v0"]), ValueError, "unknown env id 'AgentGym/NoSuchEnv-v0'"),
        (dict(max_turns=None, max_turns_schedule="0:10,100:5"), ScheduleError, "must not decrease"),
        (dict(max_turns=None, max_turns_schedule="0:10,50:20,50:30"), ScheduleError, "strictly increase"),
        (dict(max_turns=None, turn_rounds=[10, 20]), ScheduleError, "every"),
        (dict(max_turns_schedule="0:10"), ScheduleError, "only one of"),
        (dict(max_turn_tokens=4096, max_context_tokens=2048), ValueError, "max_turn_tokens .4096. must be smaller"),
        (dict(truncated_turn="skip"), ValueError, "truncated_turn"),
    ],
)
def test_bad_configuration_fails_at_start_with_a_clear_message(tmp_path, overrides, error, message) -> None:
    with pytest.raises(error, match=message):
        make_config(tmp_path, **overrides)


def test_bad_dataset_or_config_type_fails_at_start(tmp_path) -> None:
    tokenizer = tiny_tokenizer("chatml")
    with pytest.raises(ValueError, match="item_id"):
        AgentGRPOTrainer(
            tiny_model(tokenizer),
            args=make_config(tmp_path),
            train_dataset=Dataset.from_list([{"env_id": COUNTDOWN}]),
            processing_class=tokenizer,
        )
    with pytest.raises(ValueError, match="unknown env id"):
        AgentGRPOTrainer(
            tiny_model(tokenizer),
            args=make_config(tmp_path),
            train_dataset=Dataset.from_list([{"env_id": "Nope-v0", "item_id": 1}]),
            processing_class=tokenizer,
        )
    from trl import GRPOConfig

    with pytest.raises(TypeError, match="AgentGRPOConfig"):
        AgentGRPOTrainer(
            tiny_model(tokenizer),
            args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False),
            processing_class=tokenizer,
        )
    # TRL's own environment hooks: one line saying how envs come in instead
    for hook in ("environment_factory", "tools", "rollout_func"):
        with pytest.raises(TypeError, match="register your environment as a text Gymnasium env"):
            AgentGRPOTrainer(tiny_model(tokenizer), args=make_config(tmp_path), processing_class=tokenizer,
                             **{hook: object()})


def test_model_card_names_the_base_model_the_envs_the_curriculum_and_the_results(tmp_path) -> None:
    """push_to_hub uploads the card create_model_card writes: it must name the real base model, not None."""
    import json

    from huggingface_hub import ModelCard

    trainer = make_trainer(tmp_path, max_turns=None, max_turns_schedule="0:2,5:3")
    trainer.model.config.agentgym_base_model = "HuggingFaceTB/SmolLM2-135M-Instruct"  # as the default model carries it
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "stages.json").write_text(json.dumps({"base": {"success": 0.1, "ci95": [0.0, 0.3], "episodes": 31},
                                                 "grpo": {"success": 0.5, "ci95": [0.3, 0.7], "episodes": 31}}))
    trainer.create_model_card()
    card = ModelCard.load(run / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    smollm2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert f"[{smollm2}](https://huggingface.co/{smollm2})" in card.text
    assert "None" not in card.text and "agentgym" in card.data.tags
    assert f"`{COUNTDOWN}`" in card.text and "`0:2,5:3`" in card.text
    assert "| grpo | 50.0% | [30.0, 70.0] | 31 |" in card.text
    trainer.args.base_model_id = "me/my-base"  # the user's word wins
    trainer.create_model_card()
    assert ModelCard.load(run / "README.md").data.base_model == "me/my-base"
