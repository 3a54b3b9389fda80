"""``--env-kwargs key=value ...``: keyword arguments for ``gym.make`` from the command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any


def parse_env_kwarg(text: str) -> tuple[str, Any]:
    """``key=value`` -> ``(key, value)``; the value is read as JSON when it is JSON (``true``, ``3``,
    ``{"shopping": "http://h:7770"}``) and kept as a string otherwise (``config_path=configs/``)."""
    key, separator, raw = text.partition("=")
    if not separator or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected key=value with a Python name as the key, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


class _MergeKwargs(argparse.Action):
    """Every ``--env-kwargs`` given adds its pairs to one dict (a later key wins)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Sequence[tuple[str, Any]], option_string: str | None = None) -> None:
        setattr(namespace, self.dest, {**(getattr(namespace, self.dest) or {}), **dict(values)})


def add_env_kwargs_argument(parser: argparse.ArgumentParser) -> None:
    """``--env-kwargs k=v ...`` (repeatable), collected into ``args.env_kwargs`` (a dict, empty by default)."""
    parser.add_argument("--env-kwargs", nargs="+", type=parse_env_kwarg, action=_MergeKwargs, default={},
                        metavar="KEY=VALUE",
                        help="keyword arguments for gym.make, e.g. lenient_crafting=true (values are JSON or text)")


def add_env_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--env``, the same on eval and collect: ``--env A B`` and ``--env A --env B`` both give [A, B]."""
    parser.add_argument("--env", nargs="+", action="extend", required=True, metavar="ENV_ID", help=help)


def add_opening_argument(parser: argparse.ArgumentParser) -> None:
    """``--merged-first-turn``: how episodes open, which must match how the model was trained."""
    parser.add_argument("--merged-first-turn", action="store_true",
                        help="open episodes with one user turn (instruction + first observation), as a model trained "
                             "with AgentGRPOConfig(merged_first_turn=True) saw them; default: AgentGym's three turns")


def check_env_kwargs(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """``ValueError`` naming the keyword arguments ``env_id``'s env takes when ``env_kwargs`` has others:
    ``gym.make`` would raise a ``TypeError`` deep in the env's constructor instead."""
    if not env_kwargs:
        return
    import inspect

    import gymnasium as gym

    spec = gym.spec(env_id)
    entry = spec.entry_point
    creator = entry if callable(entry) else gym.envs.registration.load_env_creator(entry)
    parameters = inspect.signature(creator).parameters
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values()):
        return
    accepted = {name for name, parameter in parameters.items()
                if parameter.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    unknown = sorted(set(env_kwargs) - accepted - {"render_mode", "max_episode_steps"})
    if unknown:
        settable = ", ".join(sorted(accepted - {"self", "task_id"} - set(spec.kwargs)))
        raise ValueError(f"{env_id} takes no keyword argument {', '.join(map(repr, unknown))}; it takes: {settable}")
