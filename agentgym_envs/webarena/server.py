"""The small web framework the embedded WebArena sites are written in (stdlib only).

Each site is a ``SiteApp``: a SQLite database seeded deterministically once per process and
copied fresh for every episode (``reset()``, via SQLite's backup API, about a millisecond), plus
a list of routes that render plain server-rendered HTML. ``SiteServer`` serves one app on a free
loopback port from a daemon thread; requests are handled one at a time under the app's lock, so
the database needs no further locking and an evaluator reading it sees a consistent state.

The embedded sites start signed in as the task's user (WebArena's auto-login does the same with
cookies), so there is no login page to get through and nothing session-like to leak between
episodes: all state lives in the database, which every episode gets fresh.
"""

from __future__ import annotations

import html
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar
from urllib.parse import quote, urlencode, urlsplit

from agentgym_envs.web.loopback import HtmlResponse, LoopbackHtmlServer, parse_fields

esc = html.escape


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str] = field(default_factory=dict)

    def arg(self, name: str, default: str = "") -> str:
        return self.form.get(name, self.query.get(name, default)).strip()


@dataclass
class Response:
    status: int
    body: str = ""
    location: str | None = None


class NotFound(Exception):
    """Raised by a route when the thing named in the URL does not exist."""


Handler = Callable[..., "Response | str"]


class SiteApp:
    """A site: its seeded database and its routes. Subclasses set ``name``, ``title``, ``nav`` and
    implement ``create_schema`` / ``seed`` and the route handlers listed in ``routes()``."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    #: (label, path) links of the site's header navigation.
    nav: ClassVar[tuple[tuple[str, str], ...]] = ()
    _seed_cache: ClassVar[dict[str, sqlite3.Connection]] = {}
    _seed_lock: ClassVar[threading.RLock] = threading.RLock()

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.db = self.fresh_database()
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = [
            (method, re.compile(f"^{pattern}$"), handler) for method, pattern, handler in self.routes()
        ]

    # ---- data -----------------------------------------------------------------------------------
    def create_schema(self, db: sqlite3.Connection) -> None:
        raise NotImplementedError

    def seed(self, db: sqlite3.Connection) -> None:
        raise NotImplementedError

    @classmethod
    def seeded_template(cls) -> sqlite3.Connection:
        """The seeded database of this site, built once per process (read-only by convention)."""
        with cls._seed_lock:
            template = cls._seed_cache.get(cls.name)
            if template is None:
                template = sqlite3.connect(":memory:", check_same_thread=False)
                site = cls.__new__(cls)
                site.create_schema(template)
                site.seed(template)
                template.commit()
                cls._seed_cache[cls.name] = template
            return template

    def fresh_database(self) -> sqlite3.Connection:
        db = sqlite3.connect(":memory:", check_same_thread=False)
        with self._seed_lock:
            self.seeded_template().backup(db)
        db.row_factory = sqlite3.Row
        return db

    def reset(self) -> None:
        """Put the database back to the seeded state (a new episode)."""
        with self.lock:
            old, self.db = self.db, self.fresh_database()
            old.close()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self.lock:
            return self.db.execute(sql, params).fetchall()

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row:
        rows = self.query(sql, params)
        if not rows:
            raise NotFound(sql)
        return rows[0]

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        with self.lock:
            cursor = self.db.execute(sql, params)
            self.db.commit()
            return int(cursor.lastrowid or 0)

    # ---- HTTP -----------------------------------------------------------------------------------
    def routes(self) -> list[tuple[str, str, Handler]]:
        raise NotImplementedError

    def handle(self, request: Request) -> Response:
        with self.lock:
            for method, pattern, handler in self._routes:
                match = pattern.match(request.path)
                if match and method == request.method:
                    try:
                        result = handler(request, *match.groups())
                    except NotFound:
                        return Response(404, self.page("Not found", "<p>The page you requested was not found.</p>"))
                    except ValueError as error:
                        return Response(400, self.page("Invalid request", f"<p>Invalid input: {esc(str(error))}</p>"))
                    return result if isinstance(result, Response) else Response(200, result)
            return Response(404, self.page("Not found", "<p>The page you requested was not found.</p>"))

    def page(self, heading: str, body: str) -> str:
        """A full page: header navigation, a heading, the body."""
        links = "".join(f'<li><a href="{esc(path)}">{esc(label)}</a></li>' for label, path in self.nav)
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f"<title>{esc(heading)} | {esc(self.title)}</title><style>{_STYLE}</style></head><body>"
            f'<header><nav aria-label="{esc(self.title)}"><strong>{esc(self.title)}</strong><ul>{links}</ul></nav></header>'
            f"<main><h1>{esc(heading)}</h1>{body}</main></body></html>"
        )


def redirect(location: str) -> Response:
    return Response(303, location=location)


def link(href: str, text: str) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def url(path: str, **params: Any) -> str:
    query = {k: v for k, v in params.items() if v not in (None, "")}
    return f"{path}?{urlencode(query, quote_via=quote)}" if query else path


def table(headers: list[str], rows: list[list[str]], caption: str = "") -> str:
    """A table; cells are HTML already (escape text with ``esc``)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _labelled(name: str, label: str, control: str) -> str:
    """A form row: the label, then its control (whose id is ``f-<name>``, so the label names it in the tree)."""
    return f'<p><label for="f-{esc(name)}">{esc(label)}</label> {control}</p>'


def text_input(name: str, label: str, value: str = "", kind: str = "text") -> str:
    return _labelled(name, label, f'<input id="f-{esc(name)}" name="{esc(name)}" type="{kind}" value="{esc(str(value))}">')


def textarea(name: str, label: str, value: str = "") -> str:
    return _labelled(name, label, f'<textarea id="f-{esc(name)}" name="{esc(name)}">{esc(value)}</textarea>')


def radio_group(name: str, legend: str, choices: list[str], selected: str | None = None) -> str:
    items = "".join(
        f'<label><input type="radio" name="{esc(name)}" value="{esc(c)}"{" checked" if c == selected else ""}> {esc(c)}</label> '
        for c in choices
    )
    return f"<fieldset><legend>{esc(legend)}</legend>{items}</fieldset>"


def select(name: str, label: str, choices: list[str], selected: str | None = None) -> str:
    options = "".join(f'<option value="{esc(c)}"{" selected" if c == selected else ""}>{esc(c)}</option>' for c in choices)
    return _labelled(name, label, f'<select id="f-{esc(name)}" name="{esc(name)}">{options}</select>')


def form(action: str, inner: str, submit: str, method: str = "post", role: str = "") -> str:
    role_attr = f' role="{role}"' if role else ""
    return f'<form action="{esc(action)}" method="{method}"{role_attr}>{inner}<button type="submit">{esc(submit)}</button></form>'


def search_form(action: str, label: str, value: str = "", name: str = "q") -> str:
    return (
        f'<form action="{esc(action)}" method="get" role="search"><label for="search-{esc(name)}">{esc(label)}</label> '
        f'<input id="search-{esc(name)}" name="{esc(name)}" type="search" value="{esc(value)}">'
        f"<button type=\"submit\">Search</button></form>"
    )


def paginate(rows: list[Any], request: Request, path: str, size: int = 25, **params: Any) -> tuple[list[Any], str]:
    """One page of ``rows`` (``?page=N``) and the links to the neighbouring pages (long lists make huge trees)."""
    pages = max(1, -(-len(rows) // size))
    try:
        page = min(max(1, int(request.arg("page") or 1)), pages)
    except ValueError:
        page = 1
    links = []
    if page > 1:
        links.append(link(url(path, page=page - 1, **params), "Previous page"))
    if page < pages:
        links.append(link(url(path, page=page + 1, **params), "Next page"))
    nav = f"<p>Page {page} of {pages} {' '.join(links)}</p>" if pages > 1 else ""
    return rows[(page - 1) * size: page * size], nav


def money(value: float) -> str:
    return f"${value:,.2f}"


_STYLE = (
    "body{font-family:sans-serif;margin:0;color:#222}header{background:#234;color:#fff;padding:.4em 1em}"
    "header a{color:#fff}nav ul{display:inline;list-style:none;padding:0;margin:0 0 0 1em}nav li{display:inline;margin-right:1em}"
    "main{max-width:70em;margin:1em auto;padding:0 1em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}"
)


class SiteServer:
    """One app on ``http://127.0.0.1:<free port>``, served from a daemon thread until ``shutdown()``."""

    def __init__(self, app: SiteApp):
        self.app = app
        self._http = LoopbackHtmlServer(self._respond, name=f"webarena-{app.name}")
        self.base_url = self._http.base_url

    def _respond(self, method: str, target: str, form_data: dict[str, str]) -> HtmlResponse:
        parts = urlsplit(target)
        path = parts.path.rstrip("/") or "/"
        try:
            response = self.app.handle(Request(method, path, parse_fields(parts.query), form_data))
        except Exception as error:  # a site bug must not kill the server thread
            response = Response(500, self.app.page("Server error", f"<p>{esc(repr(error))}</p>"))
        return HtmlResponse(response.status, response.body, response.location)

    def shutdown(self) -> None:
        self._http.shutdown()
