"""The optional LLM judge (``core/judge.py``) against a fake OpenAI-compatible endpoint on loopback:
off by default, it grades WebArena ``fuzzy_match`` answers and Search answers that fail exact match."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401
from agentgym_envs.core.judge import JudgeUnavailable, LLMJudge
from agentgym_envs.webarena.evaluation import string_match


class FakeJudge:
    """/v1/chat/completions that answers "correct" when the student answer contains ``accept``."""

    def __init__(self, accept: str):
        self.prompts: list[str] = []
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.bodies.append(body)
                fake.headers.append({name.lower(): value for name, value in self.headers.items()})
                prompt = body["messages"][-1]["content"]
                fake.prompts.append(prompt)
                student = re.search(r"Student answer: (.*)", prompt).group(1)
                verdict = "correct" if accept.lower() in student.lower() else "incorrect"
                payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": f"So: {verdict}"}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload.encode())

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeJudge:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _dead_url() -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.server_close()  # nothing listens there any more
    return url


def test_judge_asks_the_endpoint_and_reads_its_verdict() -> None:
    with FakeJudge(accept="paris") as fake:
        judge = LLMJudge(fake.url, model="judge-model", api_key="s3cret")
        assert judge.accepts("Capital of France?", "It is Paris.", "Paris")
        assert judge.verdict("Capital of France?", "Lyon", "Paris") == "incorrect"
    body = fake.bodies[0]
    assert body["model"] == "judge-model" and body["temperature"] == 0
    assert fake.headers[0]["authorization"] == "Bearer s3cret"
    assert "Question: Capital of France?" in fake.prompts[0] and "Reference answer: Paris" in fake.prompts[0]
    with pytest.raises(JudgeUnavailable):
        LLMJudge(_dead_url(), model="m", timeout=5).accepts("q", "a", "r")


def test_webarena_fuzzy_match_uses_the_judge_only_when_given() -> None:
    references = {"fuzzy_match": ["Eiffel Tower"]}
    answer = "the tall iron landmark (the eiffel one)"
    assert not string_match(answer, references)  # the fixed offline rule refuses the paraphrase
    with FakeJudge(accept="eiffel") as fake:
        judge = LLMJudge(fake.url, model="m")
        assert string_match(answer, references, lambda given, ref: judge.accepts("Which landmark?", given, ref))
    assert string_match("Eiffel Tower", {"exact_match": "Eiffel Tower"}, lambda *_: False)  # exact rules stay


def test_search_answers_are_judged_only_with_a_judge() -> None:
    pytest.importorskip("bm25s")
    env_id = "AgentGym/Search-NQ-v0"
    plain = gym.make(env_id)
    _, info = plain.reset(options={"split": "test", "index": 0})
    question = plain.unwrapped.question
    gold = question.golden_answers[0]
    paraphrase = f"<answer>I am fairly sure it is {gold}, as the passages say</answer>"
    _, reward, terminated, _, info = plain.step(paraphrase)
    assert reward == 0.0 and not terminated and info["correct"] is False and "judged" not in info
    plain.close()

    with FakeJudge(accept=gold) as fake:
        judged = gym.make(env_id, judge={"base_url": fake.url, "model": "m"})
        judged.reset(options={"split": "test", "index": 0})
        _, reward, terminated, _, info = judged.step(paraphrase)
        assert reward == 1.0 and terminated and info["success"] and info["judged"]
        assert question.question in fake.prompts[0]
        judged.reset(options={"split": "test", "index": 0})
        _, reward, terminated, _, info = judged.step(f"<answer>{gold}</answer>")  # exact match: no judge call
        assert reward == 1.0 and len(fake.prompts) == 1
        judged.close()

    offline = gym.make(env_id, judge={"base_url": _dead_url(), "model": "m", "timeout": 5})
    offline.reset(options={"split": "test", "index": 0})
    _, reward, terminated, _, info = offline.step(paraphrase)
    assert reward == 0.0 and not terminated and "gave no verdict" in info["judge_error"]
    offline.close()
