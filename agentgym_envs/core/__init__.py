"""The small shared core: text space, base env, parsers, the task table."""

from agentgym_envs.core.env import EnvCopyError, Outcome, Start, TextEnv
from agentgym_envs.core.extras import MissingExtraError, require
from agentgym_envs.core.parsers import (ParsedAction, clean_text, normalize_command, parse_backtick, parse_react,
                                        parse_tags)
from agentgym_envs.core.spaces import TextSpace
from agentgym_envs.core.tasks import NAMESPACE, TaskSpec, add_task, get_task, list_tasks, load_splits

__all__ = [
    "NAMESPACE",
    "EnvCopyError",
    "MissingExtraError",
    "Outcome",
    "ParsedAction",
    "Start",
    "TaskSpec",
    "TextEnv",
    "TextSpace",
    "add_task",
    "clean_text",
    "get_task",
    "list_tasks",
    "load_splits",
    "normalize_command",
    "parse_backtick",
    "parse_react",
    "parse_tags",
    "require",
]
