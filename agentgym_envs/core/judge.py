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

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

_PROMPT = """You are grading a student's answer to a question against the reference answer. The student may phrase the answer differently; decide whether it means the same as the reference.
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
    is ``api_key`` or the ``OPENAI_API_KEY`` environment variable (optional for local servers).
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 60.0

    @classmethod
    def of(cls, spec: LLMJudge | dict[str, Any] | None) -> LLMJudge | None:
        """A judge from an env kwarg: a ``LLMJudge``, a dict of its fields, or ``None`` (no judge)."""
        if spec is None or isinstance(spec, LLMJudge):
            return spec
        return cls(**spec)

    def verdict(self, question: str, answer: str, reference: str) -> str:
        """The model's verdict: "correct", "partially correct" or "incorrect"."""
        prompt = _PROMPT.format(question=question, reference=reference, answer=answer)
        body = {"model": self.model, "temperature": 0, "messages": [{"role": "user", "content": prompt}]}
        headers = {"Content-Type": "application/json"}
        key = self.api_key or os.environ.get("OPENAI_API_KEY")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(f"{self.base_url.rstrip('/')}/chat/completions",
                                         data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply = json.loads(response.read())["choices"][0]["message"]["content"]
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as error:
            raise JudgeUnavailable(f"the LLM judge at {self.base_url} gave no verdict: {error}") from error
        text = str(reply).lower()
        for verdict in ("partially correct", "incorrect", "correct"):  # the longer phrases contain "correct"
            if verdict in text:
                return verdict
        raise JudgeUnavailable(f"the LLM judge's reply has no verdict: {str(reply)[:200]!r}")

    def accepts(self, question: str, answer: str, reference: str) -> bool:
        """Whether the judge calls the answer fully correct."""
        return self.verdict(question, answer, reference) == "correct"
