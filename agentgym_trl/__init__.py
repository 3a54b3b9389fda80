"""Multi-turn GRPO for AgentGym envs on TRL + Accelerate, with the ScalingInter-RL turn-budget curriculum.

``AgentGRPOTrainer(model, args=AgentGRPOConfig(env_ids=[...], turn_rounds=[10, 20, 30], turn_round_steps=100))``
trains on the envs' train items; ``run_rollout`` plays batched multi-turn episodes on its own (evaluation,
benchmarks); ``TurnSchedule`` / ``TurnBudgetCallback`` are the curriculum.
"""

from agentgym_trl.chat import ChatEncoder, ChatTemplateError
from agentgym_trl.curriculum import ScheduleError, TurnBudgetCallback, TurnSchedule
from agentgym_trl.data import build_env_dataset, check_env_ids, env_rows
from agentgym_trl.eval import evaluate_model
from agentgym_trl.generation import HFGenerator, TurnOutput, VLLMGenerator
from agentgym_trl.rollout import EnvPool, RolloutResult, Trajectory, run_rollout, validate_rollout_output
from agentgym_trl.trainer import AgentGRPOConfig, AgentGRPOTrainer, env_reward

__all__ = [
    "AgentGRPOConfig",
    "AgentGRPOTrainer",
    "ChatEncoder",
    "ChatTemplateError",
    "EnvPool",
    "HFGenerator",
    "RolloutResult",
    "ScheduleError",
    "Trajectory",
    "TurnBudgetCallback",
    "TurnOutput",
    "TurnSchedule",
    "VLLMGenerator",
    "build_env_dataset",
    "check_env_ids",
    "env_reward",
    "env_rows",
    "evaluate_model",
    "run_rollout",
    "validate_rollout_output",
]
