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


#: How each AgentGym client names the episode in /reset (SearchQA and the tool envs: ``id``,
#: next to ``env_idx``).
_EPISODE_KEYS = ("data_idx", "idx", "session_id", "item_id", "game", "seed")
#: Families whose AgentGym server answers /create with the bare env number ("tools" holds BIRD too).
BARE_CREATE_FAMILIES = ("search", "webshop", "tools")


def episode_index(body: dict[str, Any]) -> int:
    """The episode a /reset asks for, under whichever name the client uses (see ``_EPISODE_KEYS``)."""
    index = next((body[key] for key in _EPISODE_KEYS if key in body), None)
    if index is None:
        index = body.get("id", 0) if "env_idx" in body else 0
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError("name the episode with a non-negative integer 'data_idx' (or 'idx')")
    return index


def item_of(family: str, index: int) -> int:
    """Our item id for the episode index AgentGym's server of ``family`` uses (the same number elsewhere)."""
    if family == "sciworld":
        from agentgym_envs.sciworld.catalog import from_agentgym_data_idx

        return from_agentgym_data_idx(index)
    return index


def created(family: str, number: int, reply: dict[str, Any], body: dict[str, Any]) -> Any:
    """The /create answer. The clients of SearchQA, WebShop, SqlGym (BIRD) and the tool envs take
    the whole JSON reply as the env number (the tool and SearchQA clients send ``{"id": 0}``);
    every other client, and any request naming our ``env_id``, reads ``id`` / ``env_idx`` from an object."""
    if "id" in body or (family in BARE_CREATE_FAMILIES and "env_id" not in body):
        return number
    return {**reply, "env_idx": number}


def reply_fields(observation: str, info: dict[str, Any]) -> dict[str, Any]:
    """Fields every reply carries: the text also as ``state`` (WebShop's and SqlGym's clients read
    that name) and the env's ``available_actions`` where it lists them (ALFWorld's client reads them)."""
    fields: dict[str, Any] = {"observation": observation, "state": observation}
    if "available_actions" in info:
        fields["available_actions"] = info["available_actions"]
    return fields


def reset_fields(family: str, observation: str, info: dict[str, Any]) -> dict[str, Any]:
    """The /reset fields. ALFWorld's client appends the action list itself; SciWorld's joins the
    task description and the first look itself."""
    fields = reply_fields(observation, info)
    if family == "maze":
        from agentgym_envs.maze.env import FIRST_OBSERVATION

        fields["observation"] = observation.removeprefix(FIRST_OBSERVATION + "\n")
    if family == "alfworld" and "\nAVAILABLE ACTIONS: " in observation:
        fields["observation"] = observation.rsplit("\nAVAILABLE ACTIONS: ", 1)[0]
    if family != "sciworld" or "task_description" not in info:
        return fields
    return {
        **fields,
        "observation": info["first_look"],
        "task_description": info["task_description"],
        "task_name": info.get("sciworld_task"),
        "var_num": info.get("variation"),
    }


def vocabulary(env: Any) -> list[str]:
    """The words a Wordle env accepts (LMRL-Gym's ``/filtered_vocab``); ``KeyError`` for another env."""
    if family_of(env) != "wordle":
        raise KeyError("only a Wordle env has a vocabulary")
    from agentgym_envs.wordle.words import answers

    return list(answers())
