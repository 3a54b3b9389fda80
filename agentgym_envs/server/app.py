"""The env server: a FastAPI app over a ``SessionManager``, and ways to run it.

Two APIs over one table of envs; an env made by ``/create`` is reachable by its integer id (and
only it), a /v1 session only by its random key:

* AgentGym's protocol, so AgentGym's own clients work unchanged: ``POST /create`` -> ``{id}``,
  ``POST /reset {id, data_idx}``, ``POST /step {id, action}`` -> ``{observation, reward, done}``,
  ``GET /observation?id=``, ``POST /close {id}``. ``data_idx`` is the item id of the episode
  (reset with seed 0, so the same ``data_idx`` always gives the same episode).
* ``/v1``: sessions with the full Gymnasium step result (``terminated``, ``truncated``, ``info``),
  reset seeds and options, the env's oracle and random actions, health and metrics. The schema is
  at ``/openapi.json`` (browsable at ``/docs``).

Every error is JSON ``{"error": <code>, "detail": <what to do>}`` with a 4xx status for client
mistakes (404 unknown id or key, 409 reset needed, 410 closed / reaped,
413 body too large, 422 malformed body, 429 too many envs); 500 ``env_crashed`` reports an engine
that raised (the env is replaced, the next reset works).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import socket
import threading
import time
from collections import Counter
from typing import Any, AsyncIterator, Callable, Optional, Union

from agentgym_envs.core.extras import require

require("fastapi", extra="server")
require("uvicorn", extra="server")

import anyio  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import Body, FastAPI, Query, Request  # noqa: E402
from fastapi.exceptions import RequestValidationError  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from starlette.exceptions import HTTPException as StarletteHTTPException  # noqa: E402
from starlette.routing import Match  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402

from agentgym_envs.core.net import is_loopback  # noqa: E402
from agentgym_envs.core.tasks import get_task  # noqa: E402
from agentgym_envs.server import compat  # noqa: E402
from agentgym_envs.server import protocol as p  # noqa: E402
from agentgym_envs.server.sessions import ServerError, SessionManager, resolve_env_ids  # noqa: E402

logger = logging.getLogger("agentgym.server")

VERSION = "1"
DEFAULT_PORT = 8000
#: an action is at most 16k characters (TextEnv); escaped as JSON that is < 100 kB, so 1 MiB is roomy
DEFAULT_MAX_BODY_BYTES = 1 << 20

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": p.ErrorBody, "description": text}
    for status, text in {
        400: "bad reset options or body", 404: "unknown env id or route", 409: "reset needed or env busy",
        410: "env closed or reaped", 413: "body too large", 422: "malformed body",
        429: "too many live envs", 500: "the env's engine crashed (it was replaced)", 503: "env could not start",
    }.items()
}


#: Seconds a client may take to send a request's headers (``RequestDeadlineProtocol``) or its body
#: (``RequestGuard``); a client that sends nothing, or a byte at a time, is dropped after this.
DEFAULT_REQUEST_TIMEOUT = 10.0
#: Where ``serve`` reads the access token when ``--token`` is not given.
TOKEN_ENV_VAR = "AGENTGYM_SERVER_TOKEN"


#: AgentGym-protocol routes that reach an env by its integer id (guessable by design: upstream's clients
#: count from 0). Without a token they answer loopback clients only.
AGENTGYM_ROUTES = frozenset({"/create", "/reset", "/step", "/observation", "/filtered_vocab", "/close"})
#: Host names every server accepts besides the address it is bound to.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
_WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")


def host_name(value: str) -> str:
    """The name in a ``Host`` header or an origin's authority, without the port, lower case
    (``[::1]:8000`` -> ``::1``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_ip(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class RequestGuard:
    """ASGI middleware in front of every route.

    * refuses a ``Host`` that is neither the bound address, a loopback name nor one of
      ``allowed_hosts`` (400): a web page whose name was re-pointed at this machine (DNS rebinding)
      reaches nothing; bound to a wildcard address, any IP address is accepted as Host;
    * refuses browser requests from another origin (403): an ``Origin`` header other than the
      server's own (or one of ``allowed_origins``), or ``Sec-Fetch-Site: cross-site``, so a page
      the user visits cannot drive the server, even with a "simple" text/plain POST;
    * without a token, refuses AgentGym-protocol routes (integer ids) to clients that are not on
      loopback (403);
    * refuses bodies over ``max_body_bytes`` (413) and bodies that take longer than
      ``body_timeout`` seconds to arrive (408);
    * with a ``token``, refuses requests without ``Authorization: Bearer <token>`` (401);
    * turns an unexpected exception into a JSON 500 here, inside the app, so it is counted in
      ``statuses`` like every other response and the keep-alive connection stays open (Starlette's
      own 500 handler sits outside all middleware and makes the server drop the connection).
    """

    def __init__(self, app: Any, max_body_bytes: int, statuses: Counter, body_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 token: str | None = None, host: str = "127.0.0.1", allowed_hosts: tuple[str, ...] = (),
                 allowed_origins: tuple[str, ...] = ()):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.statuses = statuses
        self.body_timeout = body_timeout
        self._expected_authorization = f"Bearer {token}".encode() if token else None
        self.hosts = frozenset(host_name(name) for name in (*LOOPBACK_HOSTS, host, *allowed_hosts) if name)
        self.any_ip_host = host_name(host) in _WILDCARD_ADDRESSES
        self.origins = frozenset(origin.rstrip("/").lower() for origin in allowed_origins)

    def _refusal(self, scope: dict, headers: dict[bytes, bytes]) -> tuple[int, str, str] | None:
        """(status, code, detail) when the request must not reach the app: wrong Host, cross-origin
        browser request, AgentGym route from another machine without a token."""
        raw_host = headers.get(b"host")
        host = raw_host.decode("latin-1") if raw_host is not None else ""
        if raw_host is not None:
            name = host_name(host)
            if name not in self.hosts and not (self.any_ip_host and _is_ip(name)):
                return (400, "host_not_allowed",
                        "this server does not answer to that Host name (start it with --allowed-host NAME to add one)")
        origin = headers.get(b"origin")
        if origin is not None:
            value = origin.decode("latin-1").rstrip("/").lower()
            same = raw_host is not None and value in (f"http://{host.lower()}", f"https://{host.lower()}")
            if not same and value not in self.origins:
                return (403, "cross_origin", "requests from web pages of other origins are refused")
        elif headers.get(b"sec-fetch-site") in (b"cross-site", b"same-site"):
            return (403, "cross_origin", "requests from web pages of other origins are refused")
        if self._expected_authorization is None and scope.get("path") in AGENTGYM_ROUTES:
            client = scope.get("client") or ("", 0)
            if not is_loopback(str(client[0])):
                return (403, "loopback_only",
                        "AgentGym's protocol (integer env ids) answers this machine only unless the server has a token")
        return None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def counting_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self.statuses[str(message["status"])] += 1
            await send(message)

        try:
            await self._guarded(scope, receive, counting_send)
        except Exception as error:
            logger.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if started:  # the response is half sent: nothing left but to drop the connection
                raise
            await _send_error(counting_send, 500, "internal_error", f"{type(error).__name__}: {error}", close=False)

    async def _guarded(self, scope: dict, receive: Any, counting_send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _send_error(counting_send, *refusal)
            return
        if self._expected_authorization is not None and not secrets.compare_digest(
            headers.get(b"authorization", b""), self._expected_authorization
        ):
            await _send_error(counting_send, 401, "unauthorized",
                              "this server needs the header 'Authorization: Bearer <token>' (the token it was started with)")
            return

        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _send_error(counting_send, 400, "bad_content_length", "Content-Length must be a whole number")
                return
            if int(declared) > self.max_body_bytes:
                await _send_error(counting_send, 413, "body_too_large", self._too_large(int(declared)))
                return
        body = bytearray()
        with anyio.move_on_after(self.body_timeout) as slow:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client went away before sending its body
                body += message.get("body", b"")
                if len(body) > self.max_body_bytes:
                    await _send_error(counting_send, 413, "body_too_large", self._too_large(len(body)))
                    return
                if not message.get("more_body", False):
                    break
        if slow.cancelled_caught:
            await _send_error(counting_send, 408, "request_timeout",
                              f"the request body did not arrive within {self.body_timeout:g} s")
            return
        delivered = False

        async def replay() -> dict:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, counting_send)

    def _too_large(self, size: int) -> str:
        return f"the request body has {size} bytes; this server accepts at most {self.max_body_bytes}"


class RequestDeadlineProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's headers.

    uvicorn times out an idle keep-alive connection only after a response, and any byte received
    cancels that timer: a client that connects and sends nothing, or one header byte every few
    seconds, holds its socket forever (250 such sockets locked out /v1/health). Here a connection
    must deliver complete headers within ``request_timeout`` seconds of opening or of its last
    response, else it is closed. (Slow bodies are ``RequestGuard``'s; slow envs are not limited.)
    """

    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.request_timeout, self._expire)

    def _expire(self) -> None:
        cycle = getattr(self, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            return  # a request is being served; its response re-arms the deadline
        if not self.transport.is_closing():
            self.transport.close()


def deadline_protocol(request_timeout: float) -> type[RequestDeadlineProtocol]:
    """``RequestDeadlineProtocol`` with its own ``request_timeout`` (uvicorn takes a class)."""
    return type("RequestDeadlineProtocol", (RequestDeadlineProtocol,), {"request_timeout": float(request_timeout)})


async def _send_error(send: Any, status: int, code: str, detail: str, close: bool = True) -> None:
    """A JSON error response; ``close`` when the request body was not read (the stream is out of step)."""
    payload = json.dumps({"error": code, "detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _error(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


def _validation_detail(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors()[:10]:
        where = ".".join(str(part) for part in item.get("loc", ()))
        parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_json_errors(app: FastAPI) -> None:
    """Malformed requests (422), unknown routes (404) and wrong methods (405, with ``Allow``) answered as
    ``{"error", "detail"}`` JSON, like every other error of the project's HTTP services."""

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        return _error(422, "invalid_request", _validation_detail(error))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        codes = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}
        headers = dict(error.headers or {})
        detail = str(error.detail)
        if error.status_code in (404, 405):
            detail = f"{detail}: {request.method} {request.url.path} is not part of this API (see /docs or /openapi.json)"
        if error.status_code == 405:  # Starlette names the methods of one route; a path may have several
            methods = {method for route in app.router.routes if getattr(route, "methods", None)
                       and route.matches(request.scope)[0] != Match.NONE for method in route.methods}
            headers["Allow"] = ", ".join(sorted(methods))
        return _error(error.status_code, codes.get(error.status_code, f"http_{error.status_code}"), detail, headers)


def create_app(
    env: str | list[str] = "textcraft",
    *,
    max_envs: int = 256,
    idle_timeout: float = 600.0,
    busy_timeout: float = 60.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    reap_interval: float | None = None,
    threads: int = 64,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    token: str | None = None,
    host: str = "127.0.0.1",
    allowed_hosts: tuple[str, ...] | list[str] = (),
    allowed_origins: tuple[str, ...] | list[str] = (),
) -> FastAPI:
    """The server app for ``env`` (an id, a family name, or a list of ids; the first is the default).

    ``max_envs``: the most envs, counted by weight (``sessions.env_weight``: SciWorld and browser
    envs weigh 8, most others 1).
    ``idle_timeout``: seconds without a request after which an env is closed.
    ``busy_timeout``: how long a request waits for another request on the same env.
    ``threads``: worker threads for env calls (engines block; each request holds one).
    ``request_timeout``: seconds a client may take to send a request body.
    ``token``: if set, every request needs ``Authorization: Bearer <token>``; without one, AgentGym's
    integer-id routes answer loopback clients only.
    ``host``: the address the server is bound to; requests must name it (or a loopback name, or one of
    ``allowed_hosts``) as ``Host``. Browser requests from other origins than ``allowed_origins`` are refused.
    """
    env_ids = resolve_env_ids(env) if isinstance(env, str) else list(env)
    manager = SessionManager(env_ids, max_envs=max_envs, idle_timeout=idle_timeout, busy_timeout=busy_timeout)
    statuses: Counter = Counter()
    interval = reap_interval if reap_interval is not None else max(0.05, min(idle_timeout / 4, 10.0))
    app = FastAPI(
        title="AgentGym env server",
        version=VERSION,
        description=(__doc__ or "").split("\n\n", 1)[1] if __doc__ else None,
        lifespan=_lifespan(manager, threads, interval),
    )
    app.state.manager = manager
    app.add_middleware(RequestGuard, max_body_bytes=max_body_bytes, statuses=statuses, body_timeout=request_timeout,
                       token=token, host=host, allowed_hosts=tuple(allowed_hosts), allowed_origins=tuple(allowed_origins))

    @app.exception_handler(ServerError)
    async def on_server_error(request: Request, error: ServerError) -> JSONResponse:
        return _error(error.status, error.code, error.message, error.headers)

    install_json_errors(app)
    # unexpected exceptions become a JSON 500 in RequestGuard (counted, connection kept)
    _add_agentgym_routes(app, manager)
    _add_v1_routes(app, manager, statuses)
    return app


def _lifespan(manager: SessionManager, threads: int, interval: float) -> Callable[[FastAPI], Any]:
    """Startup and shutdown: size the worker-thread pool, reap idle envs every ``interval`` s, close all at the end."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = max(threads, 4)

        async def reap_forever() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await anyio.to_thread.run_sync(manager.reap_idle)
                except Exception:
                    logger.exception("reaping idle envs failed")

        reaper = asyncio.create_task(reap_forever())
        logger.info("serving %s (max %d envs, idle timeout %g s, server id %s)", manager.env_ids, manager.max_envs,
                    manager.idle_timeout, manager.server_id)
        try:
            yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await anyio.to_thread.run_sync(manager.shutdown)

    return lifespan


def _add_agentgym_routes(app: FastAPI, manager: SessionManager) -> None:
    """AgentGym's protocol: ``/create``, ``/reset``, ``/step``, ``/observation``, ``/close`` (and ``/``)."""
    agentgym = {"tags": ["AgentGym protocol"], "responses": _ERRORS}
    env_ids = manager.env_ids

    @app.get("/", tags=["AgentGym protocol"])
    async def hello() -> str:
        return f"This is an AgentGym env server for {', '.join(env_ids)} (API /v1, schema /openapi.json)."

    # Clients of AgentGym's SearchQA and WebArena servers name envs "env_idx": see compat.py.
    def agentgym_session(body: p.AgentGymId) -> Any:
        try:
            return manager.get(compat.env_number(body.model_dump(exclude_none=True)))
        except ValueError as error:
            raise ServerError(422, "invalid_request", str(error)) from error

    @app.post("/create", response_model=Union[p.AgentGymCreated, int], **agentgym)
    def agentgym_create(body: Optional[p.AgentGymCreate] = Body(None)) -> Any:
        session = manager.create(body.env_id if body else None, agentgym=True)
        reply = {"id": session.number, "env_id": session.env_id, "reward": 0.0, "done": False,
                 "observation": "A new env. Reset it with a data_idx (the item id) to start an episode."}
        given = body.model_dump(exclude_none=True) if body is not None else {}
        return compat.created(compat.family_of(session.env), session.number, reply, given)

    @app.post("/reset", response_model=p.AgentGymState, **agentgym)
    def agentgym_reset(body: p.AgentGymReset) -> dict:
        session = agentgym_session(body)
        family = compat.family_of(session.env)
        try:
            item = compat.item_of(family, compat.episode_index(body.model_dump(exclude_none=True)))
        except (KeyError, ValueError) as error:
            raise ServerError(400, "bad_reset", str(error).strip("'\"")) from error
        # a data_idx always gives the same episode: the item id picks it, a fixed seed pins the rest
        if _is_text_env(session.env):
            observation, info = manager.reset(session, seed=0, options={"item_id": item})
        else:
            observation, info = manager.reset(session, seed=item)
        return {"id": session.number, "reward": 0.0, "done": False, "score": info.get("score"),
                "success": info.get("success"), **compat.reset_fields(family, observation, info)}

    @app.post("/step", response_model=p.AgentGymStepped, **agentgym)
    def agentgym_step(body: p.AgentGymStep) -> dict:
        result = manager.step(agentgym_session(body), body.action)
        return {**compat.reply_fields(result.observation, result.info), "reward": result.reward,
                "done": result.terminated or result.truncated,
                "terminated": result.terminated, "truncated": result.truncated,
                "score": result.info.get("score"), "success": result.info.get("success"),
                "valid_action": result.info.get("valid_action")}

    @app.get("/observation", response_model=str, **agentgym)
    def agentgym_observation(id: Optional[p.QueryInt] = Query(None, ge=0, le=p.MAX_ID),
                             env_idx: Optional[p.QueryInt] = Query(None, ge=0, le=p.MAX_ID)) -> str:
        return agentgym_session(p.AgentGymId(id=id, env_idx=env_idx)).observation

    @app.get("/filtered_vocab", response_model=list[str], **agentgym)
    def agentgym_vocabulary(id: Optional[p.QueryInt] = Query(None, ge=0, le=p.MAX_ID)) -> list[str]:
        """The vocabulary of a Wordle env (what LMRL-Gym's Wordle client lists in its first observation)."""
        try:  # the same declaration as /observation's id: digits only, so '0.0' is refused
            return compat.vocabulary(agentgym_session(p.AgentGymId(id=id)).env)
        except KeyError as error:
            raise ServerError(404, "no_vocabulary", str(error).strip("'\"")) from error

    @app.post("/close", response_model=p.AgentGymClosed, **agentgym)
    def agentgym_close(body: p.AgentGymId) -> dict:
        session = agentgym_session(body)
        manager.close(session)
        return {"id": session.number, "closed": True}


class _PrometheusCollector:
    """``/v1/metrics`` as Prometheus metrics, read from the session manager at each scrape (nothing is kept twice)."""

    def __init__(self, manager: SessionManager, statuses: Counter):
        self.manager, self.statuses = manager, statuses

    def describe(self) -> list:
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        metrics = self.manager.metrics()
        gauges = {"uptime_seconds": ("uptime_s", "seconds since the server started"),
                  "live_envs": ("live_envs", "envs alive now"),
                  "env_load": ("env_load", "summed weight of the live envs (SciWorld and browser envs weigh 8)"),
                  "busy_envs": ("busy_envs", "envs serving a request now"),
                  "max_envs": ("max_envs", "the --max-envs cap on env_load"),
                  "rss_megabytes": ("rss_mb", "the server's resident memory")}
        for name, (key, text) in gauges.items():
            if metrics.get(key) is not None:
                yield GaugeMetricFamily(f"agentgym_{name}", text, value=float(metrics[key]))
        for key, value in metrics.items():
            if key.endswith("_total"):
                yield CounterMetricFamily(f"agentgym_envs_{key[: -len('_total')]}", f"envs {key[:-6]}",
                                          value=float(value))
        if metrics.get("env_step_ms"):
            steps = GaugeMetricFamily("agentgym_env_step_milliseconds", "env step latency over recent steps",
                                      labels=["quantile"])
            steps.add_metric(["0.5"], metrics["env_step_ms"]["median"])
            steps.add_metric(["0.95"], metrics["env_step_ms"]["p95"])
            yield steps
        responses = CounterMetricFamily("agentgym_http_responses", "HTTP responses by status", labels=["status"])
        for status, count in sorted(dict(self.statuses).items()):
            responses.add_metric([str(status)], float(count))
        yield responses


def _add_v1_routes(app: FastAPI, manager: SessionManager, statuses: Counter) -> None:
    """``/v1``: health, metrics, served envs and sessions with the full Gymnasium step result."""
    # cheap read-only endpoints are async: they answer even when every worker thread is busy with an env
    v1 = {"tags": ["v1"], "responses": _ERRORS}

    @app.get("/v1/health", response_model=p.Health, tags=["v1"])
    async def health() -> dict:
        metrics = manager.metrics()
        return {"status": "ok", "server_id": manager.server_id, "version": VERSION, "uptime_s": metrics["uptime_s"],
                "live_envs": metrics["live_envs"], "max_envs": manager.max_envs,
                "default_env_id": manager.default_env_id, "env_ids": manager.env_ids}

    @app.get("/v1/metrics", response_model=p.Metrics, tags=["v1"])
    async def metrics() -> dict:
        by_status = dict(statuses)
        return {**manager.metrics(), "requests_total": sum(by_status.values()), "responses_by_status": by_status}

    # the same numbers in Prometheus' text format, for a scraper (a dependency of [server]; the route is off
    # without it). Not in the OpenAPI schema: it is not JSON.
    try:
        from fastapi.responses import PlainTextResponse
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    except ImportError:  # pragma: no cover - an install without the extra's prometheus_client
        pass
    else:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_PrometheusCollector(manager, statuses))

        @app.get("/metrics", include_in_schema=False)
        async def prometheus_metrics() -> PlainTextResponse:
            return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/envs", response_model=list[p.ServedEnv], tags=["v1"])
    async def served_envs() -> list[dict]:
        return [_describe_env(env_id) for env_id in manager.env_ids]

    @app.post("/v1/sessions", response_model=p.SessionCreated, status_code=201, **v1)
    def create_session(body: Optional[p.CreateSession] = Body(None)) -> dict:
        body = body or p.CreateSession()
        session = manager.create(body.env_id, body.max_turns)
        return {"session": manager.key(session), "env_id": session.env_id,
                "server_id": manager.server_id, "max_turns": _time_limit(session.env),
                "observation_max_length": session.env.observation_space.max_length,
                "action_max_length": session.env.action_space.max_length}

    @app.get("/v1/sessions", response_model=list[p.LiveSession], tags=["v1"])
    async def list_sessions() -> list[dict]:
        """The live envs without their keys, ids or observations: a key is its client's alone."""
        return [manager.summary(session) for session in manager.live()]

    @app.get("/v1/sessions/{session}", response_model=p.SessionState, **v1)
    def get_session(session: str) -> dict:
        return manager.describe(manager.lookup(session))

    @app.delete("/v1/sessions/{session}", response_model=p.Closed, **v1)
    def close_session(session: str) -> dict:
        manager.close(manager.lookup(session))
        return {"session": session, "closed": True}

    @app.post("/v1/sessions/{session}/reset", response_model=p.ResetResult, **v1)
    def reset_session(session: str, body: Optional[p.ResetRequest] = Body(None)) -> dict:
        body = body or p.ResetRequest()
        observation, info = manager.reset(manager.lookup(session), seed=body.seed, options=body.options)
        return {"observation": observation, "info": info}

    @app.post("/v1/sessions/{session}/step", response_model=p.StepResult, **v1)
    def step_session(session: str, body: p.StepRequest) -> dict:
        result = manager.step(manager.lookup(session), body.action, body.seq)
        return {"observation": result.observation, "reward": result.reward, "terminated": result.terminated,
                "truncated": result.truncated, "info": result.info}

    @app.get("/v1/sessions/{session}/oracle", response_model=p.ActionSuggestion, **v1)
    def oracle_action(session: str) -> dict:
        return {"action": manager.oracle_action(manager.lookup(session))}

    @app.get("/v1/sessions/{session}/random-action", response_model=p.ActionSuggestion, **v1)
    def random_action(session: str, seed: p.QueryInt = Query(0, ge=0, le=p.MAX_SEED)) -> dict:
        return {"action": manager.random_action(manager.lookup(session), seed)}


def _is_text_env(env: Any) -> bool:
    from agentgym_envs.core.env import TextEnv

    return isinstance(env.unwrapped, TextEnv)


def _time_limit(env: Any) -> int | None:
    spec = getattr(env, "spec", None)
    return getattr(spec, "max_episode_steps", None)


def _describe_env(env_id: str) -> dict:
    try:
        spec = get_task(env_id)
    except KeyError:
        return {"env_id": env_id, "family": None, "subtask": None, "max_turns": None, "train_items": None, "test_items": None}
    return {"env_id": env_id, "family": spec.family, "subtask": spec.subtask, "max_turns": spec.max_turns,
            "train_items": len(spec.split("train")), "test_items": len(spec.split("test"))}


def serve(
    env: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    max_envs: int = 256,
    idle_timeout: float = 600.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    log_level: str = "info",
    access_log: bool = False,
    token: str | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    allowed_hosts: tuple[str, ...] | list[str] = (),
) -> None:
    """Run the server in the foreground until SIGINT / SIGTERM; every env is closed on the way out.

    On loopback (the default) no token is needed. Bound to any other address, the server runs
    envs for whoever reaches it, so it refuses to start without a token (``token`` or
    ``$AGENTGYM_SERVER_TOKEN``); clients send it as ``Authorization: Bearer <token>``
    (``RemoteEnv(..., token=...)`` or the same variable).
    """
    import os

    token = token or os.environ.get(TOKEN_ENV_VAR) or None
    if not is_loopback(host) and not token:
        raise SystemExit(
            f"agentgym serve: refusing to listen on {host} without authentication; pass --token or set "
            f"${TOKEN_ENV_VAR} (clients send it as 'Authorization: Bearer <token>'), or bind 127.0.0.1"
        )
    app = create_app(env, max_envs=max_envs, idle_timeout=idle_timeout, max_body_bytes=max_body_bytes,
                     request_timeout=request_timeout, token=token, host=host, allowed_hosts=tuple(allowed_hosts))
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    manager: SessionManager = app.state.manager
    print(f"agentgym serve: {', '.join(manager.env_ids)} on http://{host}:{port} "
          f"(AgentGym protocol at /, API at /v1, schema at /openapi.json){' with token auth' if token else ''}", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=access_log, timeout_graceful_shutdown=10,
                http=deadline_protocol(request_timeout))


class ThreadedServer:
    """A FastAPI app on a loopback port (``port=0``: a free one) in a background thread, with the
    ``serve`` command's protocol settings: for tests, benchmarks, notebooks and embedded services."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT, name: str = "agentgym-server"):
        if not is_loopback(host):
            raise ValueError(f"{type(self).__name__} binds loopback addresses only, not {host!r}")
        self.app = app
        # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the listening
        # socket says it is TCP; without it every response waits ~40 ms for a delayed ACK
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = host, self._socket.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, timeout_graceful_shutdown=5,
                                http=deadline_protocol(request_timeout))
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._name = name

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Any:
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True,
                                        name=f"{self._name}-{self.port}")
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{type(self).__name__} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._thread = None
        self._socket.close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class LocalServer(ThreadedServer):
    """The env server on a free loopback port in a background thread.

    ``with LocalServer("textcraft") as server: RemoteEnv(server.url, ...)``; leaving the block
    stops the server and closes every env.
    """

    def __init__(self, env: str | list[str] = "textcraft", host: str = "127.0.0.1", port: int = 0, **app_kwargs: Any):
        if not is_loopback(host):
            raise ValueError(f"LocalServer binds loopback addresses only, not {host!r}")
        app = create_app(env, host=host, **app_kwargs)
        self.manager: SessionManager = app.state.manager
        super().__init__(app, host, port, app_kwargs.get("request_timeout", DEFAULT_REQUEST_TIMEOUT))
