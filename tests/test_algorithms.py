"""Every advantage estimator and turn-level credit mode through AgentGRPOTrainer on a tiny random Qwen2."""

from __future__ import annotations

import os
import sys

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

import agent_envs  # noqa: E402, F401  (registers the test envs)
from test_trainer import countdown_rows, make_config, make_trainer  # noqa: E402
from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl import AgentGRPOTrainer  # noqa: E402
from agentgym_trl import advantages as adv  # noqa: E402
from agentgym_trl.credit import answered_observations, turn_rewards_of  # noqa: E402
from agentgym_trl.value_head import VALUE_HEAD_FILE  # noqa: E402


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(advantage_estimator="ppo"), "advantage_estimator must be one of"),
        (dict(turn_credit="turn"), "turn_credit must be one of"),
        (dict(turn_reward="bonus"), "turn_reward must be one of"),
        (dict(loss_type="grpoo"), "loss_type must be one of"),
        (dict(advantage_estimator="gae"), "needs a critic: set value_head"),
        (dict(value_head="shared"), "value_head is used only by 'gae'"),
        (dict(advantage_estimator="gae", value_head="critic"), "value_head must be one of"),
        (dict(advantage_estimator="reinforce_pp", turn_credit="per_turn"), "already gives every action token"),
        (dict(advantage_estimator="gae", value_head="shared", value_coef=0.0), "value_coef must be positive"),
        (dict(advantage_estimator="gae", value_head="separate"), "needs critic_model"),
        (dict(advantage_estimator="gae", value_head="shared", critic_model="x"), "critic_model is used only"),
        (dict(gamma=1.5), "gamma must be in"),
        (dict(turn_credit="per_turn", multi_objective_aggregation="normalize_then_sum"), "sum_then_normalize"),
        (dict(scale_rewards="global"), "scale_rewards must be"),
        (dict(advantage_estimator="gae", value_head="shared", skip_zero_advantage=True, beta=0.0),
         "skip_zero_advantage"),
    ],
)
def test_bad_estimator_options_fail_when_the_config_is_built(tmp_path, overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_config(tmp_path, **overrides)


def test_plain_grpo_keeps_trls_path(tmp_path) -> None:
    assert not make_config(tmp_path).custom_advantages
    assert make_config(tmp_path, turn_credit="per_turn").custom_advantages
    assert make_config(tmp_path, advantage_estimator="rloo").custom_advantages


def scored(trainer, items=(2, 5)) -> dict:
    """One training batch of 2 items x 4 samples, scored by the trainer (advantages included)."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    rows = [dict(r) for r in countdown_rows(items) for _ in range(4)]
    for row in rows:
        row["prompt"] = [{"role": "user", "content": "x"}]
    torch.manual_seed(0)
    return trainer._generate_and_score_completions(rows)


def test_turn_ends_tie_each_turn_to_its_tokens(tmp_path) -> None:
    trainer = make_trainer(tmp_path, truncated_turn="step", max_turn_tokens=10)
    scored(trainer)
    for t in trainer.last_rollout.trajectories:
        assert len(t.turn_ends) == t.turns == len(answered_observations(t))
        assert t.turn_ends == sorted(t.turn_ends) and t.turn_ends[-1] == len(t.completion_ids)
        for end in t.turn_ends:  # a turn ends on its end-of-turn token, after its action tokens
            assert t.completion_ids[end - 1] == trainer.chat.closer_id
        assert answered_observations(t)[0].startswith("Item ")


def test_rloo_advantages_are_the_leave_one_out_of_the_env_rewards(tmp_path) -> None:
    trainer = make_trainer(tmp_path, advantage_estimator="rloo", truncated_turn="step", max_turn_tokens=10)
    inputs = scored(trainer)
    rewards = torch.tensor([t.reward for t in trainer.last_rollout.trajectories])
    expected = adv.leave_one_out(rewards, torch.arange(8) // 4)
    assert inputs["advantages"].shape == (8,)
    assert torch.allclose(inputs["advantages"].cpu(), expected)
    assert list(trainer._logs["advantages"])[-8:] == pytest.approx(expected.tolist()), "the completions table's"


def test_rft_advantages_are_the_episode_returns_so_only_successes_teach(tmp_path) -> None:
    """RFT (protocol 3's arm b): no baseline, so a failure's advantage is 0 (skipped at beta 0) and a success's
    its return: the step clones the model's own successes."""
    trainer = make_trainer(tmp_path, advantage_estimator="rft", truncated_turn="step", max_turn_tokens=10)
    inputs = scored(trainer)
    rewards = torch.tensor([t.reward for t in trainer.last_rollout.trajectories])
    assert torch.equal(inputs["advantages"].cpu(), rewards.to(inputs["advantages"].dtype))
    success = torch.tensor([t.success for t in trainer.last_rollout.trajectories])
    assert success.any() and (~success).any(), "need both outcomes in the batch"
    assert torch.all(inputs["advantages"].cpu()[~success] == 0) and torch.all(inputs["advantages"].cpu()[success] > 0)


def test_remax_baseline_is_the_greedy_episode_of_each_item(tmp_path) -> None:
    trainer = make_trainer(tmp_path, advantage_estimator="remax", truncated_turn="step", max_turn_tokens=10)
    inputs = scored(trainer)
    greedy = trainer._last_batch.greedy_returns
    assert len(greedy) == 8 and greedy[:4] == [greedy[0]] * 4 and greedy[4:] == [greedy[4]] * 4
    rewards = torch.tensor([t.reward for t in trainer.last_rollout.trajectories])
    assert torch.allclose(inputs["advantages"].cpu(), rewards - torch.tensor(greedy))
    assert not trainer.features["greedy_baseline"].generator.generation_config.do_sample
    again = trainer.features["greedy_baseline"].rollout([{"env_id": r.env_id, "item_id": r.item_id} for r in
                                                         trainer.last_rollout.trajectories], 3)
    assert again == greedy, "greedy episodes are deterministic"


def test_per_turn_and_step_level_credit_stay_off_observation_tokens(tmp_path) -> None:
    for credit in ("per_turn", "step_level"):
        trainer = make_trainer(tmp_path, turn_credit=credit, turn_reward="env", invalid_action_penalty=0.5,
                               truncated_turn="step", max_turn_tokens=10)
        inputs = scored(trainer)
        advantages = inputs["advantages"]
        mask = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
        assert advantages.shape == mask.shape
        assert torch.all(advantages[~mask] == 0)
        assert advantages[mask].abs().sum() > 0


def test_reinforce_pp_whitens_token_returns_over_the_batch(tmp_path) -> None:
    trainer = make_trainer(tmp_path, advantage_estimator="reinforce_pp", beta=0.05, truncated_turn="step",
                           max_turn_tokens=10)
    inputs = scored(trainer)
    mask = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
    values = inputs["advantages"][mask]
    assert torch.all(inputs["advantages"][~mask] == 0)
    assert abs(float(values.mean())) < 1e-4 and abs(float(values.std()) - 1.0) < 1e-2
    assert trainer._metrics["train"]["reinforce_pp/kl_in_reward"], "the KL penalty went into the rewards"
    assert_successes_get_the_larger_advantages(trainer, inputs)


def assert_successes_get_the_larger_advantages(trainer, inputs) -> None:
    mask = inputs["completion_mask"] * inputs["tool_mask"]
    per_row = (inputs["advantages"] * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    success = torch.tensor([t.success for t in trainer.last_rollout.trajectories])
    assert success.any() and (~success).any(), "need both outcomes in the batch"
    assert per_row[success].min() > per_row[~success].max()


def test_gae_gives_successes_the_larger_advantages(tmp_path) -> None:
    trainer = make_trainer(tmp_path, advantage_estimator="gae", value_head="detached", truncated_turn="step",
                           max_turn_tokens=10)
    inputs = scored(trainer)
    targets = inputs["value_targets"]
    mask = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
    assert torch.all(targets[~mask] == 0)
    logged = trainer._metrics["train"]
    assert logged["value/mean"] and len(logged["value/explained_variance"]) == 1, "the critic's fit is logged"
    assert_successes_get_the_larger_advantages(trainer, inputs)


def test_outcome_reward_sits_on_the_last_action_token(tmp_path) -> None:
    trainer = make_trainer(tmp_path, advantage_estimator="reinforce_pp", beta=0.0, truncated_turn="step",
                           max_turn_tokens=10)
    scored(trainer)
    rewards, turn_mask, _ = trainer.advantage_adapter.global_turn_table(trainer._last_batch)
    for row, t in enumerate(trainer.last_rollout.trajectories):
        assert float(rewards[row].sum()) == pytest.approx(t.reward)
        assert float(rewards[row, : t.turns - 1].abs().sum()) == 0.0  # the outcome only on the last turn
        mask = torch.tensor(t.env_mask)
        placed = adv.place_on_last_action_token(rewards[row : row + 1, : t.turns], [t.turn_ends], mask[None])
        if t.reward:
            position = int(torch.nonzero(placed[0]).flatten()[-1])
            assert t.env_mask[position] == 1 and position == max(i for i, m in enumerate(t.env_mask) if m)


def test_score_delta_and_penalty_turn_rewards() -> None:
    from agentgym_envs.core.episode import Trajectory

    t = Trajectory("e", 0, actions=["a", "b", "c"], rewards=[0.0, 0.0], valid=[True, False], scores=[0.25, 0.75])
    assert turn_rewards_of(t, "score_delta", 0.1) == [0.25, 0.5 - 0.1, 0.0]
    assert turn_rewards_of(t, "env", 0.1) == [0.0, -0.1, 0.0]
    assert turn_rewards_of(t, "outcome") == [0.0, 0.0, 0.0]


def test_turn_level_credit_by_hand() -> None:
    from agentgym_trl.credit import EpisodeTurns, turn_table
    from agentgym_trl.estimators import episode_level_advantages

    # one group of two episodes of two turns; the first earns 1 on its last turn; gamma_turn 0.5
    rewards, mask, states = turn_table([EpisodeTurns((0.0, 0.0), (1, 2)), EpisodeTurns((0.0, 0.0), (1, 3))],
                                       torch.tensor([1.0, 0.0]), torch.ones(2))
    groups = torch.tensor([0, 0])

    def credit(estimator: str, mode: str) -> torch.Tensor:
        return episode_level_advantages(rewards, mask, states, groups, estimator=estimator, credit=mode,
                                        turn_gamma=0.5, scale="none", greedy_returns=torch.tensor([0.5, 0.5]))

    # returns G = [[0.5, 1], [0, 0]]: R = [0.5, 0], group mean 0.25, leave-one-out baselines [0, 0.5]
    assert credit("grpo", "none").tolist() == [0.25, -0.25]
    assert credit("grpo", "per_turn").tolist() == [[0.25, 0.75], [-0.25, -0.25]]
    assert credit("rloo", "per_turn").tolist() == [[0.5, 1.0], [-0.5, -0.5]]
    assert credit("remax", "none").tolist() == [0.0, -0.5]
    # state 1 is shared by both first turns (step term +-0.25); states 2 and 3 are seen once (no step term)
    assert credit("grpo", "step_level").tolist() == [[0.5, 0.25], [-0.5, -0.25]]


def parameters(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize(
    "overrides",
    [
        dict(advantage_estimator="rloo"),
        dict(advantage_estimator="reinforce_pp"),
        # with the turn-budget curriculum: the greedy baseline plays under the same budget as the samples
        dict(advantage_estimator="remax", max_turns=None, max_turns_schedule="0:1,1:3", max_steps=2),
        dict(advantage_estimator="gae", value_head="shared"),
        dict(turn_credit="per_turn", turn_gamma=0.9),
        dict(advantage_estimator="rloo", turn_credit="step_level", turn_reward="env"),
    ],
    ids=lambda o: "-".join(str(v) for v in o.values()),
)
def test_each_estimator_trains_end_to_end(tmp_path, overrides) -> None:
    trainer = make_trainer(tmp_path, learning_rate=1e-2, truncated_turn="step", max_turn_tokens=10, **overrides)
    before = parameters(trainer)
    torch.manual_seed(0)
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(after[n], p) for n, p in before.items()), "the policy moved"
    logs = [h for h in trainer.state.log_history if "advantage/abs_mean" in h]
    assert logs and "agent/max_turns" in logs[0], "the estimator's and the usual metrics are logged"
    if overrides.get("advantage_estimator") == "remax":
        assert "remax/greedy_reward" in logs[0] and [h["agent/max_turns"] for h in logs] == [1, 3]
    if overrides.get("advantage_estimator") == "gae":
        assert "value/loss" in logs[0]
        head = trainer.features["critic"].value_head.linear.weight
        assert not torch.equal(head, before[next(n for n in before if "agent_value_head.linear.weight" in n)])


def test_gae_with_a_separate_critic_trains_it_and_leaves_the_trunk_to_the_policy_loss(tmp_path) -> None:
    from tiny_model import save_tiny

    critic_path = save_tiny(tmp_path / "critic", seed=1)
    trainer = make_trainer(tmp_path, learning_rate=1e-2, truncated_turn="step", max_turn_tokens=10,
                           advantage_estimator="gae", value_head="separate", critic_model=str(critic_path))
    critic = trainer.features["critic"].value_head.critic
    assert critic is not None and not hasattr(critic, "lm_head")
    before = {n: p.detach().clone() for n, p in critic.named_parameters()}
    inputs = scored(trainer)
    assert "value_targets" in inputs
    trainer.train()
    assert any(not torch.equal(p, before[n]) for n, p in critic.named_parameters()), "the critic learned"
    assert any("value/loss" in h for h in trainer.state.log_history)

    with pytest.raises(ValueError, match="policy's tokenizer"):
        from agentgym_trl.value_head import load_critic

        load_critic(str(critic_path), 123)


def test_gae_value_head_is_saved_and_restored_on_resume(tmp_path) -> None:
    settings = dict(advantage_estimator="gae", value_head="detached", learning_rate=1e-2, truncated_turn="step",
                    max_turn_tokens=10, max_steps=1, save_strategy="steps", save_steps=1)
    trainer = make_trainer(tmp_path, **settings)
    trainer.train()
    checkpoint = os.path.join(trainer.args.output_dir, "checkpoint-1")
    assert os.path.exists(os.path.join(checkpoint, VALUE_HEAD_FILE))
    from safetensors import safe_open

    with safe_open(os.path.join(checkpoint, "model.safetensors"), "pt") as weights:
        assert not [k for k in weights.keys() if "value_head" in k], "the model loads as a plain causal LM"
    trained = trainer.features["critic"].value_head.state_dict()

    resumed = make_trainer(tmp_path, **{**settings, "max_steps": 2})
    loaded = {}
    original = resumed.features["critic"].value_head.load_state_dict
    resumed.features["critic"].value_head.load_state_dict = lambda state: loaded.update(state) or original(state)
    resumed.train(resume_from_checkpoint=os.path.join(resumed.args.output_dir, "checkpoint-1"))
    assert loaded and all(torch.equal(loaded[k], trained[k]) for k in trained)


def test_gae_with_lora_trains_the_adapter_and_the_head(tmp_path) -> None:
    from peft import LoraConfig

    tokenizer = tiny_tokenizer("chatml")
    trainer = AgentGRPOTrainer(
        tiny_model(tokenizer),
        args=make_config(tmp_path, learning_rate=1e-2, truncated_turn="step", max_turn_tokens=10,
                         advantage_estimator="gae", value_head="shared"),
        train_dataset=countdown_rows(range(12)),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    before = parameters(trainer)
    assert any("agent_value_head" in n for n in before) and any("lora_B" in n for n in before)
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert not torch.equal(after[next(n for n in before if "agent_value_head" in n)],
                           before[next(n for n in before if "agent_value_head" in n)])


@pytest.mark.parametrize(
    "estimator",
    [
        # a group of 8 with 4 rows per process: every group spans both ranks, so its baseline needs the gather
        ["--advantage_estimator", "rloo", "--turn_credit", "step_level", "--turn_reward", "env",
         "--num_generations", "8"],
        ["--advantage_estimator", "gae", "--value_head", "shared", "--num_generations", "4"],
        ["--advantage_estimator", "gae", "--value_head", "separate", "--num_generations", "4"],
    ],
    ids=["rloo-step_level-group-across-ranks", "gae", "gae-separate-critic"],
)
def test_two_process_run_with_an_estimator(tmp_path, estimator: list[str]) -> None:
    from offline_run import run_offline
    from test_trainer_example import CPU_2PROC, EXAMPLE, TEXTCRAFT, metric_lines
    from tiny_model import save_tiny

    output_dir = tmp_path / "run"
    if "separate" in estimator:
        estimator = [*estimator, "--critic_model", str(save_tiny(tmp_path / "critic", seed=1))]
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_2PROC), str(EXAMPLE),
        "--preset", "cpu-demo",
        "--model_name_or_path", str(save_tiny(tmp_path / "tiny")), "--env_ids", TEXTCRAFT,
        "--max_turns_schedule", "0:2", "--max_steps", "1", "--per_device_train_batch_size", "4",
        "--max_turn_tokens", "12", "--max_context_tokens", "2048", "--truncated_turn", "step",
        "--output_dir", str(output_dir), "--save_strategy", "no", "--clone_episodes", "0", "--eval_items", "0",
        *estimator,
    ]
    result = run_offline(command, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "[rank 1/2]" in result.stderr
    (line,) = metric_lines(output_dir)
    assert "advantage/abs_mean" in line and line["agent/max_turns"] == 2


@pytest.mark.slow
def test_algorithms_benchmark_runs_on_a_tiny_model(tmp_path) -> None:
    """benchmarks/bench_algorithms.py shortened: the start, two arms with one seed, the report."""
    import json

    from offline_run import run_offline
    from test_trainer_example import ROOT, TEXTCRAFT
    from tiny_model import save_tiny

    argv = [
        "--env_id", TEXTCRAFT, "--start_model", str(save_tiny(tmp_path / "tiny")), "--out_dir", str(tmp_path / "exp"),
        "--arms", "grpo", "gae", "--seeds", "0", "--steps", "1", "--train_turns", "1", "--items_per_step", "1",
        "--group_size", "2", "--save_steps", "1", "--eval_turns", "1", "--eval_samples", "1", "--eval_limit", "2",
        "--max_turn_tokens", "12", "--max_context_tokens", "2048", "--bf16", "false",
        "--results_file", str(tmp_path / "algorithms.json"), "--plot_file", str(tmp_path / "algorithms.png"),
    ]
    script = ROOT / "benchmarks" / "bench_algorithms.py"
    done = run_offline([sys.executable, str(script), *argv], tmp_path, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "algorithms.json").read_text())
    assert set(summary["arms"]) == {"grpo", "gae"}
    gae = summary["arms"]["gae"]
    assert gae["peak_rss_mb"] > 0 and gae["step_s_mean"] > 0 and "change_vs_grpo" in gae
    assert "| gae |" in done.stdout and (tmp_path / "algorithms.png").read_bytes()[:4] == b"\x89PNG"
