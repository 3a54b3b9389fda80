"""The five WebArena sites: config names, URL placeholders, display addresses and embedded apps.

Task configs name sites as WebArena does (``shopping``, ``shopping_admin``, ``map``, ``gitlab``,
``reddit``) and write URLs with WebArena's placeholders (``__SHOPPING__/...``). An embedded site
runs on a free loopback port, but the agent sees it at WebArena's canonical address
(``http://localhost:7770`` for the shop, ...), so observations do not depend on the port and an
agent trained on real WebArena sees familiar URLs; ``goto`` maps those addresses back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class SiteInfo:
    key: str
    subtask: str
    placeholder: str
    display_url: str
    env_var: str
    app: str  # "module:Class" of the embedded app


SITES: dict[str, SiteInfo] = {
    info.key: info
    for info in (
        SiteInfo("shopping", "Shopping", "__SHOPPING__", "http://localhost:7770", "SHOPPING", "shopping:ShoppingSite"),
        SiteInfo("shopping_admin", "CMS", "__SHOPPING_ADMIN__", "http://localhost:7780", "SHOPPING_ADMIN",
                 "shopping_admin:ShoppingAdminSite"),
        SiteInfo("map", "Maps", "__MAP__", "http://localhost:3000", "MAP", "maps:MapsSite"),
        SiteInfo("gitlab", "GitLab", "__GITLAB__", "http://localhost:8023", "GITLAB", "gitlab:GitLabSite"),
        SiteInfo("reddit", "Reddit", "__REDDIT__", "http://localhost:9999", "REDDIT", "reddit:RedditSite"),
    )
}
SUBTASK_SITE = {info.subtask: info.key for info in SITES.values()}
#: Environment variable prefix for the real-deployment base URLs (``WEBARENA_SHOPPING=http://...``).
ENV_PREFIX = "WEBARENA_"


def app_class(site: str) -> type:
    """The ``SiteApp`` subclass of a site key (imported on demand, so a family that needs no site loads none)."""
    import importlib

    module, name = SITES[site].app.split(":")
    return getattr(importlib.import_module(f"agentgym_envs.webarena.{module}"), name)


def base_urls_from_environment() -> dict[str, str]:
    """Base URLs of real deployments from ``$WEBARENA_SHOPPING`` etc. (WebArena's own ``$SHOPPING`` also works)."""
    found = {}
    for key, info in SITES.items():
        value = os.environ.get(ENV_PREFIX + info.env_var) or os.environ.get(info.env_var)
        if value:
            found[key] = value.rstrip("/")
    return found
