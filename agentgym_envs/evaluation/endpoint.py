"""An OpenAI-compatible chat-completions endpoint as an evaluation agent, through the ``openai`` client.

Works with vLLM's / SGLang's / llama.cpp's OpenAI servers and hosted APIs: ``POST
<base>/chat/completions`` with the conversation so far; the reply's text is the env action and
``usage.completion_tokens`` (when given) the turn's token count. The client (``core.openai_chat``)
retries what is worth retrying with exponential backoff and honours a server's ``Retry-After``, so a
rate-limited API slows the evaluation down instead of failing it, and never follows a redirect. A
server that still cannot answer raises ``EvalError`` (the evaluation stops, finished episodes stay
saved).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentgym_envs.core.episode import CONTEXT
from agentgym_envs.core.extras import MissingExtraError
from agentgym_envs.core.loop import BaseAgent, Episode, Reply
from agentgym_envs.core.net import redirect_hint
from agentgym_envs.core.openai_chat import EXTRA, EndpointURLError, chat_client, openai_module, parse_endpoint
from agentgym_envs.evaluation.runner import EvalError

#: how vLLM, SGLang, llama.cpp and OpenAI word a 400 for a prompt longer than the model's context
CONTEXT_WORDS = re.compile(r"context|maximum.{0,20}length|too long|too many tokens", re.IGNORECASE)


class ContextLengthError(EvalError):
    """The server refused the conversation as longer than the model's context: the episode ends (``context``)."""


def _openai() -> Any:
    try:
        return openai_module()
    except MissingExtraError:
        raise EvalError(f"evaluating an endpoint needs the openai client: pip install 'agentgym-rl[{EXTRA}]'"
                        ) from None


def _one_line(text: Any, limit: int = 200) -> str:
    return " ".join(str(text).split())[:limit]


def _error_detail(error: Any) -> str:
    """What the server said about a failed request: its JSON error message, else the start of its body."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        return _one_line(body.get("message") or body)
    text = body if isinstance(body, str) and body else getattr(error.response, "text", "")
    return _one_line(re.sub(r"<[^>]*>", " ", text) if text else error)  # a proxy's HTML error page as text


class ChatEndpoint:
    """``/chat/completions`` of one model on one server, shared by every episode (the client is thread-safe)."""

    def __init__(self, base_url: str, model: str, *, temperature: float = 1.0, max_tokens: int = 256,
                 api_key: str | None = None, timeout: float = 120.0, retries: int = 4):
        _openai()
        try:
            self._endpoint = parse_endpoint(base_url)
        except EndpointURLError as error:
            raise EvalError(f"--endpoint: {error}") from None
        # what is saved (run.json, summary.json) and printed: no user info, no credential parameters
        self.base_url = self._endpoint.base_url.split("?", 1)[0]
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._secrets = tuple(value for value in (*self._endpoint.secrets, api_key or "") if value)
        self._check_reachable(min(timeout, 10.0))
        self.client = chat_client(base_url, api_key=api_key, timeout=timeout, retries=retries)

    def _redact(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    def _check_reachable(self, timeout: float) -> None:
        """Fail at once on a refused connection or an unknown host, not after the client's retries (~7 s of
        silence); a slow server is left to the request's own timeout and retries."""
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(self.base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname or "", port), timeout=timeout).close()
        except (ConnectionRefusedError, socket.gaierror) as error:
            reason = "connection refused" if isinstance(error, ConnectionRefusedError) else "unknown host"
            raise EvalError(f"endpoint {self.url}: cannot reach it ({reason}); is the server running "
                            "(e.g. vllm serve, or transformers serve)?") from None
        except OSError:  # a timeout or a network that filters the probe: the requests will tell
            pass

    def complete(self, messages: list[dict[str, str]], seed: int | None = None) -> Reply:
        """One chat completion for a conversation, retried as configured.

        Args:
            messages: the conversation, OpenAI's message format.
            seed: the request's sampling seed (OpenAI's and vLLM's ``seed``), None to send none.

        Returns:
            The reply (its text, and its token count when the server reports it).

        Raises:
            EvalError: the endpoint failed for good; its message never carries the URL's credentials.
        """
        try:
            return self._complete(messages, seed)
        except EvalError as error:  # a server or proxy may echo the request's key or URL back
            raise type(error)(self._redact(str(error))) from None

    def _complete(self, messages: list[dict[str, str]], seed: int | None) -> Reply:
        openai = _openai()
        seeded = {"seed": seed} if seed is not None else {}
        try:
            completion = self.client.chat.completions.create(model=self.model, messages=messages,
                                                             temperature=self.temperature, max_tokens=self.max_tokens,
                                                             **seeded)
        except openai.APIStatusError as error:
            detail = _error_detail(error)
            if error.status_code == 400 and CONTEXT_WORDS.search(detail):
                raise ContextLengthError(f"endpoint {self.url}: the conversation is too long: {detail}") from None
            reason = getattr(error.response, "reason_phrase", "")
            raise EvalError(f"endpoint {self.url} failed: HTTP {error.status_code} {reason}: {detail}"
                            f"{redirect_hint(error.response)}") from None
        except openai.APIConnectionError as error:  # after the retries (a timeout is one too)
            raise EvalError(f"endpoint {self.url} failed: cannot reach it ({_one_line(error.__cause__ or error)})"
                            ) from None
        return self._reply(completion)

    def _reply(self, completion: Any) -> Reply:
        try:
            text = completion.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            answer = _one_line(completion)
            raise EvalError(f"endpoint {self.url} answered without choices[0].message.content: {answer}") from None
        tokens = getattr(completion.usage, "completion_tokens", None) if completion.usage else None
        cut = getattr(completion.choices[0], "finish_reason", None) == "length"  # max_tokens cut the reply
        return Reply(text, tokens=int(tokens) if tokens is not None else None, cut=cut)

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()


class EndpointAgent(BaseAgent):
    """Sends each episode's whole conversation every turn, as a chat model expects; ``concurrency`` requests
    at a time (a batch of that many episodes plays together, each with its own envs)."""

    name = "endpoint"

    def __init__(self, endpoint: ChatEndpoint, concurrency: int = 1, seed: int | None = None):
        if concurrency < 1:
            raise EvalError(f"--concurrency must be at least 1, got {concurrency}")
        self.endpoint = endpoint
        self.seed = seed
        self.batch_size = concurrency
        self._requests = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agentgym-endpoint")

    def describe(self) -> dict[str, Any]:
        """The endpoint's URL (without credentials), model and sampling settings, for the run's records."""
        return {"kind": "endpoint", "url": self.endpoint.url, "model": self.endpoint.model,
                "temperature": self.endpoint.temperature, "max_tokens": self.endpoint.max_tokens,
                **({"seed": self.seed} if self.seed is not None else {})}

    def act(self, episodes: Sequence[Episode]) -> list[Reply]:
        """One request per running episode, sent concurrently; a failed request fails that episode only."""
        return list(self._requests.map(self._reply, episodes))

    def _reply(self, episode: Episode) -> Reply:
        try:
            return self.endpoint.complete(episode.trajectory.messages, self.request_seed(episode))
        except ContextLengthError:  # as the local-model path ends an episode that outgrows the context
            return Reply(None, stop=CONTEXT)
        except EvalError as error:  # this episode is abandoned; the batch's others play on and are saved
            return Reply(None, error=error)

    def request_seed(self, episode: Episode) -> int | None:
        """The seed a request of ``episode`` sends: one per (seed, env id, item, sample, turn), so a rerun samples
        the same replies where the server honours seeds, while an item's K samples differ from each other."""
        if self.seed is None:
            return None
        trajectory = episode.trajectory
        key = f"{self.seed}:{trajectory.env_id}:{trajectory.item_id}:{trajectory.sample}:{trajectory.turns}"
        return zlib.crc32(key.encode()) & 0x7FFFFFFF

    def close(self) -> None:
        """Cancel the requests still queued and close the endpoint."""
        self._requests.shutdown(wait=True, cancel_futures=True)
        self.endpoint.close()


def endpoint_agent(base_url: str, model: str, *, temperature: float = 1.0, max_tokens: int = 256,
                   api_key: str | None = None, timeout: float = 120.0, retries: int = 4,
                   concurrency: int = 1, seed: int | None = None) -> EndpointAgent:
    """An agent answering through the endpoint, ``concurrency`` episodes at a time; ``seed`` seeds every request
    (``EndpointAgent.request_seed``)."""
    endpoint = ChatEndpoint(base_url, model, temperature=temperature, max_tokens=max_tokens, api_key=api_key,
                            timeout=timeout, retries=retries)
    return EndpointAgent(endpoint, concurrency, seed)
