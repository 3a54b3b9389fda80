"""Evaluation without the trainer: metrics (Avg@K, Pass@K), trajectory logs, the endpoint agent, the HTML
trajectory viewer and the plots. Needs no torch; a local model is the ``model`` agent ``agentgym_trl`` installs.
"""

from agentgym_envs.evaluation.metrics import avg_at_k, format_scaling, format_table, pass_at_k, summarize, summarize_run
from agentgym_envs.evaluation.records import TRAJECTORIES_FILE, TrajectoryLog, load_run
from agentgym_envs.evaluation.runner import EvalError, EvalReport, evaluate, plan_jobs

__all__ = [
    "TRAJECTORIES_FILE",
    "EvalError",
    "EvalReport",
    "TrajectoryLog",
    "avg_at_k",
    "evaluate",
    "format_scaling",
    "format_table",
    "load_run",
    "pass_at_k",
    "plan_jobs",
    "summarize",
    "summarize_run",
]
