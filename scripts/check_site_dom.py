"""Record what the embedded web sites answer over HTTP, to compare two implementations byte for byte.

    PYTHONPATH=<old checkout> python scripts/check_site_dom.py record old.json
    PYTHONPATH=<new checkout> python scripts/check_site_dom.py record new.json
    python scripts/check_site_dom.py compare old.json new.json

``record`` starts each WebArena site and the WebShop site on loopback through their public classes
(``SiteServer``, ``ShopSite``), crawls every page linked from the home page plus pages no link reaches (errors,
searches, later pages, wrong methods, trailing slashes), submits every form kind once, and writes each answer's
status, ``Location`` and ``Content-Type`` headers and body. ``compare`` lists every target whose answer differs.
Nothing is normalised: the bodies must be equal byte for byte. (Session ids of the shop, random per run, are
written as ``<session>``.) The one expected difference between the stdlib server and Starlette: a method no
route of a site takes at all (``PUT /``) got http.server's own "501 Unsupported method" page and now gets the
site's 404 page, as a POST to a GET-only page always did.
"""

from __future__ import annotations

import html
import http.client
import json
import re
import sys
from collections import deque
from typing import Any
from urllib.parse import urlsplit

#: pages no link leads to (as in tests/test_webarena_pages.py) and answers the routing itself gives
EXTRA_PAGES = ["/nope", "/product/99999", "/orders/abc", "/search?q=a", "/search?q=zzz", "/place/1", "/place/7",
               "/products?page=x", "/orders?status=Pending&page=2", "/search?q=%3Cb%3E%26%22'",
               "/directions?from=%3Cx%3E&to=Zoo", "/directions?mode=plane",
               "/directions?from=Zoo&to=Park&mode=foot",
               "/submit?forum=books", "/f/books?sort=new", "/cart/", "/orders/", "/search/?q=a", "/vote/1/sideways",
               "/f/books/abc", "/category/no-such", "/users/nobody", "/explore?page=2", "/%7Euser", "/a%20b/c"]
#: (site, path, form) submissions: every POST route once, and a POST where only GET is served
POSTS = [
    ("shopping", "/cart/add", {"product_id": "1", "qty": "2"}), ("shopping", "/cart/remove/1", {}),
    ("shopping", "/checkout", {}), ("shopping", "/account", {"name": "A <b>", "email": "a@x", "address": "S & T"}),
    ("shopping", "/search", {"q": "a"}), ("shopping", "/cart/add", {"product_id": "x"}),
    ("shopping_admin", "/products/1", {"name": "N", "price": "$2.50", "quantity": "3", "status": "Enabled"}),
    ("shopping_admin", "/products/1", {"price": "abc", "quantity": "1"}),
    ("shopping_admin", "/orders/1/status", {"status": "Complete"}),
    ("shopping_admin", "/customers/1", {"email": "b@y"}),
    ("shopping_admin", "/reviews/1/delete", {}),
    ("reddit", "/f/books/1/comment", {"body": "hi"}), ("reddit", "/vote/1/up", {}), ("reddit", "/vote/1/down", {}),
    ("reddit", "/submit", {"forum": "books", "title": "T", "body": "B"}), ("reddit", "/submit", {"forum": "nope"}),
    ("map", "/search", {"q": "zoo"}),
]
GITLAB_POSTS = [("/star", {}), ("/-/issues", {"title": "T", "description": "D", "label": "bug"}),
                ("/-/issues/1/state", {"state": "closed"}),
                ("/-/project_members", {"username": "x", "role": "Developer"})]
MAX_PAGES = 400  # per site: the crawl of a site's links is finite, the shop's result pages are many


def fetch(base_url: str, method: str, target: str, form: dict[str, str] | None = None) -> dict[str, Any]:
    from urllib.parse import urlencode

    parts = urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    body = urlencode(form or {}) if method == "POST" else None
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if method == "POST" else {}
    connection.request(method, target, body=body, headers=headers)
    response = connection.getresponse()
    answer = {"status": response.status, "location": response.getheader("Location"),
              "type": response.getheader("Content-Type"), "body": response.read().decode("utf-8")}
    connection.close()
    return answer


def crawl(base_url: str, starts: list[str], answers: dict[str, Any], prefix: str) -> None:
    queue, seen = deque(starts), 0
    while queue and seen < MAX_PAGES:
        target = queue.popleft()
        key = f"{prefix} GET {target}"
        if key in answers:
            continue
        answers[key] = answer = fetch(base_url, "GET", target)
        seen += 1
        queue.extend(html.unescape(href) for href in re.findall(r'href="(/[^"]*)"', answer["body"]))


def record(path: str) -> None:
    import gymnasium as gym

    import agentgym_envs  # noqa: F401  (registers the ids)
    from agentgym_envs.webarena.server import SiteServer
    from agentgym_envs.webarena.sites import SITES, app_class
    from agentgym_envs.webshop.engine import PageState
    from agentgym_envs.webshop.site import ShopSite

    answers: dict[str, Any] = {}
    for site in SITES:
        server = SiteServer(app_class(site)())
        try:
            crawl(server.base_url, ["/", *EXTRA_PAGES], answers, site)
            posts = [(path, form) for name, path, form in POSTS if name == site]
            if site == "gitlab":
                namespace, name = server.app.query("SELECT namespace, name FROM projects ORDER BY id")[0]
                posts += [(f"/{namespace}/{name}{path}", form) for path, form in GITLAB_POSTS]
            for target, form in posts:
                answers[f"{site} POST {target} {json.dumps(form, sort_keys=True)}"] = answer = \
                    fetch(server.base_url, "POST", target, form)
                if answer["location"]:  # the page the form leads to, after the change
                    answers[f"{site} POST {target} -> GET {answer['location']}"] = \
                        fetch(server.base_url, "GET", answer["location"])
            answers[f"{site} PUT /"] = fetch(server.base_url, "PUT", "/")
        finally:
            server.shutdown()

    env = gym.make("AgentGym/WebShop-v0")
    env.reset(seed=0, options={"item_id": 0})
    shop_env = env.unwrapped
    site = ShopSite()
    try:
        session = site.open_session(shop_env.shop, shop_env._goal)
        start = site.url(session, PageState())[len(site.base_url):]
        results = f"/s/{session}/results?k=shoes"
        crawl(site.base_url, [start, results, f"{results}&p=2", f"/s/{session}/search/", "/", "/s/nope/search",
                              f"/s/{session}/nope", f"/s/{session}/item?a=NOPE", f"/s/{session}/results?p=x"],
              answers, "webshop")
        answers["webshop POST start"] = fetch(site.base_url, "POST", start, {})
        site.close_session(session)
        answers["webshop GET ended session"] = fetch(site.base_url, "GET", start)
    finally:
        site.shutdown()
        env.close()
    canonical = json.loads(json.dumps(answers).replace(session, "<session>"))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(canonical, handle, indent=0, sort_keys=True)
    print(f"{len(canonical)} answers recorded to {path}")


def compare(old_path: str, new_path: str) -> int:
    with open(old_path, encoding="utf-8") as handle:
        old = json.load(handle)
    with open(new_path, encoding="utf-8") as handle:
        new = json.load(handle)
    differing = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    for key in differing:
        before, after = old.get(key) or {}, new.get(key) or {}
        fields = [field for field in ("status", "location", "type", "body") if before.get(field) != after.get(field)]
        print(f"DIFFERS {key}: {', '.join(fields) or 'missing on one side'}")
        for field in fields:
            print(f"    old {field}: {str(before.get(field))[:300]!r}")
            print(f"    new {field}: {str(after.get(field))[:300]!r}")
    print(f"{len(old)} old answers, {len(new)} new, {len(differing)} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["record"]:
        record(sys.argv[2])
    elif sys.argv[1:2] == ["compare"]:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
