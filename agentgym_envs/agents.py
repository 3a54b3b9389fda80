"""Agents: who answers the episodes the loop (``core.loop``) plays, and the registry that finds them.

Built in (no model): the env's ``oracle``, a seeded ``random`` agent and a ``human`` at the
terminal; ``agentgym_envs.evaluation.endpoint`` adds an OpenAI-compatible endpoint. Packages add
their own agents under the ``agentgym.agents`` entry point group: ``agentgym_trl`` registers
``model`` (a local Hugging Face model), so ``agentgym eval --model`` works when the trainer extra
is installed and says how to get it when not. The env package never imports the trainer package.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

import numpy as np

from agentgym_envs.core.episode import ACKNOWLEDGEMENT, first_messages, first_user_message
from agentgym_envs.core.loop import Agent, BaseAgent, Episode, Reply, close_quietly, run_episode

__all__ = [
    "ACKNOWLEDGEMENT",
    "Agent",
    "AgentNotFound",
    "AgentSetupError",
    "BaseAgent",
    "HumanAgent",
    "OracleAgent",
    "RandomAgent",
    "Reply",
    "close_quietly",
    "first_messages",
    "first_user_message",
    "make_agent",
    "run_episode",
]

logger = logging.getLogger(__name__)

#: the entry point group other packages register agent factories under
ENTRY_POINT_GROUP = "agentgym.agents"
#: what to install for an agent another package provides
INSTALL_HINTS = {"model": "pip install 'agentgym-rl[train]'"}


class AgentSetupError(RuntimeError):
    """An agent that cannot be made (not installed, a model that cannot be loaded): one clear line for the user."""


class AgentNotFound(AgentSetupError):
    """No agent of that name is built in or installed."""


class OracleAgent(BaseAgent):
    """The env's expert (``oracle_action``): a ceiling for the metrics and a check that the pipeline works."""

    name = "oracle"

    def act_one(self, episode: Episode) -> str:
        """The env's expert response (``oracle_action``) for the episode's current state."""
        return episode.env.unwrapped.oracle_action()


def random_response(env: Any, rng: np.random.Generator) -> str:
    """The env's ``random_action(rng)``, or, for a text env not built on ``TextEnv`` (a plain ``gym.register``), a
    sample of its action space seeded from ``rng``: so a random agent and the conformance checks play any text env."""
    random_action = getattr(env.unwrapped, "random_action", None)
    if random_action is not None:
        return random_action(rng)
    env.action_space.seed(int(rng.integers(2**31)))
    return env.action_space.sample()


class RandomAgent(BaseAgent):
    """The env's plausible random actions, seeded per (seed, item, sample) so any episode replays alike."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._rngs: dict[int, np.random.Generator] = {}

    def describe(self) -> dict[str, Any]:
        """The agent's kind and seed (a random run is reproducible from them)."""
        return {"kind": self.name, "seed": self.seed}

    def begin(self, episodes: Sequence[Episode]) -> None:
        """A random stream per episode, seeded by (seed, item, sample), so an episode's play does not depend on its
        batch.
        """
        self._rngs = {  # a new batch: the previous one's episodes are over
            id(e.trajectory): np.random.default_rng([self.seed, e.trajectory.item_id, e.trajectory.sample])
            for e in episodes
        }

    def act_one(self, episode: Episode) -> str:
        """The env's ``random_action`` drawn from the episode's own stream."""
        return random_response(episode.env, self._rngs[id(episode.trajectory)])


class HumanAgent(BaseAgent):
    """Reads one response from the terminal (an empty line is sent as is)."""

    name = "human"

    def act_one(self, episode: Episode) -> str:
        """The action a person types at the terminal."""
        return input("\naction> ")


BUILT_IN: dict[str, Callable[..., Agent]] = {
    "oracle": lambda **_: OracleAgent(),
    "random": lambda seed=0, **_: RandomAgent(seed),
    "human": lambda **_: HumanAgent(),
}


def _installed() -> dict[str, Any]:
    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}


def agent_names() -> list[str]:
    """Every agent ``make_agent`` knows: the built-in ones and those installed packages register."""
    return sorted({*BUILT_IN, *_installed()})


def make_agent(name: str, **kwargs: Any) -> Agent:
    """An agent by name: built in, or from an installed package's ``agentgym.agents`` entry point.

    ``kwargs`` go to its factory (e.g. ``seed`` for ``random``; ``model``, ``temperature``, ... for ``model``).
    """
    if name in BUILT_IN:
        return BUILT_IN[name](**kwargs)
    point = _installed().get(name)
    if point is None:
        hint = f"; install it with: {INSTALL_HINTS[name]}" if name in INSTALL_HINTS else ""
        raise AgentNotFound(f"no agent {name!r} is installed (choose one of {agent_names()}){hint}")
    try:
        factory = point.load()
    except ImportError as error:
        hint = INSTALL_HINTS.get(name, "pip install the package that provides it")
        raise AgentNotFound(f"the {name!r} agent cannot be imported ({error}); install it with: {hint}") from None
    return factory(**kwargs)
