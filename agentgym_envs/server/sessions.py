"""The live env instances of one server, independent of HTTP.

``SessionManager`` owns every env a server hosts and enforces what keeps a long-running env
server healthy: a cap on live envs, one request at a time per env, idle envs reaped after a
timeout (clients that vanish never leak an engine), an env whose engine raises replaced by a
fresh instance (the session survives, the episode does not), and every env closed on shutdown.
Failures are ``ServerError`` exceptions carrying the HTTP status and a machine-readable code,
so the web layer only translates them.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_envs.core.tasks import get_task, list_tasks

logger = logging.getLogger("agentgym.server")

#: Exceptions a bad ``reset`` request raises (unknown option, item out of range, bad seed): the
#: env itself is fine, the client gets a 400.
CLIENT_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, KeyError, OverflowError, gym.error.Error)

def env_weight(env_id: str) -> int:
    """The weight of one env of ``env_id``, in units of a light in-process env (tens of MB), as its family declares
    it (``TaskSpec.weight``: a ScienceWorld JVM holds ~320 MB, a browser env a Chromium); 1 for ids outside the task
    table. ``max_envs`` caps the sum of the live envs' weights, so 256 TextCraft envs fit, but 32 SciWorld ones."""
    try:
        return get_task(env_id).weight
    except KeyError:
        return 1


#: How many closed sessions are remembered, to tell "closed" / "reaped" from "never existed".
TOMBSTONES = 10_000


def new_session_key() -> str:
    """A /v1 session key: 144 random bits (``secrets.token_urlsafe``), so knowing the server, the other
    keys or how many sessions exist never helps to guess one: the key is the session's only credential."""
    return secrets.token_urlsafe(18)


class ServerError(Exception):
    """A failure the client must see: HTTP ``status``, stable ``code`` and a readable message."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


@dataclass
class StepResult:
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


@dataclass
class Session:
    """One env instance and the state of its current episode."""

    number: int
    env_id: str
    max_turns: int | None
    env: gym.Env
    weight: int = 1
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    episode_active: bool = False
    crashed: str | None = None
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    reward: float = 0.0
    #: the episode's rewards so far (what AgentGym's tool servers reply as ``reward``)
    episode_return: float = 0.0
    done: bool = False
    last_seq: int | None = None
    last_step: StepResult | None = None
    #: the /v1 key (unguessable); the only way to reach a session made through /v1
    key: str = field(default_factory=new_session_key)
    #: made by AgentGym's ``/create``: also reachable by its integer ``number`` (AgentGym's clients need that)
    agentgym: bool = False


def resolve_env_ids(id_or_family: str) -> list[str]:
    """The env ids a server started with ``--env ID_OR_FAMILY`` hosts; the first is the default.

    A registered id serves that id alone; a family name (``textcraft``, any case) serves all the
    family's ids with its family-wide id first. Any other Gymnasium id with text spaces works too.
    """
    key = id_or_family.split(":", 1)[-1].strip()
    family = [spec.env_id for spec in list_tasks() if spec.family.lower() == key.lower()]
    if family:
        family.sort(key=lambda env_id: get_task(env_id).subtask is not None)  # stable: family-wide id first
        return family
    if key in gym.registry:
        return [key]
    families = sorted({spec.family for spec in list_tasks()})
    raise ValueError(f"{id_or_family!r} is neither a registered env id nor a family; "
                     f"families: {families}, ids: `agentgym list`")


def check_servable(env_id: str) -> None:
    """Fail early (with the pip hint) when an id's extra is missing."""
    try:
        spec = get_task(env_id)
    except KeyError:
        return
    if not spec.extra_installed():
        raise ValueError(f"{env_id} needs {spec.install_hint}")


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: numpy scalars and arrays unpacked, non-finite floats as None."""
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item) for item in value]
    return str(value)


class SessionManager:
    """Thread-safe table of live envs (every public method may be called from any thread)."""

    def __init__(
        self,
        env_ids: list[str],
        max_envs: int = 256,
        idle_timeout: float = 600.0,
        busy_timeout: float = 60.0,
    ):
        if not env_ids:
            raise ValueError("a server needs at least one env id")
        if max_envs < 1:
            raise ValueError(f"max_envs must be at least 1, got {max_envs}")
        for env_id in env_ids:
            check_servable(env_id)
        self.env_ids = list(env_ids)
        self.default_env_id = env_ids[0]
        self.max_envs = max_envs
        self.idle_timeout = idle_timeout
        self.busy_timeout = busy_timeout
        #: changes on every start, so sessions of an earlier run are recognised as such
        self.server_id = secrets.token_hex(4)
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._sessions: dict[int, Session] = {}
        self._by_key: dict[str, Session] = {}
        self._tombstones: OrderedDict[int, str] = OrderedDict()  # AgentGym numbers of closed /create envs
        self._key_tombstones: OrderedDict[str, str] = OrderedDict()
        self._next_number = 0
        self._pending = 0  # the weight of envs being made
        self._closing = False
        self._step_seconds: deque[float] = deque(maxlen=2000)
        self.counters = {
            "created": 0, "closed": 0, "reaped": 0, "crashed": 0, "replaced": 0,
            "rejected_full": 0, "resets": 0, "steps": 0,
        }

    # ---- naming ---------------------------------------------------------------------------------
    def key(self, session: Session) -> str:
        """The v1 API's session key: random (``new_session_key``), shown only to the client that made it."""
        return session.key

    def lookup(self, key: str) -> Session:
        """The live session with /v1 key ``key``. An unknown key gets one answer whatever it looks like
        (it never echoes the key nor says what keys look like): only the key's holder can tell more."""
        with self._lock:
            session = self._by_key.get(key) if isinstance(key, str) else None
            if session is not None:
                return session
            reason = self._key_tombstones.get(key) if isinstance(key, str) else None
        if reason is not None:
            raise ServerError(410, "session_closed", f"this session no longer exists: {reason}; create a new one")
        raise ServerError(
            404, "unknown_session",
            "no live session has this key on this server (never created here, closed long ago, or the server "
            "restarted since): create a new session (POST /v1/sessions) and reset it",
        )

    def get(self, number: int) -> Session:
        """The live env with AgentGym id ``number`` (envs made by ``/create`` only: a /v1 session is
        reachable by its key alone)."""
        with self._lock:
            session = self._sessions.get(number)
            if session is not None and session.agentgym:
                return session
            reason = self._tombstones.get(number)
        if reason is not None:
            raise ServerError(410, "session_closed", f"env {number} no longer exists: {reason}; create a new one")
        raise ServerError(404, "unknown_session", f"no env with id {number} on this server; create one first")

    # ---- lifecycle ------------------------------------------------------------------------------
    def _make(self, env_id: str, max_turns: int | None) -> gym.Env:
        kwargs: dict[str, Any] = {"disable_env_checker": True}
        if max_turns is not None:
            kwargs["max_episode_steps"] = max_turns
        env = gym.make(env_id, **kwargs)
        for space in (env.observation_space, env.action_space):
            if not hasattr(space, "max_length"):
                env.close()
                raise ValueError(f"{env_id} is not a text env ({space!r}); only envs with text spaces can be served")
        return env

    def create(self, env_id: str | None = None, max_turns: int | None = None, agentgym: bool = False) -> Session:
        """A new env; ``agentgym``: made by AgentGym's ``/create``, so its integer id reaches it too."""
        env_id = env_id or self.default_env_id
        if env_id not in self.env_ids:
            raise ServerError(404, "env_not_served", f"this server hosts {self.env_ids}, not {env_id!r}")
        with self._lock:
            if self._closing:
                raise ServerError(503, "shutting_down", "the server is shutting down")
            weight = env_weight(env_id)
            if self._load() + weight > self.max_envs:
                self.counters["rejected_full"] += 1
                raise ServerError(
                    429, "too_many_envs",
                    f"the server already hosts its maximum of {self.max_envs} envs, counted by weight (the live ones "
                    f"weigh {self._load()}, a {env_id} env {weight}); close one (or wait for idle envs to be reaped "
                    f"after {self.idle_timeout:g} s), or start the server with a larger --max-envs",
                    headers={"Retry-After": "1"},
                )
            self._pending += weight
            number = self._next_number
            self._next_number += 1
        try:
            env = self._make(env_id, max_turns)
        except Exception as error:
            logger.exception("could not make %s", env_id)
            raise ServerError(503, "env_unavailable",
                              f"could not start {env_id}: {type(error).__name__}: {error}") from error
        finally:
            with self._lock:
                self._pending -= weight
        session = Session(number=number, env_id=env_id, max_turns=max_turns, env=env, weight=weight, agentgym=agentgym)
        with self._lock:
            closing = self._closing
            if not closing:
                self._sessions[number] = session
                self._by_key[session.key] = session
                self.counters["created"] += 1
        if closing:
            self._close_env(env)
            raise ServerError(503, "shutting_down", "the server is shutting down")
        return session

    def close(self, session: Session, reason: str = "it was closed by its client") -> None:
        """Remove a session and close its env (after an in-flight request on it, if any)."""
        with self._lock:
            if self._sessions.pop(session.number, None) is None:
                return
            self._tombstone(session, reason)
            self.counters["closed"] += 1
        acquired = session.lock.acquire(timeout=self.busy_timeout)
        try:
            self._close_env(session.env)
        finally:
            if acquired:
                session.lock.release()

    def reap_idle(self, now: float | None = None) -> int:
        """Close every env idle for longer than ``idle_timeout``; returns how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [s for s in self._sessions.values() if now - s.last_used > self.idle_timeout]
        reaped = 0
        for session in idle:
            if not session.lock.acquire(blocking=False):
                continue  # a request is running on it: it is not idle
            try:
                if now - session.last_used <= self.idle_timeout:
                    continue
                with self._lock:
                    if self._sessions.pop(session.number, None) is None:
                        continue
                    self._tombstone(session, f"it was idle for more than {self.idle_timeout:g} s and was reaped")
                    self.counters["reaped"] += 1
                self._close_env(session.env)
                reaped += 1
            finally:
                session.lock.release()
        if reaped:
            logger.info("reaped %d idle env(s)", reaped)
        return reaped

    def shutdown(self) -> int:
        """Refuse new envs and close every live one; returns how many were closed."""
        with self._lock:
            self._closing = True
            sessions = list(self._sessions.values())
            self._sessions.clear()
            for session in sessions:
                self._tombstone(session, "the server shut down")
            self.counters["closed"] += len(sessions)
        for session in sessions:
            acquired = session.lock.acquire(timeout=min(self.busy_timeout, 5.0))
            try:
                self._close_env(session.env)
            finally:
                if acquired:
                    session.lock.release()
        logger.info("closed %d env(s) on shutdown", len(sessions))
        return len(sessions)

    def live(self) -> list[Session]:
        """A snapshot of the live sessions, safe to iterate while others are made or closed."""
        with self._lock:
            return list(self._sessions.values())

    # ---- episode --------------------------------------------------------------------------------
    def reset(self, session: Session, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Reset a session's env; an env that fails to reset is replaced by a fresh one and tried once more.

        Args:
            session: the session.
            seed: the episode's seed.
            options: the env's reset options.

        Returns:
            The first observation and the info, made JSON-safe.

        Raises:
            ServerError: 400 for a reset the env rejects (the episode in progress goes on), 500 when a fresh env
                fails too.
        """
        with self._hold(session):
            try:
                observation, info = self._reset_once(session, seed, options)
            except ServerError:  # a rejected reset (bad options): the episode in progress goes on, as locally
                raise
            except Exception as error:  # the engine died between episodes: one fresh env, one more try
                self._replace(session, error, during="reset")
                try:
                    observation, info = self._reset_once(session, seed, options)
                except ServerError:
                    raise
                except Exception as second:
                    self._replace(session, second, during="reset")
                    raise self._crash_error(session, second, during="reset") from second
            session.episode_active, session.crashed = True, None
            session.last_seq, session.last_step = None, None
            session.observation, session.info, session.reward, session.done = observation, info, 0.0, False
            session.episode_return = 0.0
            with self._lock:
                self.counters["resets"] += 1
            return observation, info

    def _reset_once(self, session: Session, seed: int | None,
                    options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        try:
            observation, info = session.env.reset(seed=seed, options=options)
        except CLIENT_ERRORS as error:
            raise ServerError(400, "bad_reset", f"{type(error).__name__}: {error}") from error
        return str(observation), jsonable(info)

    def step(self, session: Session, action: str, seq: int | None = None) -> StepResult:
        """Step a session's env; a request repeating the last ``seq`` gets the stored result without stepping
        again, so a client's retry after a lost answer is harmless.

        Args:
            session: the session.
            action: the agent's response.
            seq: the client's step number, or None (no retry protection).

        Returns:
            The step's result, made JSON-safe.

        Raises:
            ServerError: 409 when no episode is running, 500 when the env crashed (it is replaced; the episode is lost).
        """
        with self._hold(session):
            if not session.episode_active:
                raise self._reset_needed(session)
            if seq is not None and seq == session.last_seq and session.last_step is not None:
                return session.last_step  # a retried request: the action was already applied
            started = time.perf_counter()
            try:
                observation, reward, terminated, truncated, info = session.env.step(action)
                reward = float(reward)
                if not math.isfinite(reward):
                    raise ValueError(f"the env returned a non-finite reward {reward}")
            except Exception as error:
                self._replace(session, error, during="step")
                raise self._crash_error(session, error, during="step") from error
            elapsed = time.perf_counter() - started
            result = StepResult(str(observation), reward, bool(terminated), bool(truncated), jsonable(info))
            session.observation, session.info = result.observation, result.info
            session.reward, session.done = reward, result.terminated or result.truncated
            session.episode_return += reward
            session.last_seq, session.last_step = seq, result
            with self._lock:
                self.counters["steps"] += 1
                self._step_seconds.append(elapsed)
            return result

    def oracle_action(self, session: Session) -> str:
        """The env's expert response for the current state.

        Args:
            session: the session.

        Returns:
            The action.

        Raises:
            ServerError: 409 when no episode is running, 404 when the env has no oracle.
        """
        with self._hold(session):
            if not session.episode_active:
                raise self._reset_needed(session)
            oracle = getattr(session.env.unwrapped, "oracle_action", None)
            try:
                if oracle is None:
                    raise NotImplementedError
                return str(oracle())
            except NotImplementedError:
                raise ServerError(404, "no_oracle", f"{session.env_id} has no oracle") from None

    def random_action(self, session: Session, seed: int) -> str:
        """A random action of the env, reproducible from ``seed`` (the env's own sampler, else its action space).

        Args:
            session: the session.
            seed: the draw's seed.

        Returns:
            The action.

        Raises:
            ServerError: 409 when no episode is running.
        """
        with self._hold(session):
            if not session.episode_active:
                raise self._reset_needed(session)
            rng = np.random.default_rng(seed)
            sampler = getattr(session.env.unwrapped, "random_action", None)
            if sampler is None:
                session.env.action_space.seed(seed)
                return str(session.env.action_space.sample())
            return str(sampler(rng))

    # ---- reporting ------------------------------------------------------------------------------
    def describe(self, session: Session) -> dict[str, Any]:
        """A session's state for the client holding its key (``GET /v1/sessions/{key}``), observation included.

        Args:
            session: the session.

        Returns:
            Its key, env id, episode state, last observation, crash note, and idle time and age in seconds.
        """
        now = time.monotonic()
        return {
            "session": self.key(session),
            "env_id": session.env_id,
            "episode_active": session.episode_active,
            "done": session.done,
            "turn": session.info.get("turn"),
            "observation": session.observation,
            "crashed": session.crashed,
            "busy": session.lock.locked(),
            "idle_s": round(now - session.last_used, 3),
            "age_s": round(now - session.created, 3),
        }

    def summary(self, session: Session) -> dict[str, Any]:
        """What anyone may see of a live env (``GET /v1/sessions``): nothing that reaches or reveals it."""
        now = time.monotonic()
        return {"env_id": session.env_id, "episode_active": session.episode_active, "busy": session.lock.locked(),
                "idle_s": round(now - session.last_used, 3), "age_s": round(now - session.created, 3)}

    def metrics(self) -> dict[str, Any]:
        """The load and health numbers ``/v1/health``, ``/v1/metrics`` and the Prometheus route report: live and busy
        envs, counters, and the step latency's median and 95th percentile in milliseconds.
        """
        with self._lock:
            steps = np.asarray(self._step_seconds, dtype=float) * 1000
            live = len(self._sessions)
            load = self._load()
            busy = sum(s.lock.locked() for s in self._sessions.values())
            counters = dict(self.counters)
        latency = ({"median": round(float(np.median(steps)), 4), "p95": round(float(np.percentile(steps, 95)), 4)}
                   if steps.size else None)
        return {
            "server_id": self.server_id,
            "uptime_s": round(time.monotonic() - self.started, 3),
            "live_envs": live,
            "env_load": load,
            "busy_envs": busy,
            "max_envs": self.max_envs,
            "idle_timeout_s": self.idle_timeout,
            **{f"{name}_total": value for name, value in counters.items()},
            "env_step_ms": latency,
            "rss_mb": resident_mb(),
        }

    # ---- internals ------------------------------------------------------------------------------
    def _load(self) -> int:
        """The summed weight of live envs and envs being made (call with the lock held)."""
        return sum(session.weight for session in self._sessions.values()) + self._pending

    def _hold(self, session: Session) -> "_Held":
        return _Held(self, session)

    def _tombstone(self, session: Session, reason: str) -> None:
        """Remember why ``session`` ended (call with the lock held, after popping it from ``_sessions``)."""
        self._by_key.pop(session.key, None)
        self._key_tombstones[session.key] = reason
        while len(self._key_tombstones) > TOMBSTONES:
            self._key_tombstones.popitem(last=False)
        if session.agentgym:
            self._tombstones[session.number] = reason
            while len(self._tombstones) > TOMBSTONES:
                self._tombstones.popitem(last=False)

    def _replace(self, session: Session, error: BaseException, during: str) -> None:
        """Swap a session's crashed env for a fresh one of the same id (caller holds its lock)."""
        logger.error("%s (env %d) crashed during %s: %r; replacing it", session.env_id, session.number, during, error,
                     exc_info=(type(error), error, error.__traceback__))
        session.episode_active = False
        session.crashed = f"{type(error).__name__}: {error}"
        with self._lock:
            self.counters["crashed"] += 1
        self._close_env(session.env)
        try:
            session.env = self._make(session.env_id, session.max_turns)
        except Exception as make_error:
            logger.exception("could not restart %s", session.env_id)
            with self._lock:
                self._sessions.pop(session.number, None)
                self._tombstone(session, f"its engine crashed and could not be restarted ({make_error})")
                self.counters["closed"] += 1
            raise ServerError(
                503, "env_unavailable",
                f"{session.env_id} crashed during {during} ({type(error).__name__}: {error}) "
                f"and could not be restarted: {make_error}",
            ) from make_error
        with self._lock:
            self.counters["replaced"] += 1

    def _crash_error(self, session: Session, error: BaseException, during: str) -> ServerError:
        return ServerError(
            500, "env_crashed",
            f"{session.env_id} crashed during {during} ({type(error).__name__}: {error}); the episode is lost. "
            "The env was replaced by a fresh instance: reset to start a new episode",
        )

    def _reset_needed(self, session: Session) -> ServerError:
        if session.crashed:
            return ServerError(409, "reset_needed",
                               f"the env crashed ({session.crashed}) and was replaced; reset it first")
        return ServerError(409, "reset_needed", "no episode is running on this env: reset it first")

    @staticmethod
    def _close_env(env: gym.Env) -> None:
        try:
            env.close()
        except Exception:  # a crashed engine may fail to close; the env is dropped either way
            logger.exception("closing an env raised")


class _Held:
    """Context manager: hold a session's lock (bounded wait) and mark it used."""

    def __init__(self, manager: SessionManager, session: Session):
        self.manager, self.session = manager, session

    def __enter__(self) -> Session:
        if not self.session.lock.acquire(timeout=self.manager.busy_timeout):
            raise ServerError(409, "session_busy", f"env {self.session.number} is still busy with another request")
        with self.manager._lock:
            alive = self.manager._sessions.get(self.session.number) is self.session
        if not alive:  # closed or reaped while this request waited
            self.session.lock.release()
            self.manager.lookup(self.session.key)  # raises the 410 with the reason
            raise ServerError(410, "session_closed", "this env was closed")
        self.session.last_used = time.monotonic()
        return self.session

    def __exit__(self, *exc: Any) -> None:
        self.session.last_used = time.monotonic()
        self.session.lock.release()


def resident_mb() -> float | None:
    """This process's resident memory in MiB (Linux /proc, else psutil if installed)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[1])
        import os

        return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 2)
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return round(psutil.Process().memory_info().rss / 2**20, 2)
    except Exception:
        return None
