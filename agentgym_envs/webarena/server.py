"""The embedded WebArena sites: Starlette apps over a SQLite database, rendered with jinja2.

Each site is a ``SiteApp``: a SQLite database seeded deterministically once per process and
copied fresh for every episode (``reset()``, via SQLite's backup API, about a millisecond), plus
a list of Starlette routes (path templates with the converters of ``PATH_CONVERTERS``) whose handlers
render plain server-rendered HTML from autoescaped jinja2 templates (``templates/``: ``layout.html``, the
shared macros of ``fragments.html`` and one file of page macros per site, so no text reaches a page
unescaped). ``SiteServer`` serves one app on a free loopback port with uvicorn (``web/loopback.py``);
handlers run one at a time under the app's lock, so the database needs no further locking and an evaluator
reading it sees a consistent state.

The embedded sites start signed in as the task's user (WebArena's auto-login does the same with
cookies), so there is no login page to get through and nothing session-like to leak between
episodes: all state lives in the database, which every episode gets fresh.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from jinja2.ext import Extension
from markupsafe import Markup

from agentgym_envs.web.loopback import (HTML_MEDIA_TYPE, PAGE_HEADERS, ASGIApp, LoopbackServer, parse_fields,
                                        strip_trailing_slash)

if TYPE_CHECKING:
    from starlette.requests import Request as HttpRequest
    from starlette.responses import Response as HttpResponse

_NOT_FOUND = "The page you requested was not found."


@dataclass
class Request:
    """What a handler reads of a request: query and form fields, the last value of each (blanks kept)."""

    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str] = field(default_factory=dict)

    def arg(self, name: str, default: str = "") -> str:
        """The stripped value of field ``name``: the form's value wins over the query's (a POST's own fields come
        first).

        Args:
            name: the field's name.
            default: what a field that is in neither gives.

        Returns:
            The value with surrounding whitespace removed.
        """
        return self.form.get(name, self.query.get(name, default)).strip()


@dataclass
class Response:
    """A handler's answer other than a plain page: a status, and for redirects where to go."""

    status: int
    body: str = ""
    location: str | None = None


class NotFound(Exception):
    """Raised by a route when the thing named in the URL does not exist."""


Handler = Callable[..., "Response | str"]

#: The path parameters the sites' routes use (``/product/{product_id:digits}``): each matches what the
#: sites' regular expressions matched before they moved to Starlette, and hands the handler the text (not an
#: int, so ``/orders/007`` reaches the handler as it was typed).
PATH_CONVERTERS = {"digits": r"\d+", "slug": r"[\w-]+", "dotted": r"[\w.-]+", "word": r"\w+", "vote": "up|down",
                   "rest": ".+"}


def _register_path_converters() -> None:
    from starlette.convertors import CONVERTOR_TYPES, StringConvertor, register_url_convertor

    for name, regex in PATH_CONVERTERS.items():
        if name not in CONVERTOR_TYPES:
            register_url_convertor(name, type(f"{name.title()}Convertor", (StringConvertor,), {"regex": regex})())


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

    # ---- data -----------------------------------------------------------------------------------
    def create_schema(self, db: sqlite3.Connection) -> None:
        """Create the site's tables in ``db`` (an empty in-memory database). Subclasses implement it."""
        raise NotImplementedError

    def seed(self, db: sqlite3.Connection) -> None:
        """Fill the site's tables in ``db`` with its deterministic content (seeded RNG, so every process builds the
        same site). Subclasses implement it.
        """
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
        """A private copy of the seeded database for this site instance (SQLite's backup API: about a millisecond).

        Returns:
            An in-memory connection usable from any thread, its rows as ``sqlite3.Row``.
        """
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
        """All rows of ``sql`` on the episode's database, under the site's lock.

        Args:
            sql: one SQL statement, ``?`` for parameters.
            params: the values bound to the ``?``.

        Returns:
            The rows, as ``sqlite3.Row`` (read by column name).
        """
        with self.lock:
            return self.db.execute(sql, params).fetchall()

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row:
        """The first row of ``sql``; the page 404s (``NotFound``) when there is none, as a URL naming a missing thing
        should.

        Args:
            sql: one SQL statement, ``?`` for parameters.
            params: the values bound to the ``?``.

        Returns:
            The first row.
        """
        rows = self.query(sql, params)
        if not rows:
            raise NotFound(sql)
        return rows[0]

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """Run one changing statement and commit it, under the site's lock (the evaluator reads the committed state).

        Args:
            sql: one SQL statement, ``?`` for parameters.
            params: the values bound to the ``?``.

        Returns:
            The row id of an inserted row, 0 when the statement inserted none.
        """
        with self.lock:
            cursor = self.db.execute(sql, params)
            self.db.commit()
            return int(cursor.lastrowid or 0)

    # ---- HTTP -----------------------------------------------------------------------------------
    def routes(self) -> list[tuple[str, str, Handler]]:
        """(method, Starlette path template, handler): the handler gets the request and the path parameters."""
        raise NotImplementedError

    def asgi_app(self) -> ASGIApp:
        """The site as a Starlette app: its routes, and the site's own "Not found" page for any other URL or
        method (as a 404, like every unknown page of the site)."""
        from starlette.applications import Starlette
        from starlette.routing import Route

        _register_path_converters()

        def endpoint(handler: Handler) -> Callable[[HttpRequest], Any]:
            async def answer(request: HttpRequest) -> HttpResponse:
                from starlette.concurrency import run_in_threadpool

                body = (await request.body()).decode("utf-8", "replace") if request.method == "POST" else ""
                query = request.scope["query_string"].decode("latin-1")
                site_request = Request(request.method, request.scope["path"], parse_fields(query), parse_fields(body))
                return _http(await run_in_threadpool(self.answer, handler, site_request, *request.path_params.values()))

            return answer

        async def not_found(request: HttpRequest, error: Exception) -> HttpResponse:
            return _http(self.not_found())

        routes = [Route(path, endpoint(handler), methods=[method]) for method, path, handler in self.routes()]
        app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
        app.router.redirect_slashes = False  # strip_trailing_slash answers /cart/ with /cart's page instead
        return strip_trailing_slash(app)

    def answer(self, handler: Handler, request: Request, *path_params: str) -> Response:
        """The handler's page under the site's lock; a missing thing is a 404 page, bad input a 400 page, and a
        bug a 500 page (never a dead server)."""
        with self.lock:
            try:
                result = handler(request, *path_params)
            except NotFound:
                return self.not_found()
            except ValueError as error:
                return Response(400, self.page("Invalid request", message(f"Invalid input: {error}")))
            except Exception as error:  # a site bug must not take the server down
                return Response(500, self.page("Server error", message(repr(error))))
            return result if isinstance(result, Response) else Response(200, result)

    def not_found(self) -> Response:
        """The site's own 404 page, for unknown URLs, methods and missing things."""
        return Response(404, self.page("Not found", message(_NOT_FOUND)))

    def page(self, heading: str, body: Markup) -> str:
        """A full page: header navigation, a heading, the body (``layout.html``)."""
        return _TEMPLATES.get_template("layout.html").render(heading=heading, title=self.title, nav=self.nav, body=body)

    def render(self, heading: str, view: str, **context: Any) -> str:
        """A full page whose body is the macro ``view`` of the site's template ``<name>.html``."""
        return self.page(heading, macro(f"{self.name}.html", view)(**context))


def redirect(location: str) -> Response:
    """A 303 "See Other" to ``location``: what a form's POST answers, so reloading the next page does not repeat it.

    Args:
        location: the path to go to (as the site writes it; not re-quoted).

    Returns:
        The handler's response.
    """
    return Response(303, location=location)


def url(path: str, **params: Any) -> str:
    """``path`` with a query string of the ``params`` that have a value (None and "" are left out).

    Args:
        path: the path, without a query.
        params: the query fields, in order.

    Returns:
        The URL, its values percent-encoded (spaces as ``%20``, as the sites' links show them).
    """
    query = {k: v for k, v in params.items() if v not in (None, "")}
    return f"{path}?{urlencode(query, quote_via=quote)}" if query else path


@dataclass
class Pager:
    """Where a paginated list is: page ``page`` of ``pages``, and (href, label) links to its neighbours."""

    page: int
    pages: int
    links: list[tuple[str, str]]


def paginate(rows: list[Any], request: Request, path: str, size: int = 25, **params: Any) -> tuple[list[Any], Pager]:
    """One page of ``rows`` (``?page=N``) and the links to the neighbouring pages (long lists make huge trees)."""
    pages = max(1, -(-len(rows) // size))
    try:
        page = min(max(1, int(request.arg("page") or 1)), pages)
    except ValueError:
        page = 1
    links = []
    if page > 1:
        links.append((url(path, page=page - 1, **params), "Previous page"))
    if page < pages:
        links.append((url(path, page=page + 1, **params), "Next page"))
    return rows[(page - 1) * size: page * size], Pager(page, pages, links)


def money(value: float) -> str:
    """A price as the shop shows it: ``$1,234.50``."""
    return f"${value:,.2f}"


class _JoinLines(Extension):
    """Joins a template's lines without whitespace: templates are written one element per line, but the
    pages' DOM must have no whitespace text between elements (it would show in the accessibility tree)."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return re.sub(r"\n[ \t]*", "", source)


#: The sites' templates (``templates/``): autoescaped, and an unknown name is an error, not an empty string.
_TEMPLATES = Environment(
    loader=PackageLoader("agentgym_envs.webarena", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    extensions=[_JoinLines],
)
_TEMPLATES.globals["url"] = url
_TEMPLATES.filters["money"] = money


def macro(template: str, name: str) -> Callable[..., Markup]:
    """The macro ``name`` of ``template``, callable from Python (it returns escaped HTML)."""
    return getattr(_TEMPLATES.get_template(template).module, name)


def message(text: str) -> Markup:
    """A page body of one paragraph of plain text."""
    return macro("fragments.html", "paragraph")(text)


def _http(response: Response) -> HttpResponse:
    from starlette.responses import HTMLResponse

    headers = dict(PAGE_HEADERS)
    if response.location is not None:
        headers["Location"] = response.location  # as the site wrote it (RedirectResponse would re-quote it)
    return HTMLResponse(response.body, status_code=response.status, headers=headers, media_type=HTML_MEDIA_TYPE)


class SiteServer:
    """One app on ``http://127.0.0.1:<free port>``, served from a daemon thread until ``shutdown()``."""

    def __init__(self, app: SiteApp):
        self.app = app
        self._http = LoopbackServer(app.asgi_app(), name=f"webarena-{app.name}")
        self.base_url = self._http.base_url

    def shutdown(self) -> None:
        """Stop serving and release the port."""
        self._http.shutdown()
