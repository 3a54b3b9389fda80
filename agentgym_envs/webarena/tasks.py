"""WebArena ids: one per site and one over all five (50 test tasks: 15/15/10/5/5, 15 turns).

Light on purpose (no browser or site imports). The specs count as installed only when Selenium
and Chromium are both present, so the registry-derived tests skip them with the fixing command.
"""

from agentgym_envs.core.tasks import family_tasks
from agentgym_envs.web import BrowserTaskSpec

#: AgentGym-RL's WebArena turn cap.
MAX_TURNS = 15

_SITES = (
    ("Shopping", "an online store (One Stop Market): search, product details, cart, checkout, order history"),
    ("CMS", "the store's admin panel: products, orders, customers, reviews, reports"),
    ("Maps", "a map of Pittsburgh: place search, coordinates, directions by car, bike or foot"),
    ("GitLab", "a code-hosting site: projects, commits, issues, members, stars"),
    ("Reddit", "a forum (Postmill): forums, posts, comments, votes, user profiles"),
)

TASKS = family_tasks(
    "WebArena", "webarena", "web navigation", "WebArenaEnv", MAX_TURNS, extra="web",
    requires=("selenium", "starlette", "uvicorn"), spec_class=BrowserTaskSpec,
    subtasks={n: f"WebArena on {t}" for n, t in _SITES},
    description="WebArena tasks over all five sites, in headless Chromium with an accessibility-tree view",
    weight=8,  # a Chromium and five site servers
    foreign_action="Let's click it.\n```click [1234]```",
    protocol="agentgym_envs.webarena.protocol:PROTOCOL",
)
