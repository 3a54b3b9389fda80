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
* SciWorld's ``/reset`` returns the task description and the first "look around" separately
  (``task_description``, ``observation``; the client joins them with a newline), plus
  ``task_name`` and ``var_num``; its ``data_idx`` counts through AgentGym's own list of
  (task, variation) pairs, mapped here to our item ids.

Replies carry every field any client reads (``score``, ``terminated``, ...), so one shape per
request serves them all.
"""

from __future__ import annotations

from typing import Any

def family_of(env: Any) -> str:
    """The env's family ("textcraft", "sciworld", ...), or "" for an env that is not one of ours."""
    return str(getattr(env.unwrapped, "family", "") or "")


def env_number(body: dict[str, Any]) -> int:
    """The env a request addresses: ``env_idx`` (SearchQA, WebArena) wins over ``id``."""
    number = body.get("env_idx", body.get("id"))
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise ValueError("name the env with a non-negative integer 'id' (or 'env_idx')")
    return number


def episode_index(body: dict[str, Any]) -> int:
    """The episode a /reset asks for: ``data_idx``, WebArena's ``idx``, or SearchQA's ``id`` next to ``env_idx``."""
    if "env_idx" in body:
        index = body.get("idx", body.get("data_idx", body.get("id", 0)))
    else:
        index = body.get("data_idx", 0)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError("name the episode with a non-negative integer 'data_idx' (or 'idx')")
    return index


def item_of(family: str, index: int) -> int:
    """Our item id for the episode index AgentGym's server of ``family`` uses (the same number elsewhere)."""
    if family == "sciworld":
        from agentgym_envs.sciworld.catalog import from_agentgym_data_idx

        return from_agentgym_data_idx(index)
    return index


def created(number: int, reply: dict[str, Any], searchqa_style: bool) -> Any:
    """The /create answer. SearchQA's client sends ``{"id": 0}`` and takes the whole JSON reply as
    the env number; every other client reads ``id`` (or ``env_idx``) from an object."""
    return number if searchqa_style else {**reply, "env_idx": number}


def reset_fields(family: str, observation: str, info: dict[str, Any]) -> dict[str, Any]:
    """Family-specific /reset fields; for SciWorld, the observation becomes the first look alone."""
    if family != "sciworld" or "task_description" not in info:
        return {"observation": observation}
    return {
        "observation": info["first_look"],
        "task_description": info["task_description"],
        "task_name": info.get("sciworld_task"),
        "var_num": info.get("variation"),
    }
