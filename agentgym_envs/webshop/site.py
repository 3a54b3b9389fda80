"""The WebShop web site for the browser mode: the same pages as text mode, a Starlette app served as HTML
on 127.0.0.1 by the shared loopback server (uvicorn, ``agentgym_envs/web/loopback.py``).

The site is stateless apart from a table of sessions (session id -> shop and goal): the whole
page state is in the URL (``/s/<session>/<page kind>?k=keywords&p=page&a=asin&o=options&d=tab``),
like the original WebShop Flask app. That makes every page reloadable, so an env whose browser
crashed relaunches it and continues the episode from the last URL.

Every segment of a page carries ``data-seg`` (the browser mode reads the observation back from
them, in document order), buttons carry ``data-click`` (their click value) and the done page
carries ``data-score`` (the exact reward). One server per process is shared by every browser-mode
env (``acquire_site()`` / ``release_site()``), and stops when the last env closes.
"""

from __future__ import annotations

import json
import secrets
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

import jinja2
import markupsafe

from agentgym_envs.web.loopback import (HTML_MEDIA_TYPE, PAGE_HEADERS, ASGIApp, LoopbackServer, parse_fields,
                                        strip_trailing_slash)
from agentgym_envs.webshop.catalogue import Goal
from agentgym_envs.webshop.engine import KINDS, PageState, PageView, Segment, Shop, normalize_text

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

_STYLE = """
body{font-family:sans-serif;max-width:60em;margin:1em auto;color:#222}
.instruction{background:#fff7e0;padding:.5em;border:1px solid #e0c080}
a.btn,a.product,a.option,a.option-selected,a.buy{display:inline-block;margin:.15em;padding:.2em .6em;
border:1px solid #888;border-radius:4px;text-decoration:none;color:#114}
a.option-selected{background:#1a5;color:#fff}
a.buy{background:#f90;font-weight:bold}
.title{font-weight:bold}.price{color:#a30}
"""


def state_to_path(session: str, state: PageState) -> str:
    """The site path of a page state in a session (``/s/<session>/<kind>`` and its query)."""
    query = {}
    if state.keywords:
        query["k"] = state.keywords
    if state.kind != "search":
        query["p"] = str(state.page)
    if state.asin:
        query["a"] = state.asin
    if state.options:
        query["o"] = json.dumps([list(pair) for pair in state.options], separators=(",", ":"))
    if state.detail:
        query["d"] = state.detail
    path = f"/s/{session}/{state.kind}"
    return f"{path}?{urlencode(query, quote_via=quote)}" if query else path


def path_to_state(path: str) -> tuple[str, PageState]:
    """(session id, page state) of a site URL or path; ``ValueError`` if it is not a page of the site."""
    parts = urlsplit(path)
    pieces = parts.path.strip("/").split("/")
    if len(pieces) != 3 or pieces[0] != "s" or pieces[2] not in KINDS:
        raise ValueError(f"not a shop page: {path}")
    query = parse_fields(parts.query)
    options = tuple((str(n), str(v)) for n, v in json.loads(query["o"])) if query.get("o") else ()
    page = int(query.get("p", "1") or 1)
    keywords = normalize_text(query.get("k", "")).lower()
    return pieces[1], PageState(pieces[2], keywords, max(1, page), query.get("a", ""), options, query.get("d", ""))


# The pages, autoescaped: every segment in order (``data-seg``), buttons as links to their target state
# (``data-click``), the exact reward on the done page (``data-score``). One line each, so no whitespace text
# lands between the segments the browser mode reads back.
_PAGES = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
    "{% macro segment(s) %}"
    "{% if s.kind == 'form' %}"
    '<form id="search-form" action="{{ s.action }}" method="get">'
    '<input id="search-input" name="k" type="text" autocomplete="off" size="60">'
    '<button type="submit" data-seg>{{ s.text }}</button></form>'
    "{% elif s.kind == 'link' %}"
    '<a class="{{ s.role }}" data-seg data-click="{{ s.click }}" href="{{ s.href }}">{{ s.text }}</a>'
    "{% else %}"
    '<{{ s.tag }} class="{{ s.role }}" data-seg{% if s.score is not none %} data-score="{{ s.score }}"{% endif %}>'
    "{{ s.text }}</{{ s.tag }}>"
    "{% endif %}"
    "{% endmacro %}"
    "{% if message is defined %}"
    '<!DOCTYPE html><html><body><main id="ws-page"><div data-seg>{{ message }}</div></main></body></html>'
    "{% else %}"
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
    "<title>WebShop</title><style>{{ style }}</style></head>"
    '<body data-kind="{{ kind }}"><main id="ws-page">{% for s in segments %}{{ segment(s) }}{% endfor %}</main>'
    "</body></html>"
    "{% endif %}"
)


def render_html(session: str, view: PageView) -> str:
    """The page as HTML: every segment in order, buttons as links to their target state."""
    score = repr(view.reward.reward) if view.reward is not None else None
    segments = [_segment(session, segment, score if segment.role == "score" else None) for segment in view.segments]
    return _PAGES.render(style=markupsafe.Markup(_STYLE), kind=view.state.kind, segments=segments)


def _segment(session: str, segment: Segment, score: str | None) -> dict[str, Any]:
    """What the template needs of a segment: a search form, a link to its target state, or a block."""
    if segment.role == "submit":
        return {"kind": "form", "text": segment.text, "action": f"/s/{session}/results"}
    if segment.click is not None and segment.target is not None:
        return {"kind": "link", "role": segment.role, "text": segment.text, "click": segment.click,
                "href": state_to_path(session, segment.target)}
    tag = {"heading": "h3", "title": "h2"}.get(segment.role, "div")
    return {"kind": "block", "role": segment.role, "text": segment.text, "tag": tag, "score": score}


def _message_page(text: str) -> str:
    return _PAGES.render(message=text)


class ShopSite:
    """The HTTP server and its sessions."""

    def __init__(self) -> None:
        self._sessions: dict[str, tuple[Shop, Goal]] = {}
        self._lock = threading.Lock()
        self._http = LoopbackServer(self.asgi_app(), name="webshop-site")
        self.base_url = self._http.base_url
        self.users = 0

    def open_session(self, shop: Shop, goal: Goal) -> str:
        """Serve an episode's shop and goal under a new random session id; the id goes into every URL."""
        session = secrets.token_hex(8)
        with self._lock:
            self._sessions[session] = (shop, goal)
        return session

    def close_session(self, session: str | None) -> None:
        """Stop serving a session (its pages then answer 410)."""
        with self._lock:
            self._sessions.pop(session or "", None)

    def url(self, session: str, state: PageState) -> str:
        """The full URL of a page state in a session."""
        return self.base_url + state_to_path(session, state)

    def respond(self, path: str) -> tuple[int, str]:
        """The status and HTML of a site path: the page (200), an unknown path or product (404) or an ended session
        (410).

        Args:
            path: the requested path with its query.

        Returns:
            (status, HTML).
        """
        try:
            session, state = path_to_state(path)
        except (ValueError, TypeError, KeyError):
            return 404, _message_page("Page not found.")
        with self._lock:
            entry = self._sessions.get(session)
        if entry is None:
            return 410, _message_page("This shopping session has ended.")
        shop, goal = entry
        try:
            view = shop.view(state, goal)
        except (KeyError, ValueError):
            return 404, _message_page("No such product page.")
        return 200, render_html(session, view)

    def asgi_app(self) -> ASGIApp:
        """One route, ``/s/<session>/<page kind>`` (``respond`` reads the page state from the URL); any other
        path is the site's "Page not found." page, and any method but GET is refused with a page that says so
        (the shop's forms all submit with GET, like WebShop's)."""
        from starlette.applications import Starlette
        from starlette.concurrency import run_in_threadpool
        from starlette.routing import Route

        async def page(request: Request) -> Response:
            target = request.scope["path"]
            if request.scope["query_string"]:
                target += "?" + request.scope["query_string"].decode("latin-1")
            return _html(*await run_in_threadpool(self.respond, target))

        async def not_found(request: Request, error: Exception) -> Response:
            return _html(404, _message_page("Page not found."))

        app = Starlette(routes=[Route("/s/{session}/{kind}", page, methods=["GET"])],
                        exception_handlers={404: not_found})
        app.router.redirect_slashes = False  # strip_trailing_slash answers /s/x/search/ with its page instead
        return _refuse_other_methods(strip_trailing_slash(app))

    def shutdown(self) -> None:
        """Stop the server."""
        self._http.shutdown()


def _html(status: int, page: str) -> Response:
    from starlette.responses import HTMLResponse

    return HTMLResponse(page, status_code=status, headers=PAGE_HEADERS, media_type=HTML_MEDIA_TYPE)


def _refuse_other_methods(app: ASGIApp) -> ASGIApp:
    """A POST (or any method but GET) gets the 405 page on every path, not only on the shop's pages."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD"):
            await _html(405, _message_page("Only GET requests are served."))(scope, receive, send)
            return
        await app(scope, receive, send)

    return wrapped


_SITE: ShopSite | None = None
_SITE_LOCK = threading.Lock()


def acquire_site() -> ShopSite:
    """The process's site (started on first use); pair every call with ``release_site``."""
    global _SITE
    with _SITE_LOCK:
        if _SITE is None:
            _SITE = ShopSite()
        _SITE.users += 1
        return _SITE


def release_site(site: ShopSite) -> None:
    """Drop one user; the last one stops the server."""
    global _SITE
    with _SITE_LOCK:
        site.users -= 1
        if site.users <= 0 and site is _SITE:
            _SITE = None
            site.shutdown()
