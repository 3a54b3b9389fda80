"""The embedded WebArena sites' pages, without a browser: every page reachable from a site's home
page has the DOM the sites had before their HTML moved to jinja2 templates (the agent reads that DOM
through the accessibility tree, so observations stay the same), and text from the database or from
the agent's forms reaches a page escaped.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections import deque
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from agentgym_envs.webarena.catalog import LAYOUT
from agentgym_envs.webarena.server import Request, SiteApp
from agentgym_envs.webarena.sites import app_class

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


def get(app: SiteApp, target: str) -> tuple[int, str]:
    parts = urlsplit(target)
    response = app.handle(Request("GET", parts.path.rstrip("/") or "/", dict(parse_qsl(parts.query))))
    return response.status, response.body


def _crawl(site: str) -> dict[str, Any]:
    """target -> (status, DOM) of every page linked from the home page and the extra pages, transitively."""
    app = app_class(site)()
    pages: dict[str, Any] = {}
    queue = deque(["/", *EXTRA_PAGES])
    while queue:
        target = queue.popleft()
        if target in pages:
            continue
        status, body = get(app, target)
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


def post(app: SiteApp, path: str, **form: str) -> str:
    """Submit a form; the page it redirects to."""
    response = app.handle(Request("POST", path, {}, form))
    assert response.status == 303, response.body
    return get(app, response.location)[1]


def _hostile_pages() -> dict[str, str]:
    """site -> a page showing text the agent typed into one of its forms."""
    pages = {}
    shop = app_class("shopping")()
    pages["shopping"] = post(shop, "/account", name=HOSTILE, email="e@example.com", address=HOSTILE)
    admin = app_class("shopping_admin")()
    post(admin, "/products/1", name=HOSTILE, price="1", quantity="1", status="Enabled")
    pages["shopping_admin"] = get(admin, "/products?q=%3Cb%3E")[1]
    gitlab = app_class("gitlab")()
    namespace, name = gitlab.query("SELECT namespace, name FROM projects ORDER BY id")[0]
    pages["gitlab"] = post(gitlab, f"/{namespace}/{name}/-/issues", title=HOSTILE, description=HOSTILE, label=HOSTILE)
    reddit = app_class("reddit")()
    pages["reddit"] = post(reddit, "/submit", forum="books", title=HOSTILE, body=HOSTILE)
    pages["map"] = get(app_class("map")(), "/directions?from=" + HOSTILE.replace("&", "%26"))[1]
    return pages


def test_text_reaches_the_pages_escaped() -> None:
    for site, body in _hostile_pages().items():
        parts = dom(body)
        tags = {part[1] for part in parts if part[0] == "<"}
        assert not tags & {"b", "script"}, f"{site}: typed markup became elements"
        shown = [part[1] for part in parts if part[0] == "text"] + [v for part in parts if part[0] == "<" for _, v in part[2]]
        assert any(HOSTILE in text for text in shown), f"{site}: the typed text is not shown as typed"
