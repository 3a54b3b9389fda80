"""How one family's AgentGym env server differs from the common shape of AgentGym's protocol.

AgentGym's clients talk to one server per environment, and those servers do not all speak alike.
The env server (``server/compat.py``) speaks the common shape and asks the family for the rest
through its ``AgentGymProtocol``, which the family declares on its ``TaskSpec`` as a lazy
``"module:ATTRIBUTE"`` reference (``protocol="agentgym_envs.sciworld.protocol:PROTOCOL"``), so
``import agentgym_envs`` imports no family module and the server imports none by name.

The defaults are the common shape: ``/create`` answers an object (``{"id": ...}``), ``/reset``'s
episode index is our item id, its reply is the observation as it is, and there is no vocabulary.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

#: ``/reset`` fields -> the fields the family's client reads (given the observation and info too).
ResetShaper = Callable[[dict[str, Any], str, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class AgentGymProtocol:
    """A family's departures from the common AgentGym protocol (every field defaults to the common shape).

    Args:
        bare_create: the family's client reads ``/create``'s whole JSON reply as the env number
            (SearchQA, WebShop, SqlGym and the tool envs) rather than ``{"id": ...}``.
        item_of: our item id of the client's episode index (SciWorld counts through AgentGym's own
            list of (task, variation) pairs); ``KeyError`` / ``ValueError`` for an index with no item.
        shape_reset: reshapes the ``/reset`` reply's fields for the family's client (what its client
            adds to the first observation itself, or splits out of it).
        vocabulary: the words the env (given, unwrapped) accepts, for LMRL-Gym's ``GET /filtered_vocab`` (Wordle).
        episode_keys: the ``/reset`` fields, besides the common ``data_idx``, under which the family's client
            names the episode (``idx`` for WebArena, ``session_id`` for WebShop, ``game`` for ALFWorld and
            Maze, ...).
        extracted_action: the family's client sends ``/step`` the action it took out of the model's response
            (TextCraft, BabyAI, SciWorld, ALFWorld), not the response: the server hands the env
            ``Action: <action>``, which the env's default parser (that client's own rule) reads back as it was.
        reward_so_far: the family's server replies to ``/step`` with the episode's reward so far (the tool envs'
            ``env.reward``, the best reached), not the step's: AgentGym-RL trains on the last reply's, so a task won
            before its closing ``finish`` must still read as won there.
    """

    bare_create: bool = False
    item_of: Callable[[int], int] | None = None
    shape_reset: ResetShaper | None = None
    vocabulary: Callable[[Any], Sequence[str]] | None = None
    episode_keys: tuple[str, ...] = ()
    extracted_action: bool = False
    reward_so_far: bool = False

    def item(self, index: int) -> int:
        """Our item id for the episode index the family's AgentGym server uses (the same number by default)."""
        return self.item_of(index) if self.item_of is not None else index

    def response(self, action: str) -> str:
        """The model response to step the env with, for the ``action`` the family's client sent ``/step``."""
        return f"Action: {action}" if self.extracted_action else action

    def reset_fields(self, fields: dict[str, Any], observation: str, info: dict[str, Any]) -> dict[str, Any]:
        """The ``/reset`` fields as the family's client reads them (``fields`` unchanged by default)."""
        return self.shape_reset(fields, observation, info) if self.shape_reset is not None else fields


#: The common shape, for families that declare no protocol and for envs that are not ours.
COMMON_PROTOCOL = AgentGymProtocol()
#: The common shape with a client that sends the action it extracted (TextCraft's and BabyAI's).
EXTRACTING_CLIENT = AgentGymProtocol(extracted_action=True)


@lru_cache(maxsize=None)
def load_protocol(reference: str) -> AgentGymProtocol:
    """The ``AgentGymProtocol`` a ``"package.module:ATTRIBUTE"`` reference names (``""``: the common shape).

    Raises:
        TypeError: the reference names something that is not an ``AgentGymProtocol``.
    """
    if not reference:
        return COMMON_PROTOCOL
    module_name, _, attribute = reference.partition(":")
    protocol = getattr(importlib.import_module(module_name), attribute or "PROTOCOL")
    if not isinstance(protocol, AgentGymProtocol):
        raise TypeError(f"{reference} is a {type(protocol).__name__}, not an AgentGymProtocol")
    return protocol
