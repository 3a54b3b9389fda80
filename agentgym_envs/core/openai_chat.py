"""The ``openai`` client for any OpenAI-compatible chat server, set up once for the whole project.

Evaluation endpoints (``agentgym eval --endpoint``) and the optional LLM judge talk to vLLM, SGLang,
llama.cpp or a hosted API through it, so both get its retries (connection errors, timeouts,
408/409/429/5xx, with exponential backoff and the server's ``Retry-After``) and timeouts. Redirects
are never followed, so an API key only ever goes to the configured host.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from agentgym_envs.core.extras import require

logger = logging.getLogger("agentgym_envs.endpoint")

#: the key sent to a server that needs none (the client insists on one; vLLM's own convention)
NO_KEY = "EMPTY"
EXTRA = "endpoint"


#: Query parameters whose value is a credential (``?api_key=``, ``?key=``, ``?token=``, ``?sig=``...).
_SECRET_PARAMETER = re.compile(r"key|token|secret|passw|auth|sig|credential|session", re.IGNORECASE)


class EndpointURLError(ValueError):
    """An endpoint URL the client cannot use as given (the message never repeats its credentials)."""


@dataclass(frozen=True)
class EndpointURL:
    """An endpoint URL taken apart: ``base_url`` without credentials (what is saved and printed), the
    API key from its user info, and its query (sent with every request, never glued into the path)."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)  # never in a repr, a log or a traceback's locals view
    query: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The credential values in the URL (to be scrubbed from any message)."""
        found = [self.api_key or ""] + [value for name, value in self.query if _SECRET_PARAMETER.search(name)]
        return tuple(value for value in found if value)


def parse_endpoint(url: str) -> EndpointURL:
    """``http://user:KEY@host:8000/v1/chat/completions?api-version=2&key=K`` -> the base URL
    ``http://host:8000/v1?api-version=2`` (credential parameters dropped), ``api_key`` KEY (the
    password, or the user name when there is none) and the whole query, which the client sends as
    ``default_query``. Refused: a fragment, a parameter named twice or without a name (the client's
    query is a mapping), a URL that is not http(s)."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        raise EndpointURLError("the endpoint URL cannot be read (a bad port or bracket?); give it as "
                               "http://host:port/v1") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointURLError(f"the endpoint must be an http(s) URL like http://127.0.0.1:8000/v1, got "
                               f"{_without_credentials(parts)!r}")
    if parts.fragment:
        raise EndpointURLError("the endpoint URL has a '#' fragment, which no request can carry; remove it")
    query = tuple(parse_qsl(parts.query, keep_blank_values=True)) if parts.query else ()
    names = [name for name, _ in query]
    if len(set(names)) != len(names) or any(not name for name in names) or (parts.query and not query):
        raise EndpointURLError("the endpoint URL's query names a parameter twice, or has one without a name; the "
                               "client sends the query as a mapping and would change it: give each parameter once")
    api_key = (parts.password or parts.username) if (parts.password or parts.username) else None
    path = parts.path.rstrip("/").removesuffix("/chat/completions")
    shown_query = urlencode([(name, value) for name, value in query if not _SECRET_PARAMETER.search(name)])
    base = urlunsplit((parts.scheme, _netloc(parts), path, shown_query, ""))
    return EndpointURL(base, unquote(api_key) if api_key else None, query)


def _netloc(parts: Any) -> str:
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname or ""
    return f"{host}:{parts.port}" if parts.port else host


def _without_credentials(parts: Any) -> str:
    try:
        return urlunsplit((parts.scheme, _netloc(parts), parts.path, "", ""))
    except ValueError:
        return "(an unreadable URL)"


def safe_url(url: str) -> str:
    """``url`` as it may be saved or printed: no user info, no credential query parameters."""
    try:
        return parse_endpoint(url).base_url
    except (EndpointURLError, ValueError):
        try:
            return _without_credentials(urlsplit(url))
        except ValueError:
            return "(an unreadable URL)"


def openai_module() -> ModuleType:
    """``openai``, or ``MissingExtraError`` naming ``pip install 'agentgym-rl[endpoint]'``."""
    return require("openai", extra=EXTRA)


def chat_client(base_url: str, *, api_key: str | None, timeout: float, retries: int) -> Any:
    """An ``openai.OpenAI`` for ``base_url`` that retries ``retries`` times and never follows a redirect.

    Credentials in the URL go where the client expects them: its user info becomes the API key (unless
    ``api_key`` is given), its query the client's ``default_query``; ``EndpointURLError`` for a URL it
    would mangle (``parse_endpoint``)."""
    openai = openai_module()
    endpoint = parse_endpoint(base_url)
    return _retry_logging_class(openai)(
        base_url=endpoint.base_url.split("?", 1)[0], api_key=api_key or endpoint.api_key or NO_KEY,
        timeout=timeout, max_retries=retries, default_query=dict(endpoint.query) or None,
        http_client=openai.DefaultHttpxClient(follow_redirects=False, timeout=timeout))

def _retry_logging_class(openai: ModuleType) -> type:
    """``openai.OpenAI`` that logs each retry once (what failed, the wait), where the client logs it only at DEBUG/INFO:
    a 503 on every 7th request otherwise turns 0.2 s into 20 s without a word."""

    class RetryLoggingOpenAI(openai.OpenAI):
        def _sleep_for_retry(self, *, retries_taken: int, max_retries: int, options: Any, response: Any) -> None:
            try:
                wait = self._calculate_retry_timeout(max_retries - retries_taken, options,
                                                     response.headers if response is not None else None)
            except Exception:  # a client version whose private helper differs: keep its own behaviour
                return super()._sleep_for_retry(retries_taken=retries_taken, max_retries=max_retries,
                                                options=options, response=response)
            what = (f"HTTP {response.status_code}" if response is not None
                    else "no answer (connection error or timeout)")
            logger.warning("endpoint %s: %s; retry %d of %d in %.1f s", self.base_url, what, retries_taken + 1,
                           max_retries, wait)
            time.sleep(wait)

    return RetryLoggingOpenAI
