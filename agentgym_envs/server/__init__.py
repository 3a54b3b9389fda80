"""Serve AgentGym envs over HTTP and use served envs as local Gymnasium envs.

* ``agentgym serve --env textcraft`` (or :func:`agentgym_envs.server.app.serve`) hosts env
  instances behind AgentGym's protocol (``/create``, ``/reset``, ``/step``, ``/observation``,
  ``/close``) and our versioned JSON API (``/v1/...``, schema at ``/openapi.json``);
* ``gym.make("AgentGym/Remote-v0", url=..., env_id=...)`` (:class:`RemoteEnv`) proxies one of
  them, so rollouts and evaluation can run envs on other machines;
* :class:`RemoteEnvFactory` (``server/hosts.py``) makes local ids whose envs run on several servers, routed by
  a :class:`HostRouter` (``--servers`` of ``agentgym eval`` / ``collect``, the trainer's ``env_servers``).

The names below are imported lazily: ``import agentgym_envs.server`` costs nothing and needs no
extra; using them needs ``pip install 'agentgym-rl[server]'``.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "RemoteEnv": "agentgym_envs.server.client",
    "RemoteEnvError": "agentgym_envs.server.client",
    "ServerUnavailableError": "agentgym_envs.server.client",
    "SessionLostError": "agentgym_envs.server.client",
    "EnvCrashedError": "agentgym_envs.server.client",
    "ServerBusyError": "agentgym_envs.server.client",
    "RemoteEnvFactory": "agentgym_envs.server.hosts",
    "HostRouter": "agentgym_envs.server.hosts",
    "RoutedEnv": "agentgym_envs.server.hosts",
    "parse_servers": "agentgym_envs.server.hosts",
    "create_app": "agentgym_envs.server.app",
    "serve": "agentgym_envs.server.app",
    "LocalServer": "agentgym_envs.server.app",
    "SessionManager": "agentgym_envs.server.sessions",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
