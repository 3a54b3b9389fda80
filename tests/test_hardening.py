"""Hostile input below the env level: the shared helpers of ``core.safety``, the core env's
handling of errors and reset options, BIRD's query bounds and the cache directory setting.

The registry-derived checks (every id against every hostile action) are in ``test_registry.py``.
"""

from __future__ import annotations

import json
import sqlite3
import time

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the ids)
from agentgym_envs.core import Outcome, Start, TextEnv
from agentgym_envs.core.safety import decode_json_prefix, json_depth_ok, parse_count, valid_utf8
from agentgym_envs.testing import HOSTILE_PAYLOADS, hostile_actions
from agentgym_envs.tools.answers import Gold, read_number
from agentgym_envs.tools.dbutil import MAX_PRINTF_WIDTH, QueryError, ReadOnlySQL


def test_valid_utf8_replaces_lone_surrogates_everywhere() -> None:
    info = {"answer": "a\ud800b", "list": ["\udfff", ("x\udc00",)], "\ud801key": 1, "number": 3}
    cleaned = valid_utf8(info)
    json.dumps(cleaned, ensure_ascii=False).encode("utf-8")  # would raise on a surrogate
    assert cleaned["answer"] == "a\ufffdb" and cleaned["list"] == ["\ufffd", ("x\ufffd",)]
    assert cleaned["\ufffdkey"] == 1 and cleaned["number"] == 3
    text = "plain text, ça va 🙂"
    assert valid_utf8(text) is text, "valid text is returned without a copy"


@pytest.mark.parametrize(
    ("text", "count"),
    [("17", 17), ("0", 0), ("9" * 5000, None), ("\u1369", None), ("\u0661", None), ("\u00b2", None), ("-3", None),
     ("", 4)],
)
def test_parse_count_accepts_only_short_ascii_digits(text: str, count: int | None) -> None:
    assert parse_count(text, default=4) == count


def test_decode_json_prefix_refuses_what_json_cannot_bound() -> None:
    assert decode_json_prefix('{"a": [1, 2.5, "x"]} trailing') == ({"a": [1, 2.5, "x"]}, 20)
    assert decode_json_prefix('"\\ud800"')[0] == "\ufffd"
    for raw, reason in [("[" * 5000 + "]" * 5000, "deeper"), ("9" * 5000, "too many digits"), ("1e999", "too large"),
                        ("NaN", "not a JSON number"), ("-Infinity", "not a JSON number")]:
        with pytest.raises(ValueError, match=reason):
            decode_json_prefix(raw)
    assert json_depth_ok('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}'), "brackets inside strings do not count"


def test_answers_never_overflow() -> None:
    assert read_number(10**400) is None and read_number("9" * 5000) is None and read_number("1e999") is None
    assert not Gold(3, "number").matches(10**400)
    assert read_number("1,250 km") == 1250.0


@pytest.fixture
def runner() -> ReadOnlySQL:
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute("CREATE TABLE t (a REAL)")
    db.execute("INSERT INTO t VALUES (3.14159)")
    db.commit()
    guarded = ReadOnlySQL(db, timeout=1.0)
    yield guarded
    guarded.close()


@pytest.mark.parametrize(
    "sql",
    ["SELECT printf('%.*c', 2147483647, 'x')", "SELECT format('%2147483647d', 1)",
     "SELECT printf('%!.*c', '1e12', 'x')"],
)
def test_sqlite_printf_cannot_outlast_the_time_limit(runner: ReadOnlySQL, sql: str) -> None:
    started = time.perf_counter()
    with pytest.raises(QueryError, match=f"limited to {MAX_PRINTF_WIDTH}"):
        runner.run(sql)
    assert time.perf_counter() - started < 0.5


def test_sqlite_printf_still_formats(runner: ReadOnlySQL) -> None:
    assert runner.run("SELECT printf('%.2f%%|%5d|%s', a, 7, 'z') FROM t").rows == [("3.14%|    7|z",)]
    assert runner.run("SELECT format('%.*c', 3, 'x'), printf(NULL)").rows == [("xxx", None)]


def test_bird_printf_bomb_is_answered_within_the_limit() -> None:
    env = gym.make("AgentGym/BIRD-v0")
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        started = time.perf_counter()
        obs, reward, terminated, _, info = env.step("```sql\nSELECT printf('%.*c', 2147483647, 'x')\n```")
        assert time.perf_counter() - started < env.unwrapped.sql_timeout
        assert "limited to" in obs and reward == 0.0
    finally:
        env.close()


class _EchoEnv(TextEnv):
    """An env whose engine echoes the action and fails like careless engine code does."""

    family = "textcraft"

    def __init__(self) -> None:
        super().__init__("AgentGym/TextCraft-v0")

    def _start(self, item_id, rng) -> Start:
        return Start("Say anything.", "Go.")

    def _act(self, action: str) -> Outcome:
        if action.startswith("count "):
            return Outcome(f"You said {int(action[6:]) * 2}")  # int() of a 5,000-digit number raises
        return Outcome(f"You said {action}", info={"echo": action})


def test_core_step_keeps_the_episode_alive_and_the_output_valid() -> None:
    env = _EchoEnv()
    env.reset(options={"item_id": 0})
    obs, reward, terminated, truncated, info = env.step("Action: count " + "9" * 5000)
    assert info["valid_action"] is False and info["action_error"] == "ValueError" and not terminated
    obs, _, _, _, info = env.step('Action: x\ud800y')
    obs.encode("utf-8")
    json.dumps(info, ensure_ascii=False).encode("utf-8")
    obs, _, _, _, info = env.step("Action: count 21")
    assert obs == "You said 42" and "action_error" not in info


def test_an_action_with_a_lone_surrogate_is_invalid_and_never_reaches_the_engine() -> None:
    """#61 item 5: an unencodable action is an invalid action (reward 0, ``valid_action`` False), for every family
    (ScienceWorld's JVM session died of one; WebShop's browser raised out of ``step``)."""
    from agentgym_envs.core.env import UNENCODABLE_ACTION
    from agentgym_envs.core.parsers import ParsedAction, agentgym_react_action

    class Faithful(_EchoEnv):  # AgentGym's parser keeps every character (ours drops control ones)
        def _parse(self, response: str) -> ParsedAction:
            return ParsedAction(agentgym_react_action(response))

    env = Faithful()
    env.reset(options={"item_id": 0})
    for action in ("Action: search[\ud800]", "Action:\n\ud83d go forward", "Action: x\ud800y"):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs == UNENCODABLE_ACTION and reward == 0 and info["valid_action"] is False and "echo" not in info
        assert not (terminated or truncated)
    assert env.step("Thought: \ud800 odd.\nAction: fine")[4]["echo"] == "fine"  # only the action must encode


def test_hostile_actions_put_every_payload_where_the_action_takes_arguments() -> None:
    actions = hostile_actions('Action: get_weather with Action Input: {"city": "Lyon", "days": 3}')
    assert len(HOSTILE_PAYLOADS) >= 15
    assert any("\\ud800" in action for action in actions.values()), "surrogates JSON-escaped too"
    assert any('"days": ' + "[" * 100 in action for action in actions.values()), "deep nesting as an argument"
    assert any(name.startswith("SQL injection: as JSON argument 'city'") for name in actions)
    brackets = hostile_actions("```type [12] [yoga mat] [1]```")
    assert brackets["path traversal: in brackets"] == "```type [12] [yoga mat] [../../../../../../etc/passwd]```"


def test_one_cache_variable_everywhere(tmp_path, monkeypatch) -> None:
    from agentgym_envs.alfworld import generator
    from agentgym_envs.core.cache import CACHE_ENV_VAR, cache_root
    from agentgym_envs.webshop.catalogue import cache_dir as webshop_cache

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "old"))
    assert CACHE_ENV_VAR == "AGENTGYM_CACHE_DIR" and cache_root() == tmp_path
    assert generator.cache_dir().is_relative_to(tmp_path) and webshop_cache().is_relative_to(tmp_path)


def test_clients_never_follow_redirects_with_credentials() -> None:
    """An endpoint that redirects elsewhere gets no second request: the API key stays with it."""
    import http.server
    import threading

    from agentgym_envs.evaluation.endpoint import ChatEndpoint
    from agentgym_envs.evaluation.runner import EvalError
    from agentgym_envs.search.retrievers import RemoteRetriever, RetrievalError

    seen: list[tuple[str, str | None]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append((self.path, self.headers.get("Authorization")))
            if self.path.startswith("/elsewhere"):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b'{"choices": [{"message": {"content": "hi"}}], "result": []}')
                return
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_address[1]}/elsewhere")
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(EvalError, match="redirects are not followed"):
            ChatEndpoint(f"{base}/v1", "m", api_key="sk-secret", retries=0).complete([{"role": "user", "content": "x"}])
        with pytest.raises(RetrievalError, match="redirects are not followed"):
            RemoteRetriever(base).search_batch(["q"])
    finally:
        server.shutdown()
        server.server_close()
    assert [path for path, _ in seen] == ["/v1/chat/completions", "/retrieve"]


def test_eval_saves_every_episode_even_when_a_reply_holds_a_lone_surrogate(tmp_path) -> None:
    """An endpoint can send ``"\\ud800"`` in its JSON; the episode is saved (as valid UTF-8) with the others."""
    from agentgym_envs.evaluation import evaluate
    from agentgym_envs.evaluation.records import read_records
    from agentgym_envs.agents import BaseAgent, Reply

    class SurrogateAgent(BaseAgent):
        name = "surrogate"

        def act(self, episodes) -> list[Reply]:
            return [Reply("Thought: \ud800\nAction: get 1 \udfff logs", tokens=3) for _ in episodes]

    report = evaluate(SurrogateAgent(), ["AgentGym/TextCraft-Depth1-v0"], tmp_path, limit=3, max_turns=[2],
                      progress=False)
    raw = (tmp_path / "trajectories.jsonl").read_bytes()
    raw.decode("utf-8")  # strict: the file is valid UTF-8
    records = list(read_records(tmp_path / "trajectories.jsonl"))
    assert len(records) == 3 == report.episodes
    assert "\ufffd" in records[0]["actions"][0]
