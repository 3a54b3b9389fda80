"""Multi-turn GRPO for AgentGym envs on TRL + Accelerate, with the ScalingInter-RL turn-budget curriculum.

``AgentGRPOTrainer(model, args=AgentGRPOConfig(env_ids=[...], turn_rounds=[10, 20, 30], turn_round_steps=100))``
trains on the envs' train items; ``ModelAgent`` plays the envs through the one episode loop of
``agentgym_envs.core.loop`` (``run_rollout`` is the trainer's batch of it); ``TurnSchedule`` /
``TurnBudgetCallback`` are the curriculum; ``PrefixSchedule`` / ``OraclePrefixCurriculum`` the reverse curriculum
from the oracle's demonstrations (R³, ``oracle_prefix_schedule``).
"""

from agentgym_envs.core.episode import Trajectory
from agentgym_envs.core.loop import EnvPool
from agentgym_trl.agent import ModelAgent
from agentgym_trl.chat import ChatEncoder, ChatTemplateError
from agentgym_trl.config import AgentGRPOConfig
from agentgym_trl.curriculum import ScheduleError, TurnBudgetCallback, TurnSchedule
from agentgym_trl.data import build_env_dataset, check_env_ids, env_rows
from agentgym_trl.eval import evaluate_model
from agentgym_trl.engines import Generator, Sampling, TurnOutput, make_generator
from agentgym_trl.engines.hf import HFGenerator
from agentgym_trl.engines.vllm_process import VLLMGenerator
from agentgym_trl.metrics import MetricsFileCallback
from agentgym_trl.reverse_curriculum import OraclePrefixCurriculum, PrefixSchedule
from agentgym_trl.rollout import RolloutResult, run_rollout, validate_rollout_output
from agentgym_trl.trainer import AgentGRPOTrainer, env_reward

__all__ = [
    "AgentGRPOConfig",
    "AgentGRPOTrainer",
    "ChatEncoder",
    "ChatTemplateError",
    "EnvPool",
    "Generator",
    "HFGenerator",
    "MetricsFileCallback",
    "ModelAgent",
    "OraclePrefixCurriculum",
    "PrefixSchedule",
    "RolloutResult",
    "Sampling",
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
    "make_generator",
    "run_rollout",
    "validate_rollout_output",
]
