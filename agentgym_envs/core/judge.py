"""An optional LLM judge: does an answer mean the same as a reference? (off by default)

WebArena grades its ``fuzzy_match`` string answers by asking an LLM, and deep-search answers that
are right in other words fail exact match. An env given a judge (``gym.make(id, judge=...)``)
asks any OpenAI-compatible chat endpoint, with temperature 0, for a verdict; the exact-match
rules stay the default, offline scorer. A judge that cannot be reached fails the answer and says
why in ``info``, so an outage never turns into a silent pass.

The verdict rule is WebArena's: the reply must conclude "correct"; "incorrect" or "partially
correct" fail.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from agentgym_envs.core.openai_chat import chat_client, openai_module, safe_url

_PROMPT = """You are grading a student's answer to a question against the reference answer. The student may phrase the \
answer differently; decide whether it means the same as the reference.
Question: {question}
Reference answer: {reference}
The string "N/A" means the task cannot be achieved.
Student answer: {answer}
End your reply with exactly one verdict: correct, incorrect, or partially correct."""


class JudgeUnavailable(RuntimeError):
    """The endpoint could not be reached or gave no usable reply."""


@dataclass(frozen=True)
class LLMJudge:
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``base_url`` ends before ``/chat/completions`` (e.g. ``http://127.0.0.1:8000/v1``); the API key
    is ``api_key`` or the ``OPENAI_API_KEY`` environment variable (optional for local servers). It
    asks through the ``openai`` client (``core.openai_chat``: the ``[endpoint]`` extra), which retries
    ``retries`` times and never follows a redirect with the key.
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 60.0
    retries: int = 2

    @classmethod
    def of(cls, spec: LLMJudge | dict[str, Any] | None) -> LLMJudge | None:
        """A judge from an env kwarg: a ``LLMJudge``, a dict of its fields, or ``None`` (no judge)."""
        if spec is None or isinstance(spec, LLMJudge):
            return spec
        return cls(**spec)

    @cached_property
    def _client(self) -> Any:  # made on the first verdict (needs the [endpoint] extra), then reused
        return chat_client(self.base_url, api_key=self.api_key or os.environ.get("OPENAI_API_KEY"),
                           timeout=self.timeout, retries=self.retries)

    def verdict(self, question: str, answer: str, reference: str) -> str:
        """The model's verdict: "correct", "partially correct" or "incorrect"."""
        prompt = _PROMPT.format(question=question, reference=reference, answer=answer)
        openai = openai_module()
        try:
            completion = self._client.chat.completions.create(
                model=self.model, temperature=0, messages=[{"role": "user", "content": prompt}])
            reply = completion.choices[0].message.content
        except (openai.OpenAIError, AttributeError, IndexError, TypeError) as error:  # after the client's retries
            raise JudgeUnavailable(f"the LLM judge at {safe_url(self.base_url)} gave no verdict: {error}") from error
        text = str(reply).lower()
        for verdict in ("partially correct", "incorrect", "correct"):  # the longer phrases contain "correct"
            if verdict in text:
                return verdict
        raise JudgeUnavailable(f"the LLM judge's reply has no verdict: {str(reply)[:200]!r}")

    def accepts(self, question: str, answer: str, reference: str) -> bool:
        """Whether the judge calls the answer fully correct."""
        return self.verdict(question, answer, reference) == "correct"
