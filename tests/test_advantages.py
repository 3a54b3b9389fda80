"""The advantage estimators against small cases computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym_trl import advantages as adv


def close(actual: torch.Tensor, expected, atol: float = 1e-4) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    assert torch.allclose(actual, expected, atol=atol), f"{actual} != {expected}"


def test_group_index_numbers_groups_by_first_appearance() -> None:
    assert adv.group_index(["b", "a", "b", "c"]).tolist() == [0, 1, 0, 2]


def test_grpo_matches_the_hand_computation() -> None:
    # group 0: rewards 1, 0 -> mean 0.5, unbiased std sqrt(0.5); group 1: 1, 1, 1 -> all equal -> 0
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1, 1])
    std = math.sqrt(0.5)
    close(adv.group_normalized(rewards, groups), [0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0, 0, 0])
    close(adv.group_normalized(rewards, groups, scale="none"), [0.5, -0.5, 0, 0, 0])


def test_grpo_group_of_one_and_batch_scale() -> None:
    close(adv.group_normalized(torch.tensor([0.7]), torch.tensor([0])), [0.0])
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    batch_std = rewards.std().item()  # unbiased over the batch: sqrt(0.25)
    close(adv.group_normalized(rewards, torch.tensor([0, 0, 1, 1]), scale="batch"),
          [0.5 / (batch_std + 1e-4), -0.5 / (batch_std + 1e-4), 0, 0])
    with pytest.raises(ValueError, match="scale"):
        adv.group_normalized(rewards, torch.tensor([0, 0, 1, 1]), scale="global")


def test_rloo_leaves_each_episode_out_of_its_own_baseline() -> None:
    # group of 3: 1, 0, 0.5 -> baselines 0.25, 0.75, 0.5; group of one -> 0; all equal -> 0
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.9, 0.3, 0.3])
    groups = torch.tensor([0, 0, 0, 1, 2, 2])
    close(adv.leave_one_out(rewards, groups), [0.75, -0.75, 0.0, 0.0, 0.0, 0.0])


def test_remax_subtracts_the_greedy_return() -> None:
    close(adv.remax(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5])), [0.5, -0.5])


def test_discounted_returns_skip_masked_positions() -> None:
    rewards = torch.tensor([[0.0, 9.0, 1.0, 0.0, 2.0]])  # position 1 is masked: its 9 never counts
    mask = torch.tensor([[1, 0, 1, 1, 1]])
    # action positions 0, 2, 3, 4 with rewards 0, 1, 0, 2 and gamma 0.5
    close(adv.discounted_returns(rewards, mask, 0.5), [[0.5 * 1.5, 0, 1 + 0.5 * 1.0, 0 + 0.5 * 2.0, 2.0]])


def test_discounted_returns_of_truncated_episodes_stop_at_their_end() -> None:
    rewards = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # the second episode ended after one turn
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    close(adv.discounted_returns(rewards, mask, 1.0), [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_whiten_uses_the_given_global_moments() -> None:
    values = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[1, 1, 0]])
    close(adv.whiten(values, mask), [[-1 / (math.sqrt(2) + 1e-4), 1 / (math.sqrt(2) + 1e-4), 0.0]])
    # another process holds 5 and 7: the batch is 1, 3, 5, 7 (mean 4, unbiased std sqrt(20/3))
    moments = adv.masked_moments(values, mask) + adv.masked_moments(torch.tensor([5.0, 7.0]), torch.ones(2))
    std = math.sqrt(20 / 3) + 1e-4
    close(adv.whiten(values, mask, moments), [[-3 / std, -1 / std, 0.0]])
    close(adv.whiten(values, torch.zeros_like(mask)), [[0.0, 0.0, 0.0]])


def test_reinforce_pp_puts_the_kl_penalty_in_the_reward() -> None:
    token_rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    kl = torch.tensor([[0.5, 7.0, 0.5, 1.0]])  # position 1 is an observation token: its KL never counts
    mask = torch.tensor([[1, 0, 1, 1]])
    # rewards on actions: -0.05, -0.05, 1 - 0.1 -> returns 0.8, 0.85, 0.9
    close(adv.reinforce_pp_returns(token_rewards, kl, mask, kl_coef=0.1), [[0.8, 0.0, 0.85, 0.9]])
    close(adv.reinforce_pp_returns(token_rewards, None, mask, kl_coef=0.1), [[1.0, 0.0, 1.0, 1.0]])


def test_gae_matches_the_recursion_by_hand() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.2, 0.8]])
    mask = torch.tensor([[1, 1, 1]])
    gamma, lam = 0.9, 0.5
    d2 = 1.0 - 0.8
    d1 = 0.0 + gamma * 0.8 - 0.2
    d0 = 0.0 + gamma * 0.2 - 0.5
    a2 = d2
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    advantages, targets = adv.gae(rewards, values, mask, gamma, lam)
    close(advantages, [[a0, a1, a2]])
    close(targets, [[a0 + 0.5, a1 + 0.2, a2 + 0.8]])


def test_gae_skips_observation_tokens_and_padding() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 9.0, 0.8, 9.0]])  # the critic's values on observation / padding never count
    mask = torch.tensor([[1, 0, 1, 0]])
    advantages, targets = adv.gae(rewards, values, mask, 1.0, 1.0)
    # lambda = gamma = 1: A_t = return - V_t = 1 - V_t
    close(advantages, [[0.5, 0.0, 0.2, 0.0]])
    close(targets, [[1.0, 0.0, 1.0, 0.0]])


def test_step_level_groups_identical_states_within_a_group() -> None:
    # group 0: two episodes; both first turns answer state 7; turn 1 answers different states (no step group)
    returns = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.5, 0.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    states = torch.tensor([[7, 8], [7, 9], [7, -1]])
    groups = torch.tensor([0, 0, 1])  # the third episode's state 7 is another item's: not the same anchor
    std = math.sqrt(0.5) + 1e-4
    close(adv.step_level(returns, mask, states, groups), [[0.5 / std, 0.0], [-0.5 / std, 0.0], [0.0, 0.0]])
    close(adv.step_level(returns, mask, states, groups, scale=False), [[0.5, 0.0], [-0.5, 0.0], [0.0, 0.0]])


def test_step_level_of_all_equal_returns_is_zero() -> None:
    returns = torch.ones(3, 2)
    close(adv.step_level(returns, torch.ones(3, 2), torch.zeros(3, 2, dtype=torch.long), torch.zeros(3)), 0.0)


def test_rewards_land_on_the_last_action_token_of_their_turn() -> None:
    # turn 0: observation-free actions 0..2 (2 = end-of-turn); observation 3..4; turn 1: actions 5..6
    mask = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 0]])  # 7: padding after the last turn's closer
    turn_rewards = torch.tensor([[0.25, 1.0]])
    out = adv.place_on_last_action_token(turn_rewards, [[3, 7]], mask)
    close(out, [[0, 0, 0.25, 0, 0, 0, 1.0, 0]])


def test_a_masked_turn_hands_its_reward_to_an_action_token() -> None:
    # turn 1 (positions 3..5) was cut and masked out of the loss: its reward goes to turn 0's last action token
    mask = torch.tensor([[1, 1, 0, 0, 0, 0]])
    close(adv.place_on_last_action_token(torch.tensor([[0.0, 1.0]]), [[3, 6]], mask), [[0, 1.0, 0, 0, 0, 0]])
    # a first turn that was masked hands it forward
    mask = torch.tensor([[0, 0, 0, 1, 1, 0]])
    close(adv.place_on_last_action_token(torch.tensor([[1.0, 0.0]]), [[3, 6]], mask), [[0, 0, 0, 1.0, 0, 0]])
    assert adv.last_action_positions([2], [0, 0]) == [-1]


def test_spread_over_turns_gives_each_turns_action_tokens_its_value() -> None:
    mask = torch.tensor([[1, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0]])
    out = adv.spread_over_turns(torch.tensor([[2.0, -1.0], [3.0, 0.0]]), [[2, 5], [1]], mask)
    close(out, [[2.0, 2.0, 0.0, -1.0, -1.0, 0.0], [3.0, 0, 0, 0, 0, 0]])
