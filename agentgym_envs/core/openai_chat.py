"""The ``openai`` client for any OpenAI-compatible chat server, set up once for the whole project.

Evaluation endpoints (``agentgym eval --endpoint``) and the optional LLM judge talk to vLLM, SGLang,
llama.cpp or a hosted API through it, so both get its retries (connection errors, timeouts,
408/409/429/5xx, with exponential backoff and the server's ``Retry-After``) and timeouts. Redirects
are never followed, so an API key only ever goes to the configured host.
"""

from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import Any

from agentgym_envs.core.extras import require

logger = logging.getLogger("agentgym_envs.endpoint")

#: the key sent to a server that needs none (the client insists on one; vLLM's own convention)
NO_KEY = "EMPTY"
EXTRA = "endpoint"


def base_url_of(url: str) -> str:
    """``http://host:8000/v1`` or ``.../v1/chat/completions`` -> ``http://host:8000/v1`` (what the client takes)."""
    return url.rstrip("/").removesuffix("/chat/completions")


def openai_module() -> ModuleType:
    """``openai``, or ``MissingExtraError`` naming ``pip install 'agentgym-rl[endpoint]'``."""
    return require("openai", extra=EXTRA)


def chat_client(base_url: str, *, api_key: str | None, timeout: float, retries: int) -> Any:
    """An ``openai.OpenAI`` for ``base_url`` that retries ``retries`` times and never follows a redirect."""
    openai = openai_module()
    return _retry_logging_class(openai)(
        base_url=base_url_of(base_url), api_key=api_key or NO_KEY, timeout=timeout, max_retries=retries,
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
