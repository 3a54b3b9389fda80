"""WebShop's browser-mode site over HTTP: the pages a crawl from the search page reaches are, byte for byte, the
pages the stdlib server gave before the site moved to Starlette, and the error answers are the same."""

from __future__ import annotations

import hashlib
import html
import http.client
import json
import re
from collections import deque
from typing import Any
from urllib.parse import urlsplit

import gymnasium as gym
import pytest

pytest.importorskip("starlette", reason="the site is a Starlette app: pip install 'agentgym-rl[webshop]'")
pytest.importorskip("uvicorn", reason="the site is served by uvicorn: pip install 'agentgym-rl[webshop]'")

import agentgym_envs  # noqa: E402,F401  (registers the ids)
from agentgym_envs.webshop.engine import PageState  # noqa: E402
from agentgym_envs.webshop.site import ShopSite  # noqa: E402

#: sha256 of ``crawl()``, recorded from the stdlib http.server site (commit 8cad870)
PAGES_DIGEST = "0fd940f53c9b7c37a548c54dce9791bb772b4a35e573f8a6b9464a3415fa7ff3"
MAX_PAGES = 60


def crawl() -> dict[str, Any]:
    """target -> [status, Content-Type, body] of the first pages linked from the search page (breadth first), a
    results page, and the error answers; the random session id is written as <session>."""
    env = gym.make("AgentGym/WebShop-v0")
    env.reset(seed=0, options={"item_id": 0})
    site = ShopSite()
    try:
        session = site.open_session(env.unwrapped.shop, env.unwrapped._goal)
        parts = urlsplit(site.base_url)
        assert parts.hostname == "127.0.0.1"
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)

        def fetch(method: str, target: str) -> list[Any]:
            connection.request(method, target, body="" if method == "POST" else None)
            response = connection.getresponse()
            return [response.status, response.getheader("Content-Type"), response.read().decode("utf-8")]

        start = site.url(session, PageState())[len(site.base_url):]
        answers: dict[str, Any] = {}
        queue = deque([start, f"/s/{session}/results?k=running+shoes", f"/s/{session}/search/", "/",
                       "/s/nope/search", f"/s/{session}/nope", f"/s/{session}/item?a=NOPE"])
        while queue and len(answers) < MAX_PAGES:
            target = queue.popleft()
            if target not in answers:
                answers[target] = answer = fetch("GET", target)
                queue.extend(html.unescape(href) for href in re.findall(r'href="(/[^"]*)"', answer[2]))
        answers["POST " + start] = fetch("POST", start)
        site.close_session(session)
        answers["ended " + start] = fetch("GET", start)
        connection.close()
    finally:
        site.shutdown()
        env.close()
    return json.loads(json.dumps(answers).replace(session, "<session>"))


def test_pages_are_the_stdlib_servers_byte_for_byte() -> None:
    pages = crawl()
    statuses = sorted({answer[0] for answer in pages.values()})
    assert statuses == [200, 404, 405, 410], statuses
    assert {answer[1] for answer in pages.values()} == {"text/html; charset=utf-8"}
    digest = hashlib.sha256(json.dumps(pages, sort_keys=True).encode()).hexdigest()
    assert digest == PAGES_DIGEST, f"the shop's pages changed ({len(pages)} answers): new digest {digest}"


def test_the_web_extra_brings_the_sites_server() -> None:
    """Both browser families need [web]: it carries the framework and the server of their embedded sites."""
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    web_extra = pyproject["project"]["optional-dependencies"]["web"]
    names = {re.split(r"[<>=\[ ]", requirement)[0] for requirement in web_extra}
    assert {"starlette", "uvicorn", "selenium"} <= names
    for env_id in ("AgentGym/WebArena-v0", "AgentGym/WebShop-Browser-v0"):
        spec = agentgym_envs.get_task(env_id)
        assert {"starlette", "uvicorn"} <= set(spec.requires) and "web" in spec.extra.split(",")
