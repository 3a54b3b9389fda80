"""WebShop ids: the text mode and the browser mode of the same shop (200 test items, as in AgentGym).

Both ids draw from the same goals and score purchases with the same reward. The browser id is a
separate id (not only ``gym.make("AgentGym/WebShop-v0", mode="browser")``, which works too) so a
training row or an eval config can name it, and so the registry-derived checks run on it; its spec
counts as installed only when Chromium is present.
"""

from agentgym_envs.core.tasks import family_tasks
from agentgym_envs.web import BrowserTaskSpec

#: WebShop episodes are short (search, open, options, buy); 15 turns leave room to page and go back.
MAX_TURNS = 15
#: What both ids declare besides their specs: a typical action, which every other family's env must reject,
#: and the AgentGym-protocol hook (WebShop's client reads /create's bare env number).
_FAMILY_FIELDS = dict(foreign_action="Thought: search.\nAction: search[red running shoes under 50 dollars]",
                      protocol="agentgym_envs.webshop.protocol:PROTOCOL")

TASKS = [
    *family_tasks("WebShop", "webshop", "web shopping", "WebShopEnv", MAX_TURNS, requires=("bm25s",), **_FAMILY_FIELDS,
                  description="find and buy the requested product in a 12k-product shop (text pages)"),
    *family_tasks("WebShop-Browser", "webshop", "web shopping", "WebShopEnv", MAX_TURNS, extra="webshop,web",
                  requires=("bm25s", "selenium", "starlette", "uvicorn"), kwargs={"mode": "browser"},
                  spec_class=BrowserTaskSpec, **_FAMILY_FIELDS,
                  description="the same shop served on 127.0.0.1 and driven through headless Chromium"),
]
