"""Request and response bodies of both APIs (they generate the OpenAPI schema).

AgentGym's protocol (``/create``, ``/reset``, ``/step``, ``/observation``, ``/close``) uses
integer env ids and ``{observation, reward, done}`` replies; its bodies ignore unknown fields,
because AgentGym's clients send env-specific extras (TextCraft's ``minecraft_dir``, ``goal``).
Our ``/v1`` API returns the full Gymnasium step result and rejects unknown fields, so typos fail
loudly.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

#: integers stay exact for JSON clients that parse numbers as doubles
MAX_SEED = 2**53 - 1
MAX_ID = 2**53 - 1


def _digits_only(value: Any) -> Any:
    """Query strings are text: accept '12', not '12.0' or '1e3' (which lax int parsing would)."""
    if isinstance(value, str) and not re.fullmatch(r"[0-9]{1,20}", value):
        raise ValueError("must be a whole non-negative number written with digits only")
    return value


#: an integer query parameter written with digits only
QueryInt = Annotated[int, BeforeValidator(_digits_only)]


class Strict(BaseModel):
    """A /v1 request body: exact types, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Lenient(BaseModel):
    """An AgentGym request body: exact types, unknown fields ignored (AgentGym clients send extras)."""

    model_config = ConfigDict(extra="ignore", strict=True)


class ErrorBody(BaseModel):
    error: str = Field(description="stable machine-readable code, e.g. unknown_session, too_many_envs, env_crashed")
    detail: str = Field(description="what went wrong and what to do about it")


# ---- AgentGym protocol --------------------------------------------------------------------------
class AgentGymCreate(Lenient):
    env_id: Optional[str] = Field(None, max_length=200, description="which served id (default: the server's first)")
    id: Optional[int] = Field(None, description="sent by SearchQA's client, which then reads the bare env number")


class AgentGymId(Lenient):
    """Names an env: ``id``, or ``env_idx`` as AgentGym's SearchQA and WebArena clients write it."""

    id: Optional[int] = Field(None, ge=0, le=MAX_ID, description="the env (the episode for SearchQA, see env_idx)")
    env_idx: Optional[int] = Field(None, ge=0, le=MAX_ID,
                                   description="the env, as SearchQA and WebArena clients name it")


class AgentGymReset(AgentGymId):
    """A /reset: the episode is ``data_idx``, or the field the family's client names it by (its
    ``AgentGymProtocol.episode_keys``: kept, as every field a client sends, and read by ``compat.episode_index``)."""

    model_config = ConfigDict(extra="allow", strict=True)

    data_idx: Optional[int] = Field(None, ge=0, le=MAX_ID, description="the episode: AgentGym's data index of the env")


class AgentGymStep(AgentGymId):
    action: str


class AgentGymCreated(BaseModel):
    id: int
    env_idx: int = Field(description="the same number, for clients that name envs by env_idx")
    env_id: str
    observation: str
    reward: float
    done: bool


class AgentGymState(BaseModel):
    model_config = ConfigDict(extra="allow")  # state, available_actions; SciWorld's task_description, ...

    id: int
    observation: str
    reward: float
    done: bool
    score: Optional[float] = None
    success: Optional[bool] = None


class AgentGymStepped(BaseModel):
    model_config = ConfigDict(extra="allow")  # state, available_actions

    observation: str
    reward: float
    done: bool
    terminated: bool = Field(description="the episode ended (WebArena clients read this name)")
    truncated: bool
    score: Optional[float] = None
    success: Optional[bool] = None
    valid_action: Optional[bool] = None


class AgentGymClosed(BaseModel):
    id: int
    closed: bool


# ---- v1 -----------------------------------------------------------------------------------------
class CreateSession(Strict):
    env_id: Optional[str] = Field(None, max_length=200, description="which served id (default: the server's first)")
    max_turns: Optional[int] = Field(None, ge=1, le=100_000, description="the TimeLimit (default: the task's turn cap)")


class SessionCreated(BaseModel):
    session: str = Field(description="key of the session in the /v1 API: random, the session's only credential "
                                     "(keep it to yourself; no route lists it)")
    env_id: str
    server_id: str
    max_turns: Optional[int]
    observation_max_length: int
    action_max_length: int


class ResetRequest(Strict):
    seed: Optional[int] = Field(None, ge=0, le=MAX_SEED)
    options: Optional[dict[str, Any]] = Field(None, description='e.g. {"item_id": 17} or {"split": "test", "index": 3}')


class ResetResult(BaseModel):
    observation: str
    info: dict[str, Any]


class StepRequest(Strict):
    action: str = Field(description="the raw model response")
    seq: Optional[int] = Field(
        None, ge=0, le=MAX_ID,
        description="the turn number in this episode; a retried request with the same seq is answered from the "
        "first attempt instead of being applied twice",
    )


class StepResult(BaseModel):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class SessionState(BaseModel):
    session: str
    env_id: str
    episode_active: bool
    done: bool
    turn: Optional[int]
    observation: str
    crashed: Optional[str]
    busy: bool
    idle_s: float
    age_s: float


class LiveSession(BaseModel):
    """One live env as ``GET /v1/sessions`` lists it: no key, no id, no observation (they belong to its client)."""

    env_id: str
    episode_active: bool
    busy: bool
    idle_s: float
    age_s: float


class ActionSuggestion(BaseModel):
    action: str


class Closed(BaseModel):
    session: str
    closed: bool


class ServedEnv(BaseModel):
    env_id: str
    family: Optional[str]
    subtask: Optional[str]
    max_turns: Optional[int]
    train_items: Optional[int]
    test_items: Optional[int]


class Health(BaseModel):
    status: str
    server_id: str
    version: str
    uptime_s: float
    live_envs: int
    max_envs: int
    default_env_id: str
    env_ids: list[str]


class Metrics(BaseModel):
    server_id: str
    uptime_s: float
    live_envs: int
    env_load: int = Field(description="summed weight of the live envs (a SciWorld or browser env weighs 8, most 1); "
                                      "at most max_envs")
    busy_envs: int
    max_envs: int
    idle_timeout_s: float
    created_total: int
    closed_total: int
    reaped_total: int
    crashed_total: int
    replaced_total: int
    rejected_full_total: int
    resets_total: int
    steps_total: int
    requests_total: int
    responses_by_status: dict[str, int]
    env_step_ms: Optional[dict[str, float]]
    rss_mb: Optional[float]
