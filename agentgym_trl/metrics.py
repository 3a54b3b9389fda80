"""Training metrics as pure functions over trajectories, and the optional JSON-lines sink.

``episode_stats`` makes the small picklable summary of a trajectory that is gathered across
processes; ``rollout_metrics`` turns the gathered summaries into the ``agent/...`` metrics the
trainer logs every step (through TRL's logging, so they reach every ``report_to`` backend).
``MetricsFileCallback`` additionally appends every log to a JSON-lines file when asked
(``AgentGRPOConfig.metrics_file``; ``agentgym plot`` and the examples' reports read it).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from agentgym_envs.core.episode import CONTEXT, ENV_ERROR, MAX_TURNS, TURN_TOKENS, Trajectory

# Every metric name the trainer logs beside TRL's own, namespaced by what it is about (as CleanRL's ``charts/`` and
# ``losses/``): the rollout's ``agent/*`` (``rollout_metrics`` and ``timing_metrics`` below), and these.
TRUNCATED_METRIC = "agent/truncated_frac"
SUCCESS = "agent/success"
REWARD = "agent/reward"
VALID_ACTION_RATE = "agent/valid_action_rate"
BUDGET = "agent/max_turns"  # the step's turn budget
TURNS_MEAN = "agent/turns_mean"
TURNS_PLAYED = "agent/turns_played"  # every turn the step played, all processes and discarded refills included
ROLLOUT_S = "agent/rollout_s"
MODEL_TOKENS_MEAN = "agent/model_tokens_mean"
CUT_TURN_FRAC = "agent/cut_turn_frac"
TRUNCATED_TURN_TOKENS_FRAC = "agent/truncated_turn_tokens_frac"
TRUNCATED_CONTEXT_FRAC = "agent/truncated_context_frac"
EVAL_PREFIX = "eval_"  # TRL's evaluation logs: the same names, prefixed
ADVANTAGE_ABS_MEAN = "advantage/abs_mean"  # the estimator's advantages over action tokens (custom estimators)
GREEDY_REWARD = "remax/greedy_reward"  # ReMax's greedy baseline episodes' mean reward
KL_IN_REWARD = "reinforce_pp/kl_in_reward"  # REINFORCE++'s per-token KL put into the rewards (beta > 0)
VALUE_LOSS = "value/loss"  # gae: the value head's squared error
VALUE_MEAN = "value/mean"  # gae: the critic's mean estimate over action tokens
VALUE_EXPLAINED_VARIANCE = "value/explained_variance"  # gae: 1 - Var(target - V) / Var(target), as CleanRL's PPO
SKIPPED_ROWS_FRAC = "train/skipped_rows_frac"  # skip_zero_advantage: rows left out of the loss
IDLE_STEP = "train/idle_step"  # 1 when no row taught anything and the optimizer step was skipped
NONFINITE_GRAD_STEP = "train/nonfinite_grad_step"  # 1 when a non-finite gradient made the step skip
WEIGHT_SYNC_S = "vllm/weight_sync_s"  # the engine process: seconds to send the policy's weights
DYNAMIC_GROUPS_DRAWN = "dynamic/groups_drawn"  # dynamic sampling (dynamic_sampling.py)
DYNAMIC_GROUPS_KEPT = "dynamic/groups_kept"
DYNAMIC_GROUPS_TEACHING = "dynamic/groups_teaching"  # drawn groups whose rewards differed (kept or not)
DYNAMIC_CAP_HIT = "dynamic/cap_hit"
DYNAMIC_DRAWN_SUCCESS = "dynamic/drawn_success"
DYNAMIC_DRAWN_EPISODES = "dynamic/drawn_episodes"  # every episode played for the step, refills included
ITEMS_ESTIMATE_SPREAD = "items/estimate_spread"  # learnability draws (item_draws.py): spread of per-item success
ITEMS_PLAYED_FRAC = "items/played_frac"  # share of the train items played at least once so far
ITEMS_DRAWN_TEACH = "items/drawn_teach_prob"  # mean predicted probability that a drawn group teaches
ORACLE_PREFIX_K = "curriculum/oracle_prefix_k"  # reverse curriculum (reverse_curriculum.py): the step's scheduled k
SUCCESS_AT_PREFIX = "agent/success_k{}"  # success of the step's episodes that replayed k oracle actions (.format(k))


def episode_stats(trajectory: Trajectory) -> dict[str, Any]:
    """What the metrics need of one episode (small and picklable, for ``gather_object``)."""
    return {
        "env_id": trajectory.env_id,
        "reward": trajectory.reward,
        "success": float(trajectory.success),
        "turns": trajectory.turns,
        "valid_actions": trajectory.valid_actions,
        "cut_turns": trajectory.cut_turns,
        "token_truncated": trajectory.token_truncated,
        "stop_reason": trajectory.stop_reason,
        "model_tokens": trajectory.model_tokens,
        "completion_tokens": len(trajectory.completion_ids),
        "budget": int(trajectory.max_turns),
        "prefix": len(trajectory.prefix_actions),  # oracle actions replayed before the first turn (reverse curriculum)
    }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def rollout_metrics(stats: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The ``agent/...`` metrics of one rollout from its episodes' ``episode_stats`` (all processes')."""
    count = len(stats)
    if not count:
        return {}
    reasons = [s["stop_reason"] for s in stats]
    turns = sum(s["turns"] for s in stats)
    metrics = {
        BUDGET: float(max(s["budget"] for s in stats)),
        TURNS_MEAN: turns / count,
        SUCCESS: _mean([s["success"] for s in stats]),
        REWARD: _mean([s["reward"] for s in stats]),
        VALID_ACTION_RATE: sum(s["valid_actions"] for s in stats) / turns if turns else 0.0,
        TRUNCATED_METRIC: _mean([float(s["token_truncated"]) for s in stats]),
        CUT_TURN_FRAC: sum(s["cut_turns"] for s in stats) / turns if turns else 0.0,
        TRUNCATED_TURN_TOKENS_FRAC: reasons.count(TURN_TOKENS) / count,
        TRUNCATED_CONTEXT_FRAC: reasons.count(CONTEXT) / count,
        "agent/budget_exhausted_frac": reasons.count(MAX_TURNS) / count,
        "agent/env_error_frac": reasons.count(ENV_ERROR) / count,
        MODEL_TOKENS_MEAN: _mean([s["model_tokens"] for s in stats]),
    }
    by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in stats:
        by_env[s["env_id"]].append(s)
    for env_id, group in sorted(by_env.items()):
        metrics[f"agent/{env_id}/success"] = _mean([s["success"] for s in group])
        metrics[f"agent/{env_id}/reward"] = _mean([s["reward"] for s in group])
        metrics[f"agent/{env_id}/turns_mean"] = _mean([s["turns"] for s in group])
    return metrics


def timing_metrics(total_s: float, generation_s: float, env_s: float, template_fallbacks: int,
                   prefilled_tokens: int | None = None) -> dict[str, float]:
    """Where a rollout's time went (this process's), and the positions its prefills ran where the engine counts
    them (``agent/prefilled_tokens``: what sharing a batch's common prompt prefix saves)."""
    metrics = {ROLLOUT_S: total_s, "agent/generation_s": generation_s, "agent/env_s": env_s,
               "agent/template_fallbacks": float(template_fallbacks)}
    if prefilled_tokens is not None:
        metrics["agent/prefilled_tokens"] = float(prefilled_tokens)
    if total_s > 0:
        metrics["agent/outside_model_frac"] = max(total_s - generation_s, 0.0) / total_s
    return metrics


class MetricsFileCallback(TrainerCallback):
    """Appends every log (with its step) to a JSON-lines file on the main process."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Append the log with its global step as one JSON line (main process only; tensors become floats)."""
        if not logs or not state.is_world_process_zero:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        record = {"step": state.global_step, **{k: _jsonable(v) for k, v in logs.items()}}
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
