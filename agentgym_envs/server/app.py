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
import logging
from collections import Counter
from typing import Any, AsyncIterator, Callable, Optional, Union

from agentgym_envs.core.extras import require

require("fastapi", extra="server")
require("uvicorn", extra="server")

import anyio  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import Body, FastAPI, Query, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402

from agentgym_envs.core.http import (  # noqa: E402
    DEFAULT_REQUEST_TIMEOUT,
    RequestGuard,
    ThreadedServer,
    deadline_protocol,
    error_response,
    install_json_errors,
)
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


#: Where ``serve`` reads the access token when ``--token`` is not given.
TOKEN_ENV_VAR = "AGENTGYM_SERVER_TOKEN"


#: AgentGym-protocol routes that reach an env by its integer id (guessable by design: upstream's clients
#: count from 0). Without a token they answer loopback clients only.
AGENTGYM_ROUTES = frozenset({"/create", "/reset", "/step", "/observation", "/filtered_vocab", "/close"})


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
                       token=token, host=host, allowed_hosts=tuple(allowed_hosts),
                       allowed_origins=tuple(allowed_origins), loopback_only_paths=AGENTGYM_ROUTES)

    @app.exception_handler(ServerError)
    async def on_server_error(request: Request, error: ServerError) -> JSONResponse:
        return error_response(error.status, error.code, error.message, error.headers)

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
        return compat.created(compat.protocol_of(session.env), session.number, reply, given)

    @app.post("/reset", response_model=p.AgentGymState, **agentgym)
    def agentgym_reset(body: p.AgentGymReset) -> dict:
        session = agentgym_session(body)
        protocol = compat.protocol_of(session.env)
        try:
            item = protocol.item(compat.episode_index(body.model_dump(exclude_none=True), protocol))
        except (KeyError, ValueError) as error:
            raise ServerError(400, "bad_reset", str(error).strip("'\"")) from error
        # a data_idx always gives the same episode: the item id picks it, a fixed seed pins the rest
        if _is_text_env(session.env):
            observation, info = manager.reset(session, seed=0, options={"item_id": item})
        else:
            observation, info = manager.reset(session, seed=item)
        return {"id": session.number, "reward": 0.0, "done": False, "score": info.get("score"),
                "success": info.get("success"), **compat.reset_fields(protocol, observation, info)}

    @app.post("/step", response_model=p.AgentGymStepped, **agentgym)
    def agentgym_step(body: p.AgentGymStep) -> dict:
        session = agentgym_session(body)
        protocol = compat.protocol_of(session.env)
        result = manager.step(session, protocol.response(body.action))
        reward = session.episode_return if protocol.reward_so_far else result.reward
        return {**compat.reply_fields(result.observation, result.info), "reward": reward,
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
        return {"env_id": env_id, "family": None, "subtask": None, "max_turns": None,
                "train_items": None, "test_items": None}
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
          f"(AgentGym protocol at /, API at /v1, schema at /openapi.json){' with token auth' if token else ''}",
          flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=access_log, timeout_graceful_shutdown=10,
                http=deadline_protocol(request_timeout))


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
