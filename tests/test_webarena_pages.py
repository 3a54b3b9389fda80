"""The embedded WebArena sites' pages, over HTTP without a browser: every page reachable from a site's home
page has the DOM the sites had before their HTML moved to jinja2 templates and their serving to Starlette
(the agent reads that DOM through the accessibility tree, so observations stay the same), the routing answers
as it did (unknown pages and methods, trailing slashes, redirects), and text from the database or from the
agent's forms reaches a page escaped.
"""

from __future__ import annotations

import hashlib
import html
import http.client
import json
import re
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

pytest.importorskip("starlette", reason="the embedded sites are Starlette apps: pip install 'agentgym-rl[web]'")
pytest.importorskip("uvicorn", reason="the embedded sites are served by uvicorn: pip install 'agentgym-rl[web]'")

from agentgym_envs.webarena.catalog import LAYOUT  # noqa: E402
from agentgym_envs.webarena.server import SiteServer  # noqa: E402
from agentgym_envs.webarena.sites import app_class  # noqa: E402

#: site -> sha256 of its crawl (``_crawl``), recorded from the hand-written f-string pages (24d8a91)
DOM_DIGESTS = {
    "shopping": "69d7f7af167b0166bb8859c933d5d10501ea325a6776d226c0a7fb2f3ae4c569",
    "shopping_admin": "1e572224fccafec99020e09aa4bdb17b80db54807be1b4db73c12a1ed946f5dd",
    "map": "c011db51b741e92e5e86770cd990cae1c254b4db9e4d0094258bdc501ee6e94a",
    "gitlab": "2665983ad75b98ae37741c7c182cca22d00c613fd3d51b71cf80fc2222ee527a",
    "reddit": "9c6d9bf4183c0f11ee83e0cf15fa9d6c88c5835c49785f4fd4b52860d9e88a86",
}
#: pages no link leads to from the home page: errors, searches, later pages of lists, filled-in forms
EXTRA_PAGES = ["/nope", "/product/99999", "/orders/abc", "/search?q=a", "/search?q=zzz", "/place/1", "/place/7",
               "/products?page=x", "/orders?status=Pending&page=2", "/search?q=%3Cb%3E%26%22'",
               "/directions?from=%3Cx%3E&to=Zoo", "/directions?mode=plane", "/directions?from=Zoo&to=Park&mode=foot",
               "/submit?forum=books", "/f/books?sort=new"]


class _Dom(HTMLParser):
    """The DOM as the browser builds it, as a list of tags (with their unescaped attributes) and texts:
    the same for ``&#x27;`` and ``&#39;``, different for any change the accessibility tree could show."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[Any] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.parts.append(["<", tag, sorted((k, v or "") for k, v in attrs)])

    def handle_endtag(self, tag: str) -> None:
        self.parts.append(["/", tag])

    def handle_data(self, data: str) -> None:
        if self.parts and self.parts[-1][0] == "text":
            self.parts[-1][1] += data
        else:
            self.parts.append(["text", data])

    def handle_decl(self, decl: str) -> None:
        self.parts.append(["!", decl])


def dom(body: str) -> list[Any]:
    parser = _Dom()
    parser.feed(body)
    parser.close()
    return parser.parts


class Client:
    """One keep-alive HTTP connection to a site served on loopback (redirects are not followed)."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        assert parts.hostname == "127.0.0.1", "the embedded sites listen on loopback only"
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)

    def request(self, method: str, target: str, form: dict[str, str] | None = None) -> http.client.HTTPResponse:
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
        self.connection.request(method, target, body=urlencode(form) if form is not None else None, headers=headers)
        response = self.connection.getresponse()
        response.text = response.read().decode("utf-8")  # type: ignore[attr-defined]
        return response


@contextmanager
def served(site: str) -> Iterator[Client]:
    server = SiteServer(app_class(site)())
    try:
        client = Client(server.base_url)
        client.app = server.app  # type: ignore[attr-defined]
        yield client
        client.connection.close()
    finally:
        server.shutdown()


def get(client: Client, target: str) -> tuple[int, str]:
    response = client.request("GET", target)
    return response.status, response.text  # type: ignore[attr-defined]


def _crawl(site: str) -> dict[str, Any]:
    """target -> (status, DOM) of every page linked from the home page and the extra pages, transitively."""
    pages: dict[str, Any] = {}
    queue = deque(["/", *EXTRA_PAGES])
    with served(site) as client:
        while queue:
            target = queue.popleft()
            if target in pages:
                continue
            status, body = get(client, target)
            pages[target] = [status, dom(body)]
            queue.extend(html.unescape(href) for href in re.findall(r'href="(/[^"]*)"', body))
    return pages


@pytest.mark.parametrize("site", list(LAYOUT))
def test_every_page_has_the_dom_of_the_hand_written_pages(site: str) -> None:
    pages = _crawl(site)
    digest = hashlib.sha256(json.dumps(pages, sort_keys=True).encode()).hexdigest()
    assert digest == DOM_DIGESTS[site], (
        f"{site}: the DOM of some of its {len(pages)} pages changed, and with it what the agent observes; "
        f"if that is intended, record the new digest {digest}")


HOSTILE = """<b>bold</b> & "quoted" 'single' <script>alert(1)</script>"""


def post(client: Client, path: str, **form: str) -> str:
    """Submit a form; the page it redirects to."""
    response = client.request("POST", path, form)
    assert response.status == 303, response.text  # type: ignore[attr-defined]
    return get(client, response.getheader("Location"))[1]


def _hostile_pages() -> dict[str, str]:
    """site -> a page showing text the agent typed into one of its forms."""
    pages = {}
    with served("shopping") as shop:
        pages["shopping"] = post(shop, "/account", name=HOSTILE, email="e@example.com", address=HOSTILE)
    with served("shopping_admin") as admin:
        post(admin, "/products/1", name=HOSTILE, price="1", quantity="1", status="Enabled")
        pages["shopping_admin"] = get(admin, "/products?q=%3Cb%3E")[1]
    with served("gitlab") as gitlab:
        namespace, name = gitlab.app.query("SELECT namespace, name FROM projects ORDER BY id")[0]
        pages["gitlab"] = post(gitlab, f"/{namespace}/{name}/-/issues", title=HOSTILE, description=HOSTILE,
                               label=HOSTILE)
    with served("reddit") as reddit:
        pages["reddit"] = post(reddit, "/submit", forum="books", title=HOSTILE, body=HOSTILE)
    with served("map") as maps:
        pages["map"] = get(maps, "/directions?" + urlencode({"from": HOSTILE}))[1]
    return pages


def test_text_reaches_the_pages_escaped() -> None:
    for site, body in _hostile_pages().items():
        parts = dom(body)
        tags = {part[1] for part in parts if part[0] == "<"}
        assert not tags & {"b", "script"}, f"{site}: typed markup became elements"
        shown = [part[1] for part in parts if part[0] == "text"]
        shown += [v for part in parts if part[0] == "<" for _, v in part[2]]
        assert any(HOSTILE in text for text in shown), f"{site}: the typed text is not shown as typed"


def test_routing_answers_as_before() -> None:
    """What the stdlib server's regex routing answered, Starlette's routing answers: the site's own 404 page
    for an unknown page, a path parameter outside its pattern or a method the page does not take; the same page
    with or without a trailing slash; a form's 303 to the page it changed, with the Location the site wrote."""
    with served("shopping") as shop:
        status, missing = get(shop, "/nope")
        assert status == 404 and "<h1>Not found</h1>" in missing
        assert get(shop, "/product/abc") == (404, missing)  # {product_id:digits}
        assert get(shop, "/category/no%2Fsuch") == (404, missing)
        for method, target in (("POST", "/cart"), ("PUT", "/"), ("DELETE", "/product/1")):
            response = shop.request(method, target, {} if method == "POST" else None)
            assert (response.status, response.text) == (404, missing), (method, target)  # type: ignore[attr-defined]
        assert get(shop, "/cart/") == get(shop, "/cart") and get(shop, "/cart")[0] == 200
        response = shop.request("POST", "/cart/add", {"product_id": "1", "qty": "2"})
        assert response.status == 303 and response.getheader("Location") == "/cart"
        assert response.getheader("Cache-Control") == "no-store"
        assert response.getheader("Content-Type") == "text/html; charset=utf-8"
        response = shop.request("POST", "/cart/add", {"product_id": "x"})
        assert response.status == 400 and "Invalid input:" in response.text  # type: ignore[attr-defined]
    with served("reddit") as reddit:
        assert get(reddit, "/vote/1/sideways")[0] == 404  # {direction:vote} is up or down
        assert reddit.request("POST", "/vote/1/up", {}).status == 303


def test_sites_listen_on_loopback_only() -> None:
    server = SiteServer(app_class("map")())
    try:
        assert server._http._socket.getsockname()[0] == "127.0.0.1"
        assert urlsplit(server.base_url).hostname == "127.0.0.1"
    finally:
        server.shutdown()
    with pytest.raises(OSError):  # and after shutdown nothing listens there any more
        Client(server.base_url).request("GET", "/")
