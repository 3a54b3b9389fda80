"""Envs on several ``agentgym serve`` hosts: which servers serve which ids, a router, and routed envs.

    servers = "AgentGym/SciWorld-v0=http://10.0.0.5:8000,http://10.0.0.6:8000;*=http://10.0.0.7:8000"
    make = RemoteEnvFactory(servers)
    env = make("AgentGym/SciWorld-v0", max_episode_steps=30)   # as gym.make(id, max_episode_steps=30), served

The spec (``parse_servers``) lists server URLs per env id, ``;``-separated; ``*`` names every other
id and a bare list of URLs serves all ids. ``RemoteEnvFactory`` makes, for a LOCAL id, an env that
behaves like ``gym.make(id, max_episode_steps=...)`` (same spec id, same ``TimeLimit``, the turn
budget is also the served env's cap) but runs on a host the ``HostRouter`` picks:

* each new episode goes to a healthy host (fewest episodes in flight, then round-robin; an env stays
  on its host while that host is no busier than the others, so its served env is reused);
* an episode stays on its host (sticky) until it ends;
* a host that fails is marked down, skipped for ``cooldown`` seconds, then health-checked
  (``GET /v1/health``) before it gets episodes again;
* a host that dies mid-episode loses nothing: the envs are deterministic for an (item, seed), so the
  episode is re-created on another healthy host and its actions so far are replayed; the replay must
  reproduce the last observation, or ``SessionLostError`` (code ``replay_mismatch``) says why not.

Splits and item ids stay the local registry's, so ``--env_ids`` are the same locally and remotely.
Parsing needs no extra; the envs need ``pip install 'agentgym-rl[server]'``.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

import gymnasium as gym

from agentgym_envs.core.net import deadline, deadline_transport
from agentgym_envs.registration import REMOTE_ENV_ID

logger = logging.getLogger("agentgym.hosts")

#: Where ``agentgym eval`` / ``collect`` read the servers spec when ``--servers`` is not given.
SERVERS_VARIABLE = "AGENTGYM_SERVERS"
ALL_IDS = "*"
SPEC_FORMAT = "'ENV_ID=URL,URL;*=URL' or a bare 'URL,URL' for every id"
#: The RemoteEnv settings a routed env passes on (anything else is not something a served env can take).
REMOTE_OPTIONS = frozenset({"timeout", "connect_timeout", "retries", "backoff", "pool_size", "token"})


def _client() -> Any:
    """``server/client.py``, imported on first use (it needs httpx and tenacity, the server extra)."""
    return importlib.import_module("agentgym_envs.server.client")


# ---- the spec ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostSpec:
    """Server URLs per env id (``*``: every id not named), in the order they were given."""

    routes: tuple[tuple[str, tuple[str, ...]], ...]

    def urls_for(self, env_id: str) -> tuple[str, ...]:
        """The servers of ``env_id``: its own route, else ``*``'s.

        Raises:
            ValueError: the spec names no server for it.
        """
        table = dict(self.routes)
        urls = table.get(env_id) or table.get(ALL_IDS)
        if not urls:
            named = ", ".join(key for key, _ in self.routes)
            raise ValueError(f"the servers spec names no server for {env_id} (it names {named}); add "
                             f"'{env_id}=URL' or '*=URL'")
        return urls

    @property
    def urls(self) -> tuple[str, ...]:
        """Every server the spec names, each once."""
        return tuple(dict.fromkeys(url for _, urls in self.routes for url in urls))

    def with_route(self, env_id: str, urls: Iterable[str]) -> HostSpec:
        """This spec with ``env_id`` served by ``urls`` (replacing its route, if it had one)."""
        route = (env_id, tuple(urls))
        return HostSpec((route, *[(key, value) for key, value in self.routes if key != env_id]))

    def __str__(self) -> str:
        return ";".join(f"{key}={','.join(urls)}" for key, urls in self.routes)


#: a host name or an IPv4 address (letters, digits, dots, hyphens), or a bracketed IPv6 address
_HOST = re.compile(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]")


def _redacted(text: str) -> str:
    """``text`` with the password of a ``user:password@`` part starred: a refused URL is printed into logs."""
    return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", text)


def _check_url(text: str, spec: str) -> str:
    shown, spec = repr(_redacted(text)), _redacted(spec)
    try:
        parts = urlsplit(text)
        netloc_host = parts.netloc.rpartition("@")[2]
        host = netloc_host if netloc_host.endswith("]") else netloc_host.rsplit(":", 1)[0]
    except ValueError:
        parts, host = None, ""
    problem = None
    if parts is None or any(not character.isprintable() or character.isspace() for character in text):
        problem = f"{shown} is not a URL (spaces or control characters)"
    elif parts.scheme not in ("http", "https"):
        problem = f"{shown} is not an http(s):// URL"
    elif not parts.hostname:
        problem = f"{shown} names no host"
    elif parts.username or parts.password:
        problem = f"{shown} carries credentials (send a token with $AGENTGYM_SERVER_TOKEN instead)"
    elif parts.path not in ("", "/") or "?" in text or "#" in text:
        problem = f"{shown} has a path, query or fragment (give the server's base URL)"
    elif not _HOST.fullmatch(host):
        problem = f"{shown} names no valid host ({host!r})"
    else:
        try:
            parts.port  # noqa: B018 (raises on a bad port)
        except ValueError:
            problem = f"{shown} has a bad port"
    if problem:
        raise ValueError(f"bad servers spec {spec!r}: {problem}; expected {SPEC_FORMAT}")
    return text.rstrip("/")


def parse_servers(text: str | HostSpec) -> HostSpec:
    """Read a servers spec such as ``"AgentGym/SciWorld-v0=http://h1:8000,http://h2:8000;*=http://h3:8000"``.

    Args:
        text: ``;``-separated routes ``ENV_ID=URL,URL``; ``*`` is every id no route names; a route without
            ``ENV_ID=`` serves every id (same as ``*``). A ``HostSpec`` is returned as it is.

    Returns:
        The parsed spec.

    Raises:
        ValueError: one line saying what is wrong (empty, a bad URL, an id given twice, ...).
    """
    if isinstance(text, HostSpec):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"bad servers spec {_redacted(text)!r}: it is empty; expected {SPEC_FORMAT}")
    routes: dict[str, tuple[str, ...]] = {}
    for part in (piece.strip() for piece in text.split(";")):
        if not part:
            continue
        key, separator, listed = part.partition("=")
        if not separator or "://" in key:
            key, listed = ALL_IDS, part
        key = key.strip()
        if not key or any(character.isspace() or character == "," for character in key):
            raise ValueError(f"bad servers spec {_redacted(text)!r}: {key!r} is not an env id or '*'; "
                             f"expected {SPEC_FORMAT}")
        if key in routes:
            raise ValueError(f"bad servers spec {_redacted(text)!r}: {key} is given twice; expected {SPEC_FORMAT}")
        urls = [_check_url(url.strip(), text) for url in listed.split(",") if url.strip()]
        if not urls:
            raise ValueError(f"bad servers spec {_redacted(text)!r}: {key} has no server URL; expected {SPEC_FORMAT}")
        if len(set(urls)) != len(urls):
            raise ValueError(f"bad servers spec {_redacted(text)!r}: {key} lists a URL twice; expected {SPEC_FORMAT}")
        routes[key] = tuple(urls)
    if not routes:
        raise ValueError(f"bad servers spec {_redacted(text)!r}: it names no server; expected {SPEC_FORMAT}")
    return HostSpec(tuple(routes.items()))


def server_health(url: str, token: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """The server's ``GET /v1/health`` answer: what the router checks before it sends a host episodes.

    Args:
        url: the server's base URL.
        token: its access token (default ``$AGENTGYM_SERVER_TOKEN``).
        timeout: seconds the check may take.

    Returns:
        The health record (``status``, ``env_ids``, ``default_env_id``, ``live_envs``, ...).

    Raises:
        ServerUnavailableError: no answer within ``timeout`` seconds, or not a healthy one.
    """
    client = _client()
    token = token or os.environ.get(client.TOKEN_VARIABLE)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    trust_env = not client._is_loopback_url(url)
    try:  # the whole check ends within timeout, however slowly the host answers
        with deadline(timeout), client.httpx.Client(timeout=timeout, trust_env=trust_env,
                                                     transport=deadline_transport(trust_env=trust_env)) as http:
            response = http.get(f"{url}/v1/health", headers=headers)
        health = response.json() if response.is_success else None
    except (client.httpx.HTTPError, ValueError) as error:
        raise client.ServerUnavailableError(f"{url} did not answer its health check ({type(error).__name__}: "
                                            f"{error})", code="unavailable") from error
    if not isinstance(health, dict) or health.get("status") != "ok":
        hint = " (its token was refused)" if response.status_code in (401, 403) else ""
        raise client.ServerUnavailableError(f"{url} is not healthy (HTTP {response.status_code}){hint}",
                                            code="unavailable", status=response.status_code)
    ids, default = health.get("env_ids"), health.get("default_env_id")
    if (ids is not None and not (isinstance(ids, list) and all(isinstance(item, str) for item in ids))) \
            or (default is not None and not isinstance(default, str)):
        raise client.BadReplyError(f"{url} answered its health check with a record that is not the protocol's "
                                   "(env_ids must be a list of ids, default_env_id an id)", code="bad_reply")
    return health


# ---- the router -------------------------------------------------------------------------------------
@dataclass
class _Host:
    url: str
    up: bool = False  # answered its last health check and nothing failed since
    down_until: float = 0.0
    in_flight: int = 0
    env_ids: tuple[str, ...] | None = None
    probing: bool = False  # a health check of it is running
    checked: bool = False  # a health check of it has ended at least once
    failures: int = 0


_LIVE_ROUTERS: weakref.WeakSet = weakref.WeakSet()


class HostRouter:
    """Picks the host of each new episode among the healthy servers of its env id; thread-safe.

    Args:
        servers: the spec (text or ``HostSpec``).
        cooldown: seconds a failed host is skipped before it is health-checked again.
        health_timeout: seconds a health check may take.
        token: the servers' access token (default ``$AGENTGYM_SERVER_TOKEN``).
        tokens: tokens of single servers (URL: token), sent to that server only, in place of ``token``
            (``AgentGym/Remote-v0``'s ``token`` belongs to its ``url``, not to the other hosts of a spec).
    """

    def __init__(self, servers: str | HostSpec, *, cooldown: float = 30.0, health_timeout: float = 5.0,
                 token: str | None = None, tokens: Mapping[str, str] | None = None):
        self.spec = parse_servers(servers)
        self.cooldown, self.health_timeout, self.token = float(cooldown), float(health_timeout), token
        self.tokens = {str(url).rstrip("/"): value for url, value in (tokens or {}).items() if value}
        strangers = sorted(set(self.tokens) - set(self.spec.urls))
        if strangers:
            raise ValueError(f"tokens are given for {strangers}, which the servers spec {str(self.spec)!r} does not "
                             "name")
        self._lock = threading.Lock()
        self._probed = threading.Condition(self._lock)  # a health check ended (threads waiting for it go on)
        self._hosts = {url: _Host(url) for url in self.spec.urls}
        self._turn = 0
        _LIVE_ROUTERS.add(self)

    # one router object is shared by every env made from it (copying a spec must not split its accounting)
    def __deepcopy__(self, memo: dict) -> HostRouter:
        return self

    def __reduce__(self) -> tuple:  # pickled to another process: a fresh router there, same settings
        return (_rebuild_router, (str(self.spec), self.cooldown, self.health_timeout, self.token, self.tokens))

    def token_for(self, url: str) -> str | None:
        """The token sent to ``url``: its own (``tokens``), else the router's, else ``$AGENTGYM_SERVER_TOKEN``."""
        return self.tokens.get(url) or self.token or os.environ.get(_client().TOKEN_VARIABLE) or None

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a lock held by another thread at fork time would never be released
        self._probed = threading.Condition(self._lock)
        for host in self._hosts.values():  # a check running at fork time goes on in the parent only
            host.in_flight, host.probing = 0, False

    def choose(self, env_id: str, *, prefer: str | None = None, avoid: Collection[str] = (),
               lease: bool = True) -> str:
        """The host for a new episode of ``env_id``: healthy, serving the id, least busy.

        Args:
            env_id: the episode's env id.
            prefer: the host the env is on now; kept while it is no busier than the least busy one.
            avoid: hosts not to use (they just failed this episode).
            lease: count the episode as in flight on the chosen host (give it back with ``release``).

        Returns:
            The chosen server URL.

        Raises:
            ServerUnavailableError: no server of the id is healthy now.
            ValueError: none of the id's servers serves it.
        """
        urls = [url for url in self.spec.urls_for(env_id) if url not in avoid]
        ready = self._ready(urls)
        if ready and not self._serving(ready, env_id):
            # the ids were read at the host's last check: a server restarted at the same address may serve others now
            ready = [url for url in ready if self.check(url)]
        with self._lock:
            serving = self._serving(ready, env_id)
            if not serving:
                if ready:
                    served = {url: list(self._hosts[url].env_ids or ()) for url in ready}
                    raise ValueError(f"no server of the spec serves {env_id}: {served}")
                raise _client().ServerUnavailableError(self._none_healthy(env_id, avoid), code="unavailable")
            loads = {url: self._hosts[url].in_flight for url in serving}
            lowest = min(loads.values())
            if prefer in loads and loads[prefer] <= lowest:
                chosen = prefer
            else:
                candidates = [url for url in serving if loads[url] == lowest]
                chosen = candidates[self._turn % len(candidates)]
                self._turn += 1
            if lease:
                self._hosts[chosen].in_flight += 1
            return chosen

    def _serving(self, urls: list[str], env_id: str) -> list[str]:
        """Those of ``urls`` whose last health check listed ``env_id`` (or listed no ids at all)."""
        return [url for url in urls if self._hosts[url].env_ids is None or env_id in self._hosts[url].env_ids]

    def lease(self, url: str) -> None:
        """Count one more episode in flight on ``url`` (what ``choose`` weighs hosts by).

        Args:
            url: a server of the spec.
        """
        with self._lock:
            self._hosts[url].in_flight += 1

    def release(self, url: str) -> None:
        """An episode on ``url`` ended (or moved): one fewer in flight, so the host gets new episodes again.

        Args:
            url: a server of the spec.
        """
        with self._lock:
            host = self._hosts[url]
            host.in_flight = max(0, host.in_flight - 1)

    def mark_down(self, url: str, reason: object = "") -> None:
        """``url`` failed: no new episode goes there for ``cooldown`` seconds, then it is health-checked.

        Args:
            url: a server of the spec.
            reason: what failed (logged once, when the host goes from up to down).
        """
        with self._lock:
            host = self._hosts[url]
            was_up = host.up
            host.up, host.failures = False, host.failures + 1
            host.down_until = time.monotonic() + self.cooldown
        if was_up:
            logger.warning("env server %s is down (%s); retrying it in %g s", url, reason, self.cooldown)

    def check(self, url: str, reason: object = None) -> bool:
        """Health-check ``url`` now; a healthy answer marks it up (with the ids it serves), none marks it down.

        Args:
            url: a server of the spec.
            reason: what made the check necessary (logged with the check's own failure, if it fails).

        Returns:
            Whether it answered healthy (within ``health_timeout`` seconds, however slowly it trickles).
        """
        try:
            health = server_health(url, self.token_for(url), self.health_timeout)
        except _client().ServerUnavailableError as error:
            self.mark_down(url, error if reason is None else f"{reason}; then its health check failed: {error}")
            return False
        with self._lock:
            host = self._hosts[url]
            host.up, host.failures, host.down_until = True, 0, 0.0
            host.env_ids = tuple(health.get("env_ids") or ()) or None
        return True

    def status(self) -> list[dict[str, Any]]:
        """Each host's state, for logs and tests.

        Returns:
            One dict per server, in spec order: ``url``, ``up``, episodes ``in_flight``, ``failures`` since it last
            answered, and ``retry_in_s`` (seconds until a down host is checked again).
        """
        now = time.monotonic()
        with self._lock:
            return [{"url": host.url, "up": host.up, "in_flight": host.in_flight, "failures": host.failures,
                     "retry_in_s": max(0.0, host.down_until - now) if not host.up else 0.0}
                    for host in self._hosts.values()]

    def recheck(self, url: str, reason: object) -> bool:
        """A request to ``url`` failed (``reason``): whether the host still answers its health check, so it stays
        in service (a slow request, a dropped connection), or not, so it is marked down for the cooldown.

        Many envs of a host that died fail at once: one of them checks, the others wait for its answer.

        Args:
            url: a server of the spec.
            reason: the failure (logged if the host is marked down).

        Returns:
            Whether the host is up.
        """
        with self._probed:
            host = self._hosts[url]
            if not host.probing:
                if not host.up:
                    return False
                host.probing = True
                mine = True
            else:
                mine = False
                limit = time.monotonic() + self.health_timeout + 1.0
                while host.probing and time.monotonic() < limit:
                    self._probed.wait(max(0.0, limit - time.monotonic()))
                return host.up
        try:
            return self.check(url, reason) if mine else host.up
        finally:
            self._probe_ended(host)

    def _ready(self, urls: list[str]) -> list[str]:
        """Those of ``urls`` that are up now.

        Hosts never checked, or whose cooldown is over, are health-checked each in a thread of its own, so one
        slow host never holds up another. This waits for checks of hosts never checked before (the first
        episodes spread over every host that answers), and for any check while no host is up; never longer
        than a check may take.
        """
        started = []
        with self._probed:
            now = time.monotonic()
            for url in urls:
                host = self._hosts[url]
                if not host.up and not host.probing and host.down_until <= now:
                    host.probing = True
                    started.append(host)
        for host in started:
            threading.Thread(target=self._probe, args=(host,), name="agentgym-health-check", daemon=True).start()
        limit = time.monotonic() + self.health_timeout + 1.0
        with self._probed:
            while True:
                hosts = [self._hosts[url] for url in urls]
                up = [host.url for host in hosts if host.up]
                waiting = any(host.probing and (not host.checked or not up) for host in hosts)
                left = limit - time.monotonic()
                if not waiting or left <= 0:
                    return up
                self._probed.wait(left)

    def _probe(self, host: _Host) -> None:
        try:
            self.check(host.url)
        except Exception as error:  # noqa: BLE001 (a check that broke: down, like one that failed)
            self.mark_down(host.url, error)
        finally:
            self._probe_ended(host)

    def _probe_ended(self, host: _Host) -> None:
        with self._probed:
            host.probing, host.checked = False, True
            self._probed.notify_all()

    def _none_healthy(self, env_id: str, avoid: Collection[str]) -> str:
        now = time.monotonic()
        with_times = []
        for url in self.spec.urls_for(env_id):
            host = self._hosts[url]
            wait = f"retried in {host.down_until - now:.0f} s" if host.down_until > now else "failed just now"
            with_times.append(f"{url} ({'failed this episode' if url in avoid else wait})")
        return f"no healthy env server for {env_id}: {', '.join(with_times)}"


def _rebuild_router(spec: str, cooldown: float, health_timeout: float, token: str | None,
                    tokens: dict[str, str] | None = None) -> HostRouter:
    return HostRouter(spec, cooldown=cooldown, health_timeout=health_timeout, token=token, tokens=tokens)


_SHARED_LOCK = threading.Lock()
_SHARED: dict[tuple, HostRouter] = {}


def shared_router(servers: str | HostSpec, **settings: Any) -> HostRouter:
    """The process's one router for this spec and settings, so every env made from the same spec text shares
    its load counts and host health (each process has its own: a forked child starts afresh).

    Args:
        servers: the spec.
        settings: ``HostRouter``'s keyword arguments.

    Returns:
        The shared router.
    """
    spec = parse_servers(servers)
    hashable = {name: tuple(sorted(value.items())) if isinstance(value, Mapping) else value
                for name, value in settings.items()}
    key = (str(spec), tuple(sorted(hashable.items())))
    with _SHARED_LOCK:
        router = _SHARED.get(key)
        if router is None:
            router = _SHARED[key] = HostRouter(spec, **settings)
        return router


def _after_fork_in_child() -> None:
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()
    _SHARED.clear()
    for router in list(_LIVE_ROUTERS):
        router._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---- a routed env -----------------------------------------------------------------------------------
class RoutedEnv(gym.Env[str, str]):
    """A served env on whichever host the router picks, moved (and replayed) when its host dies.

    Made by ``RemoteEnvFactory``; the arguments: ``servers`` (a spec or a ``HostRouter``), ``env_id``
    (the served id), ``max_turns`` (the served env's turn cap: the budget), ``max_failovers`` (hosts
    tried for one call before giving up), and ``RemoteEnv``'s settings (``timeout``, ``retries``, ...;
    ``retries`` defaults to 1 here: another host is the better retry).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, servers: str | HostSpec | HostRouter, env_id: str, render_mode: str | None = None, *,
                 max_turns: int | None = None, max_failovers: int = 3, **remote_options: Any):
        unknown = sorted(set(remote_options) - REMOTE_OPTIONS)
        if unknown:
            raise ValueError(f"a served env takes no {', '.join(unknown)}: only the remote settings "
                             f"{sorted(REMOTE_OPTIONS)} (env kwargs cannot travel to the server)")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.router = _router_with_token(servers, remote_options.pop("token", None))
        self.env_id, self.render_mode, self.max_turns = env_id, render_mode, max_turns
        self.turn_budget = max_turns  # what the served env was told: its TimeLimit, the episode's budget
        self.max_failovers = max(0, int(max_failovers))
        self.remote_options = {"retries": 1, **remote_options}
        self.url: str | None = None
        self.remote: Any = None  # the RemoteEnv on self.url
        self._leased = False  # an episode of this env counts as in flight on self.url
        self._closed = False
        self._seed: int | None = None
        self._options: dict[str, Any] | None = None
        self._actions: list[str] = []
        self._ended_at: int | None = None  # how many actions the episode took to end (None: it has not)
        self._last_observation = ""
        self._episode = False
        self.failovers = 0  # episodes moved to another host (and replayed) so far
        self._connect()
        self.observation_space = self.remote.observation_space
        self.action_space = self.remote.action_space

    @property
    def task(self) -> Any:
        """The local registry's ``TaskSpec`` of the served id (its splits, description), None where it has none."""
        return self.remote.task if self.remote is not None else None

    # ---- Gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on a host the router picks (this env's host, unless another is less busy or it is down).

        Args:
            seed: the reset seed; an episode that may have to be replayed elsewhere needs one (the loop gives one).
            options: the env's reset options, as for a local env.

        Returns:
            The first observation and the info dict.
        """
        super().reset(seed=seed)
        had_lease = self._leased
        self._end_lease()  # this env's own episode must not count against its host when choosing
        avoid: set[str] = set()
        while True:
            url = self.router.choose(self.env_id, prefer=None if self._closed else self.url, avoid=avoid)
            remote = self.remote if (url == self.url and not self._closed) else None
            try:
                if remote is None:
                    remote = self._open(url)
                observation, info = remote.reset(seed=seed, options=options)
            except ValueError:  # bad options: the episode in progress, if any, goes on (as on a local env)
                self.router.release(url)
                if remote is not self.remote:
                    _close_quietly(remote)
                if had_lease:
                    self.router.lease(self.url)
                    self._leased = True
                raise
            except BaseException as error:
                self.router.release(url)
                if remote is not None and remote is not self.remote:
                    _close_quietly(remote)
                if remote is self.remote:
                    self._episode = False  # as on RemoteEnv: a reset that failed ends the episode in progress
                if not self._host_failed(url, error, avoid, attempts=len(avoid)):
                    raise
                continue
            break
        if remote is not self.remote:
            _close_quietly(self.remote)
            self.remote, self.url = remote, url
        self._closed, self._leased, self._episode = False, True, True
        self._seed, self._options, self._actions, self._ended_at = seed, options, [], None
        self._last_observation = observation
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one response; if the host dies, the episode moves to another and is replayed first.

        Args:
            action: the model's response.

        Returns:
            Observation, reward, terminated, truncated and info, as a local env returns them.
        """
        if self._closed or self.remote is None or not self._episode:
            raise _client().RemoteResetNeeded("call reset() before step(): no episode is running on this env",
                                              code="reset_needed")
        observation, reward, terminated, truncated, info = self._with_failover(lambda remote: remote.step(action))
        self._actions.append(action)
        self._last_observation = observation
        if (terminated or truncated) and self._ended_at is None:  # no longer in flight (later steps still go to the
            self._ended_at = len(self._actions)                     # env, as on a local env)
            self._end_lease()
        return observation, reward, terminated, truncated, info

    def render(self) -> str | None:
        """The served env's text frame (``render_mode="ansi"``), else None."""
        return self.remote.render() if self.remote is not None and self.render_mode == "ansi" else None

    def close(self) -> None:
        """Close the served env and stop counting this env's episode on its host."""
        if self._closed:
            return
        self._closed, self._episode = True, False
        self._end_lease()
        _close_quietly(self.remote)
        super().close()

    def oracle_action(self) -> str:
        """The served env's expert response for the current state (moved to another host if this one died)."""
        return self._with_failover(lambda remote: remote.oracle_action())

    def random_action(self, rng: Any) -> str:
        """A plausible random action of the served env, drawn from a seed taken from ``rng`` (once, whatever host
        answers)."""
        seed = int(rng.integers(2**31))
        return self._with_failover(lambda remote: remote.seeded_random_action(seed))

    def available_actions(self) -> list[str] | None:
        """The valid actions the env listed in its last info, or None."""
        return self.remote.available_actions() if self.remote is not None else None

    # ---- plumbing -------------------------------------------------------------------------------
    def _open(self, url: str) -> Any:
        client = _client()
        return client.RemoteEnv(url, self.env_id, render_mode=self.render_mode, max_turns=self.max_turns,
                                token=self.router.token_for(url), **self.remote_options)

    def _connect(self) -> None:
        """A served env on some host (for the spaces), without starting an episode."""
        avoid: set[str] = set()
        while True:
            url = self.router.choose(self.env_id, avoid=avoid, lease=False)
            try:
                self.remote, self.url = self._open(url), url
                return
            except BaseException as error:
                if not self._host_failed(url, error, avoid, attempts=len(avoid)):
                    raise

    def _host_failed(self, url: str, error: BaseException, avoid: set[str], attempts: int) -> bool:
        """Whether to try another host after ``error`` on ``url`` (marked down when it no longer answers)."""
        client = _client()
        if not isinstance(error, (client.ServerUnavailableError, client.ServerBusyError)):
            return False
        if isinstance(error, client.ServerUnavailableError):
            self._host_down(url, error)
        avoid.add(url)
        return attempts < self.max_failovers

    def _host_down(self, url: str, error: BaseException) -> bool:
        """After ``error`` (a ``ServerUnavailableError``) on ``url``: whether the host is out of service now.

        A host that answered with something other than the protocol's reply (a lying host) is marked down. One
        whose request timed out or whose connection dropped is health-checked first, and stays in service if it
        answers: one slow step must not take live hosts out of service.
        """
        if isinstance(error, _client().BadReplyError):
            self.router.mark_down(url, error)
            return True
        return not self.router.recheck(url, error)

    def _end_lease(self) -> None:
        if self._leased and self.url is not None:
            self.router.release(self.url)
        self._leased = False

    def _with_failover(self, call: Callable[[Any], Any]) -> Any:
        """``call(remote)``; when the host is gone or lost the env, replay the episode elsewhere and call again."""
        client = _client()
        for attempt in range(self.max_failovers + 1):
            try:
                return call(self.remote)
            except (client.ServerUnavailableError, client.SessionLostError) as error:
                down = isinstance(error, client.ServerUnavailableError) and self._host_down(self.url, error)
                if isinstance(error, client.ServerTimeoutError) and not down:
                    self._lose_episode()  # slow, not dead: a replay would be as slow; the host stays in service
                    raise
                if not self._episode or attempt == self.max_failovers:
                    raise
                self._move(error)
        raise AssertionError("unreachable")

    def _lose_episode(self) -> None:
        self._episode = False
        self._end_lease()

    def _move(self, error: BaseException) -> None:
        """Re-create the running episode on a healthy host and replay its actions; the replay must reproduce the
        last observation."""
        client = _client()
        dead = self.url
        avoid: set[str] = set()
        if isinstance(error, client.ServerUnavailableError):
            avoid.add(dead)  # checked by the caller: down, or alive but failing this episode
        self._end_lease()
        logger.warning("%s: episode (seed %s, %d actions) lost on %s (%s); replaying it on another host",
                       self.env_id, self._seed, len(self._actions), dead, error)
        while True:
            try:
                url = self.router.choose(self.env_id, avoid=avoid)
            except BaseException:
                self._episode = False
                raise
            remote = None
            try:
                remote = self._open(url)
                observation, _ = remote.reset(seed=self._seed, options=self._options)
                ended_at = self._ended_at if self._ended_at is not None else len(self._actions) + 1
                for turn, action in enumerate(self._actions, 1):
                    observation, _, terminated, truncated, _ = remote.step(action)
                    if (terminated or truncated) and turn < ended_at:  # the replay ended sooner: it differs
                        observation = f"[the replayed episode ended at turn {turn}, the original at {ended_at}]"
                        break
            except BaseException as failure:
                self.router.release(url)
                _close_quietly(remote)
                if isinstance(failure, (client.ServerUnavailableError, client.ServerBusyError)):
                    down = isinstance(failure, client.ServerUnavailableError) and self._host_down(url, failure)
                    if not (isinstance(failure, client.ServerTimeoutError) and not down):
                        avoid.add(url)
                        continue
                    # as slow on this live host as on the first: the episode's steps are slow, not a host
                self._episode = False
                raise
            break
        _close_quietly(self.remote)
        self.remote, self.url, self._leased = remote, url, True
        if self._ended_at is not None:  # a finished episode is not in flight
            self._end_lease()
        self.failovers += 1
        if observation != self._last_observation:
            self._episode = False
            self._end_lease()
            raise client.SessionLostError(
                f"{self.env_id}: the episode was lost with {dead} and replaying its {len(self._actions)} actions on "
                f"{url} did not reproduce its last observation (an unseeded reset, or a nondeterministic env); "
                "reset() starts a new one", code="replay_mismatch")


def _close_quietly(env: Any) -> None:
    if env is None:
        return
    try:
        env.close()
    except Exception:  # noqa: BLE001 (its server may be gone)
        pass


# ---- local ids, served --------------------------------------------------------------------------------
class RemoteEnvFactory:
    """``gym.make`` for local ids whose envs run on the spec's servers (``EnvPool(make_env=...)`` takes it).

    Args:
        servers: the spec (text or ``HostSpec``) or a ``HostRouter``.
        tokens: tokens of single servers (``HostRouter``'s ``tokens``).
        remote_options: ``RemoteEnv`` settings for every env (``timeout``, ``retries``, ...); ``token`` is the
            spec's servers' token (its router's: health checks send it too).
    """

    def __init__(self, servers: str | HostSpec | HostRouter, *, tokens: Mapping[str, str] | None = None,
                 **remote_options: Any):
        check_remote_options(remote_options)
        self.remote_options = dict(remote_options)
        self.router = _router_with_token(servers, self.remote_options.pop("token", None), tokens)
        check_route_ids(self.router.spec)

    def __call__(self, env_id: str, max_episode_steps: int | None = None, **kwargs: Any) -> gym.Env:
        """An env like ``gym.make(env_id, max_episode_steps=...)``, served.

        Args:
            env_id: a locally registered id (its spec id, turn cap and splits are the local ones).
            max_episode_steps: the turn budget (default: the id's cap); the ``TimeLimit`` and the served cap.
            kwargs: ``render_mode`` and remote settings; env kwargs cannot travel to a server.

        Returns:
            The env, wrapped as ``gym.make`` wraps a local one.
        """
        if env_id == REMOTE_ENV_ID:
            raise ValueError(f"{REMOTE_ENV_ID} is a proxy already: give the served id itself with the servers spec")
        local = gym.spec(env_id)
        options = {**self.remote_options, **kwargs}
        render_mode = options.pop("render_mode", None)
        check_remote_options(options)
        _router_with_token(self.router, options.pop("token", None))  # the router's token, or a clear refusal
        self.router.spec.urls_for(env_id)  # a spec without a server for it: say so now
        budget = local.max_episode_steps if max_episode_steps is None else max_episode_steps
        budget = budget if budget is not None and budget > 0 else None
        served = dataclasses.replace(local, entry_point=RoutedEnv, kwargs={}, max_episode_steps=budget,
                                     additional_wrappers=())
        return gym.make(served, servers=self.router, env_id=env_id, render_mode=render_mode, max_turns=budget,
                        **options)


def _router_with_token(servers: str | HostSpec | HostRouter, token: str | None,
                       tokens: Mapping[str, str] | None = None) -> HostRouter:
    """The router of ``servers`` whose health checks and envs send ``token`` (and ``tokens``, per server): a token
    is the router's, so the checks that decide whether a host is up carry it too."""
    if not isinstance(servers, HostRouter):
        settings = {key: value for key, value in (("token", token), ("tokens", tokens)) if value}
        return shared_router(servers, **settings)
    if (token and token != servers.token) or (tokens and dict(tokens) != servers.tokens):
        raise ValueError("a HostRouter sends its own token to its servers: give the token to HostRouter(..., "
                         "token=...), not to the envs made from it")
    return servers


def check_route_ids(spec: HostSpec) -> None:
    """Refuse a route for an id this machine does not know: a typo (``SciWorld-V0``) would otherwise route
    nothing, and its id would go to ``*``'s servers without a word.

    Args:
        spec: the servers spec.

    Raises:
        ValueError: naming the unknown ids (and the nearest known ones).
    """
    known = set(gym.registry)
    unknown = [key for key, _ in spec.routes if key != ALL_IDS and key not in known]
    if unknown:
        import difflib

        hints = {key: difflib.get_close_matches(key, known, n=1, cutoff=0.6) for key in unknown}
        named = ", ".join(f"{key} (did you mean {hint[0]}?)" if hint else key for key, hint in hints.items())
        raise ValueError(f"the servers spec routes ids that are not registered here: {named}; see agentgym list")


def check_remote_options(options: dict[str, Any]) -> None:
    """Refuse anything but remote settings early: env kwargs cannot be sent to a served env.

    Args:
        options: keyword arguments meant for served envs.

    Raises:
        ValueError: naming the ones that are not remote settings.
    """
    unknown = sorted(set(options) - REMOTE_OPTIONS)
    if unknown:
        raise ValueError(f"served envs take no {', '.join(unknown)} (env kwargs cannot travel to a server); "
                         f"the remote settings are {', '.join(sorted(REMOTE_OPTIONS))}")


def remote_v0_route(env_kwargs: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """``AgentGym/Remote-v0``'s kwargs as a route: ``(served id, url, remote settings)``.

    ``url`` defaults to ``$AGENTGYM_SERVER_URL`` and ``env_id`` to the server's default id, as for the
    proxy itself; ``max_turns`` is dropped (the budget is the served cap).

    Args:
        env_kwargs: the ``--env-kwargs`` given with ``--env AgentGym/Remote-v0``.

    Returns:
        The served id, the server's URL and the remaining remote settings (``token``, ``timeout``, ...).
    """
    client = _client()
    options = dict(env_kwargs)
    url = options.pop("url", None) or os.environ.get(client.URL_VARIABLE)
    if not url:
        raise ValueError(f"{REMOTE_ENV_ID} needs url=http://host:port (or ${client.URL_VARIABLE})")
    url = _check_url(str(url), str(url))
    env_id = options.pop("env_id", None)
    options.pop("max_turns", None)
    options.pop("render_mode", None)
    check_remote_options(options)
    if env_id is None:
        try:
            env_id = server_health(url, options.get("token"))["default_env_id"]
        except client.RemoteEnvError as error:
            raise ValueError(f"could not ask {url} which id it serves ({error}); pass env_id=...") from None
    return str(env_id), url, options


def servers_from(text: str | None) -> str | None:
    """The servers spec to use, so ``$AGENTGYM_SERVERS`` works wherever ``--servers`` does.

    Args:
        text: the ``--servers`` value, if given.

    Returns:
        ``text``, else ``$AGENTGYM_SERVERS``, else None (the envs run locally).
    """
    return text or os.environ.get(SERVERS_VARIABLE) or None


def served_envs(env_ids: Iterable[str], env_kwargs: dict[str, Any] | None,
                servers: str | None) -> tuple[list[str], dict[str, Any], RemoteEnvFactory | None]:
    """What the CLI's ``--env``, ``--env-kwargs`` and ``--servers`` mean: ``(env ids, gym.make kwargs, make_env)``.

    With a servers spec (``servers`` or ``$AGENTGYM_SERVERS``) the ids run on its servers and the kwargs must
    be remote settings; ``--env AgentGym/Remote-v0 --env-kwargs url=U env_id=X`` is the same as
    ``--env X --servers X=U``, so its episodes are recorded under X like local ones. Without either, the ids
    run locally (``make_env`` None).

    Args:
        env_ids: the ``--env`` ids.
        env_kwargs: the ``--env-kwargs``.
        servers: the ``--servers`` spec, if given.

    Returns:
        The ids to play, the kwargs for each env, and the maker to give ``EnvPool`` / ``collect`` (None: gym.make).

    Raises:
        ValueError: a bad spec, an id it names no server for, or env kwargs that cannot travel.
    """
    ids, kwargs = list(env_ids), dict(env_kwargs or {})
    text = servers_from(servers)
    spec = parse_servers(text) if text else None
    tokens: dict[str, str] = {}
    if REMOTE_ENV_ID in ids:
        served, url, kwargs = remote_v0_route(kwargs)
        spec = spec.with_route(served, [url]) if spec is not None else HostSpec(((served, (url,)),))
        ids = list(dict.fromkeys(served if env_id == REMOTE_ENV_ID else env_id for env_id in ids))
        if kwargs.get("token"):  # Remote-v0's token is its url's: the spec's other hosts never see it
            tokens[url] = kwargs.pop("token")
    if spec is None:
        return ids, kwargs, None
    check_remote_options(kwargs)
    for env_id in ids:
        spec.urls_for(env_id)
    return ids, {}, RemoteEnvFactory(spec, tokens=tokens, **kwargs)
