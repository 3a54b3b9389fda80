"""``RemoteEnv``: a Gymnasium env whose engine runs in an ``agentgym serve`` process.

    env = gym.make("AgentGym/Remote-v0", url="http://10.0.0.7:8000", env_id="AgentGym/TextCraft-v0")
    obs, info = env.reset(options={"split": "test", "index": 0})   # same contract as the local env

It behaves like the served env (same observations, rewards, ``info``, turn cap, oracle), so the
trainer and evaluation use it like any other id. What it adds is what a network needs:

* one pooled keep-alive HTTP client per server, shared by every ``RemoteEnv`` of the process;
* timeouts on every request, and retries with backoff on connection failures. A step carries its
  turn number, so the server answers a retried step from the first attempt instead of applying
  the action twice: every request is safe to retry;
* clear errors (``ServerUnavailableError``, ``SessionLostError``, ``EnvCrashedError``,
  ``ServerBusyError``, all ``RemoteEnvError``) when an episode cannot go on, and recovery on the
  next ``reset()``: a session closed, reaped, or lost with a server restart is re-created.

``url`` defaults to the ``AGENTGYM_SERVER_URL`` environment variable; there is no implicit
local server: start one with ``agentgym serve --env <id or family>``.
"""

from __future__ import annotations

import inspect
import os
import socket
import threading
from typing import Any, ClassVar
from urllib.parse import urlsplit

import gymnasium as gym
import numpy as np

from agentgym_envs.core.env import EnvCopyError, ansi_frame
from agentgym_envs.core.extras import require
from agentgym_envs.core.net import deadline, deadline_transport, is_loopback
from agentgym_envs.core.safety import valid_utf8
from agentgym_envs.core.spaces import TextSpace

httpx = require("httpx", extra="server")
tenacity = require("tenacity", extra="server")

URL_VARIABLE = "AGENTGYM_SERVER_URL"
#: The server's access token, when it was started with one (``agentgym serve --token``).
TOKEN_VARIABLE = "AGENTGYM_SERVER_TOKEN"
#: errors after which the request may not have been processed; retrying them is safe (steps carry seq)
_TRANSPORT_ERRORS = (httpx.TransportError,)
#: the server took the request but its answer did not come in time (a slow host, not a dead one)
_SLOW_ERRORS = (httpx.ReadTimeout, httpx.WriteTimeout)
#: characters of a server's error detail kept in an exception's message (a hostile server may send megabytes)
DETAIL_MAX_CHARS = 1000


class _TryAgain(Exception):
    """A request worth retrying (``error`` says why: a transport failure, or the server's 429)."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class RemoteEnvError(RuntimeError):
    """A served env could not do what was asked; ``code`` is the server's error code if it sent one."""

    def __init__(self, message: str, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.code = code
        self.status = status


class ServerUnavailableError(RemoteEnvError, ConnectionError):
    """The server did not answer (down, restarting, unreachable, too slow); a ``ConnectionError`` too, so the CLI
    reports it in one line as any service that is down."""


class ServerTimeoutError(ServerUnavailableError):
    """The server took the request but did not finish answering within ``timeout`` seconds (code ``timeout``): a
    slow host, which may well be alive (the router health-checks it before taking it out of service)."""


class BadReplyError(ServerUnavailableError):
    """The server answered with something that is not the protocol's reply (code ``bad_reply``): not JSON, a
    field missing or of the wrong type, an observation longer than the env's observation space allows."""


class SessionLostError(RemoteEnvError):
    """The server no longer has this env (it restarted, reaped it after idling, or it was closed)."""


class EnvCrashedError(RemoteEnvError):
    """The env's engine raised; the server replaced it and the episode is lost."""


class ServerBusyError(RemoteEnvError):
    """The server hosts its maximum number of envs."""


class RemoteResetNeeded(RemoteEnvError, gym.error.ResetNeeded):
    """``step`` without a running episode (also raised locally before the first reset)."""


# ---- one pooled HTTP client per server, shared by every RemoteEnv of the process ----------------
# Per process: a forked child (an async vector env's worker) must not write to the parent's sockets, so the
# pool is emptied in the child (a RemoteEnv it inherited makes itself a new client on its next request).
_POOL_LOCK = threading.Lock()
_POOL: dict[tuple, list] = {}  # key -> [client, users]


def _forget_pool_in_child() -> None:
    """After ``fork``: the parent's clients (and their sockets) are the parent's; the child starts a pool of its own."""
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()  # another thread may have held it at fork time
    _POOL.clear()  # dropped, not closed: closing would act on connections the parent still uses


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _is_loopback_url(url: str) -> bool:
    return is_loopback(urlsplit(url).hostname or "")


def _acquire_client(url: str, timeout: float, connect_timeout: float, pool_size: int) -> tuple[tuple, Any]:
    key = (url, timeout, connect_timeout, pool_size)
    with _POOL_LOCK:
        entry = _POOL.get(key)
        if entry is None:
            transport = deadline_transport(  # timeout bounds the whole request, not each read
                limits=httpx.Limits(max_connections=pool_size, max_keepalive_connections=pool_size,
                                    keepalive_expiry=4.0),
                socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            )
            client = httpx.Client(
                base_url=url,
                timeout=httpx.Timeout(timeout, connect=connect_timeout, pool=timeout),
                transport=transport,
                trust_env=not _is_loopback_url(url),  # no proxy detours for loopback
            )
            entry = _POOL[key] = [client, 0]
        entry[1] += 1
        return key, entry[0]


def _release_client(key: tuple) -> None:
    with _POOL_LOCK:
        entry = _POOL.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _POOL[key]
    entry[0].close()


class RemoteEnv(gym.Env[str, str]):
    """A served env used locally (``AgentGym/Remote-v0``).

    ``url``: the server (default ``$AGENTGYM_SERVER_URL``); ``env_id``: which of its ids (default:
    the server's first); ``max_turns``: the served env's turn cap (default: the task's; note that
    ``gym.make(..., max_episode_steps=N)`` only adds a local ``TimeLimit``, which can shorten
    episodes but not lengthen them past the served cap);
    ``timeout`` / ``connect_timeout``: seconds per request; ``retries``: further attempts after a
    connection failure or a full server, with exponential ``backoff``; ``pool_size``: keep-alive
    connections shared by all envs of this process talking to the same server; ``token``: the
    server's access token (default ``$AGENTGYM_SERVER_TOKEN``), sent as a bearer token (redirects
    are never followed, so it only ever goes to ``url``).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        url: str | None = None,
        env_id: str | None = None,
        render_mode: str | None = None,
        *,
        max_turns: int | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.25,
        pool_size: int = 64,
        token: str | None = None,
    ):
        url = url or os.environ.get(URL_VARIABLE)
        if not url:
            raise ValueError(
                f"RemoteEnv needs the URL of an env server: pass url='http://host:port' or set {URL_VARIABLE}. "
                "Start a server with: agentgym serve --env <id or family> --port 8000"
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.url = url.rstrip("/")
        self.requested_env_id = env_id
        self.render_mode = render_mode
        self.max_turns = max_turns
        self.retries = max(0, int(retries))
        self.backoff = backoff
        token = token or os.environ.get(TOKEN_VARIABLE)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client_settings = (timeout, connect_timeout, pool_size)
        self._pool_key, self._client = _acquire_client(self.url, *self._client_settings)
        self._client_pid = os.getpid()
        self._closed = False
        self.session: str | None = None
        self.server_id: str | None = None
        self.env_id: str | None = None
        self.served_max_turns: int | None = None
        self._episode_active = False
        self._seq = 0
        self._info: dict[str, Any] = {}
        self._last_action: str | None = None
        self._last_observation = ""
        try:
            created = self._create_session()
        except BaseException:
            self.close()
            raise
        self.observation_space = TextSpace(created["observation_max_length"])
        self.action_space = TextSpace(created["action_max_length"])

    # ---- copies -----------------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any]) -> RemoteEnv:
        raise EnvCopyError(self._copy_refusal())

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise EnvCopyError(self._copy_refusal())

    def _copy_refusal(self) -> str:
        served = f" serving {self.env_id}" if self.env_id else ""
        return (f"AgentGym/Remote-v0{served} cannot be copied or pickled: a copy would drive the same server session. "
                "To branch an episode, make a new env, reset it with the same item and seed, and replay the actions.")

    # ---- Gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on the served env, making a new one when the server lost the session (restarted,
        reaped) or after ``close``.

        Args:
            seed: the episode's seed, as for a local env.
            options: the env's reset options (``{"item_id": id}``, ``{"split": name, "index": i}``).

        Returns:
            The first observation and the info dict.
        """
        super().reset(seed=seed)
        if self._closed:  # reset after close starts afresh, as a local env does (a new served env)
            self._pool_key, self._client = _acquire_client(self.url, *self._client_settings)
            self._client_pid = os.getpid()
            self._closed, self._episode_active, self.session = False, False, None
        body = {"seed": seed, "options": options}
        if self.session is None:
            self._episode_active = False
            self._create_session()
        try:
            # a reset the env rejects (ValueError: bad options) keeps the episode in progress, as a local env does
            data = self._request("POST", f"/v1/sessions/{self.session}/reset", body, reply="reset")
        except SessionLostError:  # restarted server, reaped or closed env: start afresh
            self._episode_active = False
            self.session = None
            self._create_session()
            data = self._request("POST", f"/v1/sessions/{self.session}/reset", body, reply="reset")
        except ValueError:
            raise
        except BaseException:  # the engine crashed or the server is gone: the episode is lost
            self._episode_active = False
            raise
        self._seq = 0
        self._episode_active = True
        self._last_action, self._last_observation, self._info = None, data["observation"], data["info"]
        return data["observation"], data["info"]

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one response on the served env; each step carries a sequence number so a retried request is
        never applied twice.

        Args:
            action: the model's response; an over-long one is cut before it is sent (the env would reject it).

        Returns:
            Observation, reward, terminated, truncated and info, as a local env returns them.

        Raises:
            RemoteResetNeeded: no episode is running (not reset yet, closed, or lost to a failed request).
        """
        if self._closed:
            raise RemoteResetNeeded("this remote env was closed: call reset() to start a new episode", code="closed")
        if not self._episode_active:
            raise RemoteResetNeeded("call reset() before step(): no episode is running on this remote env",
                                    code="reset_needed")
        if not isinstance(action, str):
            raise TypeError(f"actions are model responses (str), got {type(action).__name__}")
        # the env rejects over-long responses anyway; do not ship megabytes to be told so
        limit = 4 * self.action_space.max_length
        sent = action if len(action) <= limit else action[:limit]
        sent = valid_utf8(sent)  # a lone surrogate cannot travel as UTF-8 JSON; the env would drop it anyway
        self._seq += 1
        try:
            data = self._request("POST", f"/v1/sessions/{self.session}/step", {"action": sent, "seq": self._seq},
                                 reply="step")
        except RemoteEnvError:
            self._episode_active = False
            raise
        self._last_action, self._last_observation, self._info = action, data["observation"], data["info"]
        return (data["observation"], float(data["reward"]), bool(data["terminated"]), bool(data["truncated"]),
                data["info"])

    def render(self) -> str | None:
        """With ``render_mode="ansi"``, the last action and observation as a text frame; otherwise None."""
        return ansi_frame(self._last_action, self._last_observation) if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Close the served env (best effort: the server reaps it anyway) and release the pooled client."""
        if self._closed:
            return
        self._own_client()  # after a fork: release this process's client, never the parent's
        self._closed = True
        self._episode_active = False
        if self.session is not None:
            try:
                with deadline(2.0):
                    self._own_client().delete(f"/v1/sessions/{self.session}", timeout=2.0)
            except Exception:  # server gone: its envs went with it
                pass
            self.session = None
        _release_client(self._pool_key)
        super().close()

    # ---- what the local registry knows of the served id ------------------------------------------
    @property
    def task(self) -> Any:
        """The local registry's ``TaskSpec`` of the served id (as a local env's ``task``), None where it has none."""
        if self.env_id is None:
            return None
        from agentgym_envs.core.tasks import get_task

        try:
            return get_task(self.env_id)
        except KeyError:
            return None

    @property
    def description(self) -> str:
        """The served id's description, from the local registry (empty where it does not know the id)."""
        return self.task.description if self.task is not None else ""

    def split(self, name: str) -> list[int]:
        """The item ids of the served id's split ``name``, as the local registry has them (the server's ids are
        the same ones: both read the family's ``splits.json``).

        Raises:
            KeyError: the local registry does not know the served id (install its family here for its splits).
        """
        if self.task is None:
            raise KeyError(f"{self.env_id} is not in this machine's registry, so its splits are unknown here; "
                           "install its family (agentgym list) to use them")
        return self.task.split(name)

    # ---- what the agents and tests use on TextEnv ------------------------------------------------
    def oracle_action(self) -> str:
        """The served env's expert response for the current state."""
        self._check_episode()
        try:
            return self._request("GET", f"/v1/sessions/{self.session}/oracle", reply="action")["action"]
        except RemoteEnvError as error:
            if error.code == "no_oracle":
                raise NotImplementedError(f"{self.env_id} has no oracle") from None
            raise

    def random_action(self, rng: np.random.Generator) -> str:
        """A plausible random action of the served env, drawn from a seed taken from ``rng``."""
        return self.seeded_random_action(int(rng.integers(2**31)))

    def seeded_random_action(self, seed: int) -> str:
        """The served env's random action for ``seed`` (the same seed gives the same action in the same state)."""
        self._check_episode()
        return self._request("GET", f"/v1/sessions/{self.session}/random-action", params={"seed": seed},
                             reply="action")["action"]

    def available_actions(self) -> list[str] | None:
        """The valid actions the env listed in its last info, or None where the env lists none."""
        return self._info.get("available_actions")

    # ---- plumbing -------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RemoteEnvError("this RemoteEnv is closed; make a new one", code="closed")

    def _check_episode(self) -> None:
        self._check_open()
        if not self._episode_active:
            raise RemoteResetNeeded("call reset() first: no episode is running on this remote env", code="reset_needed")

    def _create_session(self) -> dict[str, Any]:
        """A new served env (closing the previous one, if any, so a session is never leaked)."""
        if self.session is not None:
            try:
                with deadline(2.0):
                    self._own_client().delete(f"/v1/sessions/{self.session}", timeout=2.0)
            except Exception:
                pass
            self.session = None
        body = {"env_id": self.requested_env_id, "max_turns": self.max_turns}
        created = self._request("POST", "/v1/sessions", body, reply="created")
        self.session, self.server_id, self.env_id = created["session"], created["server_id"], created["env_id"]
        self.served_max_turns = created["max_turns"]
        return created

    def _own_client(self) -> Any:
        """This process's pooled client: an env that crossed a ``fork`` takes a new one instead of the parent's."""
        if self._client_pid != os.getpid():
            self._pool_key, self._client = _acquire_client(self.url, *self._client_settings)
            self._client_pid = os.getpid()
        return self._client

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None,
                 params: dict[str, Any] | None = None, reply: str = "") -> Any:
        """One API call, its answer checked against the protocol's ``reply`` shape; transport failures and 429
        (server full) are retried with exponential backoff; each attempt ends within ``timeout`` seconds."""
        client = self._own_client()

        def attempt() -> Any:
            try:
                with deadline(self._client_settings[0]):
                    response = client.request(method, path, json=body, params=params, headers=self._headers)
            except _TRANSPORT_ERRORS as error:
                raise _TryAgain(error) from error
            if response.status_code == 429:
                raise _TryAgain(self._error(response))
            if response.is_success:
                return self._checked_reply(response, reply, f"{method} {path}")
            raise self._error(response)

        retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(self.retries + 1), reraise=True,
                                     wait=tenacity.wait_exponential(multiplier=self.backoff, max=5.0),
                                     retry=tenacity.retry_if_exception_type(_TryAgain))
        try:
            return retrying(attempt)
        except _TryAgain as failed:
            last = failed.error
        if isinstance(last, RemoteEnvError):  # still full after the retries: the server's own 429 error
            raise last
        if isinstance(last, _SLOW_ERRORS):
            raise ServerTimeoutError(
                f"the env server at {self.url} did not finish answering {method} {path} within "
                f"{self._client_settings[0]:g} s ({self.retries + 1} attempts). Any running episode is lost; "
                "call reset() to start another.", code="timeout") from last
        raise ServerUnavailableError(
            f"the env server at {self.url} did not answer {method} {path} after {self.retries + 1} attempts "
            f"({type(last).__name__}: {last}). Any running episode is lost; call reset() once the server is back.",
            code="unavailable",
        ) from last

    def _checked_reply(self, response: Any, reply: str, call: str) -> Any:
        """The JSON of a successful answer, if it has the fields (and types) a ``reply`` must have; a server that
        answers anything else (a lying host, a proxy's page) gets a ``BadReplyError``, never a ``TypeError``
        further on."""
        try:
            data = response.json()
        except ValueError:
            data = None
        fields = _REPLY_FIELDS.get(reply, {})
        problem = "not a JSON object" if not isinstance(data, dict) else next(
            (f"its {name!r} is not {_type_names(kind)}" for name, kind in fields.items()
             if not isinstance(data.get(name), kind) or (kind is not bool and isinstance(data.get(name), bool))),
            None)
        limit = getattr(getattr(self, "observation_space", None), "max_length", None)
        if problem is None and limit and isinstance(data.get("observation"), str) and len(data["observation"]) > limit:
            problem = f"its observation has {len(data['observation'])} characters, over the env's {limit}"
        if problem is not None:
            raise BadReplyError(f"env server {self.url} answered {call} with a reply that is not the protocol's "
                                f"({problem})", code="bad_reply", status=response.status_code)
        return data

    def _error(self, response: Any) -> Exception:
        try:
            payload = response.json()
            code, detail = payload.get("error"), payload.get("detail", response.text)
        except Exception:
            code, detail = None, response.text
        code = code if isinstance(code, str) and len(code) <= 64 else None
        detail = str(detail)
        if len(detail) > DETAIL_MAX_CHARS:  # a hostile server's megabytes stay out of logs and tracebacks
            detail = f"{detail[:DETAIL_MAX_CHARS]}... ({len(detail)} characters)"
        where = f"env server {self.url}"
        message = f"{where}: {detail} (HTTP {response.status_code}{', ' + code if code else ''})"
        status = response.status_code
        if code in ("bad_reset", "env_not_served"):
            return ValueError(detail)
        if code in ("unknown_session", "session_closed", "stale_session"):
            return SessionLostError(f"{message}. The episode is lost; reset() starts a new one on a fresh env.",
                                    code, status)
        if code == "env_crashed":
            return EnvCrashedError(message, code, status)
        if code == "reset_needed":
            return RemoteResetNeeded(message, code, status)
        if status == 429:
            return ServerBusyError(message, code, status)
        if status in (502, 503, 504):
            return ServerUnavailableError(message, code, status)
        return RemoteEnvError(message, code, status)


#: what each kind of successful answer must hold (field: type), checked before anything reads it
_REPLY_FIELDS: dict[str, dict[str, Any]] = {
    "created": {"session": str, "server_id": str, "env_id": str, "max_turns": (int, type(None)),
                "observation_max_length": int, "action_max_length": int},
    "reset": {"observation": str, "info": dict},
    "step": {"observation": str, "reward": (int, float), "terminated": bool, "truncated": bool, "info": dict},
    "action": {"action": str},
}


def _type_names(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if item is type(None) else item.__name__ for item in kinds)


def make_remote_env(**kwargs: Any) -> gym.Env:
    """``AgentGym/Remote-v0``'s entry point: a ``RemoteEnv`` whose ``TimeLimit`` is the served env's turn cap, so
    ``gym.make("AgentGym/Remote-v0", url=..., env_id=X).spec.max_episode_steps`` is X's cap (or ``max_turns``), as
    for ``gym.make(X)``; ``max_episode_steps`` in ``gym.make`` still adds a shorter one around it.

    Args:
        kwargs: ``RemoteEnv``'s arguments.

    Returns:
        The env (``env.unwrapped`` is the ``RemoteEnv``).
    """
    env = RemoteEnv(**kwargs)
    if env.served_max_turns:
        return gym.wrappers.TimeLimit(env, int(env.served_max_turns))
    return env


make_remote_env.__signature__ = inspect.signature(RemoteEnv)  # what check_env_kwargs and tools read
make_remote_env.metadata = RemoteEnv.metadata  # render modes, as gym.make reads them off a creator
