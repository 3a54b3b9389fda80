"""The shapes of AgentGym's env-server protocol that differ per environment.

AgentGym's clients (``agentenv.envs.*``) talk to one server per environment, and the servers do
not all speak alike. ``agentgym serve`` answers each client as its own server would:

* Most clients (TextCraft, BabyAI, SciWorld, WebShop, ALFWorld, ...) name an env by ``id`` and an
  episode by ``data_idx`` and read ``{"id": ...}`` from ``/create``.
* SearchQA and WebArena name an env by ``env_idx`` (in bodies and in ``/observation?env_idx=``).
  SearchQA's client sends ``{"id": 0}`` to ``/create`` and reads the bare env number back; its
  ``/reset`` names the episode by
  ``id``; WebArena reads ``{"env_idx": ...}`` from ``/create``, names the episode by ``idx`` and
  reads ``terminated`` from ``/step``.
* WebShop, SqlGym (BIRD) and the tool envs also take the bare env number from ``/create``; the
  episode is ``session_id`` (WebShop), ``item_id`` (SqlGym), ``id`` (tools), ``game`` (ALFWorld,
  Maze) or ``seed`` (Wordle). WebShop's and SqlGym's clients read the text as ``state``;
  ALFWorld's reads ``available_actions`` and appends them to the first observation itself.
* LMRL-Gym's Maze client puts its own copy of the rules before the server's first observation, so
  ``/reset`` answers it with the position description alone; its Wordle client reads the vocabulary
  from ``GET /filtered_vocab?id=`` and writes the rules itself.
* SciWorld's ``/reset`` returns the task description and the first "look around" separately
  (``task_description``, ``observation``; the client joins them with a newline), plus
  ``task_name`` and ``var_num``; its ``data_idx`` counts through AgentGym's own list of
  (task, variation) pairs, mapped here to our item ids.

Replies carry every field any client reads (``score``, ``terminated``, ...), so one shape per
request serves them all. This module speaks the common shape; what a family's server does
differently (the bare ``/create`` reply, the ``data_idx`` mapping, the ``/reset`` fields, the
vocabulary) is that family's ``AgentGymProtocol`` (``core/agentgym_protocol.py``), declared on its
``TaskSpec`` and asked for here, so the server names no family.
"""

from __future__ import annotations

from typing import Any

from agentgym_envs.core.agentgym_protocol import COMMON_PROTOCOL, AgentGymProtocol
from agentgym_envs.core.tasks import TaskSpec
from agentgym_envs.server.protocol import MAX_ID


def protocol_of(env: Any) -> AgentGymProtocol:
    """The AgentGym-protocol hook of the env's family (the common shape for an env that is not one of ours)."""
    task = getattr(env.unwrapped, "task", None)
    return task.agentgym_protocol() if isinstance(task, TaskSpec) else COMMON_PROTOCOL


def env_number(body: dict[str, Any]) -> int:
    """The env a request addresses: ``env_idx`` (SearchQA, WebArena) wins over ``id``."""
    number = body.get("env_idx", body.get("id"))
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise ValueError("name the env with a non-negative integer 'id' (or 'env_idx')")
    return number


def episode_index(body: dict[str, Any], protocol: AgentGymProtocol = COMMON_PROTOCOL) -> int:
    """The episode a /reset asks for: ``data_idx``, or the field the family's client uses
    (``AgentGymProtocol.episode_keys``); a client that names its env ``env_idx`` (SearchQA, the tool envs) names
    the episode ``id``."""
    index = next((body[key] for key in ("data_idx", *protocol.episode_keys) if key in body), None)
    if index is None:
        index = body.get("id", 0) if "env_idx" in body else 0
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= MAX_ID:
        raise ValueError("name the episode with a non-negative integer 'data_idx'")
    return index


def created(protocol: AgentGymProtocol, number: int, reply: dict[str, Any], body: dict[str, Any]) -> Any:
    """The /create answer. The clients of families with a ``bare_create`` protocol (SearchQA, WebShop,
    SqlGym, the tool envs) take the whole JSON reply as the env number, and so does any client that
    sends ``{"id": ...}`` (the tool and SearchQA clients send ``{"id": 0}``); every other client, and
    any request naming our ``env_id``, reads ``id`` / ``env_idx`` from an object."""
    if "id" in body or (protocol.bare_create and "env_id" not in body):
        return number
    return {**reply, "env_idx": number}


def reply_fields(observation: str, info: dict[str, Any]) -> dict[str, Any]:
    """Fields every reply carries: the text also as ``state`` (WebShop's and SqlGym's clients read
    that name) and the env's ``available_actions`` where it lists them (ALFWorld's client reads them)."""
    fields: dict[str, Any] = {"observation": observation, "state": observation}
    if "available_actions" in info:
        fields["available_actions"] = info["available_actions"]
    return fields


def reset_fields(protocol: AgentGymProtocol, observation: str, info: dict[str, Any]) -> dict[str, Any]:
    """The /reset fields, shaped by the family's protocol (ALFWorld's client appends the action list
    itself; SciWorld's joins the task description and the first look itself)."""
    return protocol.reset_fields(reply_fields(observation, info), observation, info)


def vocabulary(env: Any) -> list[str]:
    """The words the env accepts (LMRL-Gym's ``/filtered_vocab``); ``KeyError`` for an env without a vocabulary."""
    words = protocol_of(env).vocabulary
    if words is None:
        raise KeyError("this env serves no vocabulary (its family declares none)")
    return list(words(getattr(env, "unwrapped", env)))
