"""Evaluation without the trainer: metrics (Avg@K, Pass@K), trajectory logs, scripted and endpoint agents,
the HTML trajectory viewer and the plots. Needs no torch; the local-model agent is ``agentgym_trl.eval``.
"""

from agentgym_envs.evaluation.metrics import avg_at_k, format_scaling, format_table, pass_at_k, summarize, summarize_run
from agentgym_envs.evaluation.records import TRAJECTORIES_FILE, TrajectoryLog, load_run
from agentgym_envs.evaluation.runner import (
    EpisodeJob,
    EvalError,
    EvalReport,
    StepwiseRunner,
    evaluate,
    plan_jobs,
    scripted_runner,
)

__all__ = [
    "TRAJECTORIES_FILE",
    "EpisodeJob",
    "EvalError",
    "EvalReport",
    "StepwiseRunner",
    "TrajectoryLog",
    "avg_at_k",
    "evaluate",
    "format_scaling",
    "format_table",
    "load_run",
    "pass_at_k",
    "plan_jobs",
    "scripted_runner",
    "summarize",
    "summarize_run",
]
