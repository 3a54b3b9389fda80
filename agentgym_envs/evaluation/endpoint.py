"""An OpenAI-compatible chat-completions endpoint as an evaluation agent (stdlib ``urllib``, no SDK).

Works with vLLM's / SGLang's / llama.cpp's OpenAI servers and hosted APIs: ``POST
<base>/chat/completions`` with the conversation so far; the reply's text is the env action and
``usage.completion_tokens`` (when given) the turn's token count. A server that cannot be reached
after a few retries raises ``EvalError`` (the evaluation stops, finished episodes stay saved).
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from typing import Any

from agentgym_envs.core.net import redirect_hint, urlopen_no_redirect
from agentgym_envs.evaluation.runner import ContextLengthError, EpisodeJob, EvalError, Reply, StepwiseRunner

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
#: how vLLM, SGLang, llama.cpp and OpenAI word a 400 for a prompt longer than the model's context
CONTEXT_WORDS = re.compile(r"context|maximum.{0,20}length|too long|too many tokens", re.IGNORECASE)


def completions_url(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000/v1/chat/completions`` (a full URL is kept as is)."""
    url = base_url.rstrip("/")
    return url if url.endswith("/chat/completions") else f"{url}/chat/completions"


class ChatEndpoint:
    """Minimal client of ``/chat/completions``."""

    def __init__(self, base_url: str, model: str, *, temperature: float = 1.0, max_tokens: int = 256,
                 api_key: str | None = None, timeout: float = 120.0, retries: int = 2, retry_wait: float = 0.5):
        self.url = completions_url(base_url)
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.retry_wait = retry_wait

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(self.url, data=json.dumps(payload).encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        with urlopen_no_redirect(request, timeout=self.timeout) as response:  # the key goes to self.url only
            return json.loads(response.read().decode("utf-8"))

    def complete(self, messages: list[dict[str, str]]) -> Reply:
        payload = {"model": self.model, "messages": messages, "temperature": self.temperature,
                   "max_tokens": self.max_tokens}
        last_error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.retry_wait * 2 ** (attempt - 1))
            try:
                body = self._post(payload)
            except urllib.error.HTTPError as error:
                detail = " ".join(error.read()[:300].decode("utf-8", "replace").split())[:200]
                last_error = f"HTTP {error.code} {error.reason}: {detail}{redirect_hint(error)}"
                if error.code == 400 and CONTEXT_WORDS.search(detail):
                    raise ContextLengthError(f"endpoint {self.url}: the conversation is too long: {detail}")
                if error.code not in RETRY_STATUS:
                    break
                continue
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                last_error = f"cannot reach it ({getattr(error, 'reason', error)})"
                continue
            except json.JSONDecodeError:
                last_error = "the answer is not JSON"
                continue
            return self._reply(body)
        raise EvalError(f"endpoint {self.url} failed: {last_error}")

    def _reply(self, body: dict[str, Any]) -> Reply:
        try:
            text = body["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            answer = str(body)[:200]
            raise EvalError(f"endpoint {self.url} answered without choices[0].message.content: {answer}") from None
        tokens = (body.get("usage") or {}).get("completion_tokens")
        return Reply(text, int(tokens) if tokens is not None else None)


class EndpointPolicy:
    """Sends the whole conversation every turn, as a chat model expects."""

    name = "endpoint"

    def __init__(self, endpoint: ChatEndpoint):
        self.endpoint = endpoint

    def begin(self, job: EpisodeJob) -> None:
        pass

    def respond(self, env, observation, info, messages) -> Reply:
        return self.endpoint.complete(messages)


def endpoint_runner(base_url: str, model: str, *, temperature: float = 1.0, max_tokens: int = 256,
                    api_key: str | None = None, timeout: float = 120.0,
                    env_kwargs: dict[str, Any] | None = None) -> StepwiseRunner:
    endpoint = ChatEndpoint(base_url, model, temperature=temperature, max_tokens=max_tokens, api_key=api_key,
                            timeout=timeout)
    description = {"kind": "endpoint", "url": endpoint.url, "model": model, "temperature": temperature,
                   "max_tokens": max_tokens}
    return StepwiseRunner(EndpointPolicy(endpoint), description, env_kwargs)
