"""WebShop as a text Gymnasium env, in two modes with the same tasks and rewards.

* ``mode="text"`` (``AgentGym/WebShop-v0``): the shop runs in-process; an observation is the page
  as WebShop's text view (segments joined by `` [SEP] ``). About a millisecond per step.
* ``mode="browser"`` (``AgentGym/WebShop-Browser-v0``, or ``gym.make("AgentGym/WebShop-v0",
  mode="browser")``): the same pages are served as HTML on 127.0.0.1 and a headless Chromium,
  driven by Selenium, types the searches and clicks the buttons; the observation is read back from
  the rendered page. One browser per env, fresh browser state per episode, restarted if it dies,
  released by ``close()``.

Item id ``i`` is goal ``i`` of the catalogue (ids 0-199 = test). The default catalogue is the
generated one (``catalogue.py``); pass ``products_file=`` and ``attributes_file=`` (plus optionally
``reviews_file=``) to play on the original WebShop data instead, with the goals AgentGym's server plays
(WebShop's synthetic goals over the first 1000 products, shuffled by seed 233); ``human_goals=True`` with
``instructions_file=`` plays the human instructions in file order instead. Then the first
``min(200, n // 2)`` goals are the test split and the rest train.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym_envs.core import MissingExtraError, Outcome, ParsedAction, Start, TextEnv, parse_react, require
from agentgym_envs.core.parsers import agentgym_react_action
from agentgym_envs.webshop.catalogue import N_TEST, Catalogue, Goal, cached_webshop_data, default_catalogue
from agentgym_envs.webshop.engine import (
    SEP,
    Command,
    Oracle,
    PageState,
    Shop,
    check_command,
    describe_available,
    parse_command,
)
from agentgym_envs.webshop.reward import is_success

MODES = ("text", "browser")

#: AgentGym's WebShop rules (the default instruction), in our words.
INSTRUCTION = (
    "You are shopping on the web.\n"
    "I will tell you what to do, and you have to follow those instructions.\n"
    "Each round I give you an observation and a list of available actions; answer with an action based on "
    "the state and the instruction.\n"
    "You can use the search action when search is available.\n"
    "You can click one of the buttons among the clickables.\n"
    "An action has one of these forms:\n"
    "search[keywords]\n"
    "click[value]\n"
    "An invalid action does nothing.\n"
    "The search keywords are your choice, but the value you click must be one of the available actions.\n"
    "Design your search keywords carefully.\n"
    "Answer in this format:\n"
    "\n"
    "Thought:\n"
    "I think ... \n"
    "\n"
    "Action: \n"
    "click[something]"
)

#: Our instruction (``detailed_instruction=True``): the page format, the buttons and the reward.
DETAILED_INSTRUCTION = (
    "You are shopping in an online store for a customer. Their request is shown at the top of every page: "
    "a kind of product, the features it must have, the options to choose (such as color or size) and a "
    "price limit. Find a product that fits, choose its options and buy it.\n"
    "\n"
    "Each observation is the current web page as text, its parts separated by [SEP].\n"
    "\n"
    "Actions:\n"
    "- search[keywords]: type keywords into the search bar and search. Only the search page has a search "
    "bar.\n"
    "- click[value]: click a button or link shown on the page, written as it appears: a product id from "
    "the results, an option value, next >, < prev, back to search, description, features, reviews or buy "
    "now.\n"
    "\n"
    "Clicking buy now on a product page ends the episode. Your reward, from 0 to 1, measures how well the "
    "product you bought matches the request (product type, features, chosen options, price); choose every "
    "option the request names before buying.\n"
    "\n"
    "Every turn, answer in this format and give exactly one action:\n"
    "Thought:\n"
    "<your reasoning>\n"
    "\n"
    "Action:\n"
    "<the action>"
)


@dataclass(frozen=True)
class _Page:
    """What the agent sees now, in either mode."""

    state: PageState
    text: str
    has_search_bar: bool
    clickables: list[str]
    reward: float | None = None
    url: str = ""


_SHOPS: dict[str, Shop] = {}


def shop_for(catalogue: Catalogue) -> Shop:
    """The process-wide shop of a catalogue (search index built or loaded once)."""
    shop = _SHOPS.get(catalogue.key)
    if shop is None:
        from agentgym_envs.webshop.search import product_search

        shop = _SHOPS[catalogue.key] = Shop(catalogue, product_search(catalogue))
    return shop


# Reads the observation back from the rendered page; null while the old page is still shown or
# the new one is loading (the old window carries a flag set just before the action).
_READ_PAGE_JS = """
if (window.__agentgymStale || document.readyState !== 'complete') return null;
const main = document.getElementById('ws-page');
if (!main) return null;
const norm = (t) => t.replace(/\\s+/g, ' ').trim();
const score = document.querySelector('[data-score]');
return {
  segments: Array.from(document.querySelectorAll('[data-seg]')).map((e) => norm(e.textContent)),
  clicks: Array.from(document.querySelectorAll('[data-click]')).map((e) => e.getAttribute('data-click')),
  search: !!document.getElementById('search-input'),
  score: score ? score.getAttribute('data-score') : null,
  url: location.href,
};
"""
_PREPARE_JS = """
window.__agentgymStale = true;
if (arguments[0] === 'search') {
  const box = document.getElementById('search-input');
  if (box) box.value = '';
  return box;
}
const wanted = arguments[1];
const buttons = Array.from(document.querySelectorAll('[data-click]'));
return buttons.find((e) => e.getAttribute('data-click') === wanted) || null;
"""


class WebShopEnv(TextEnv):
    """Find and buy the product a customer asks for (WebShop, Yao et al. 2022).

    Actions:
        ``search[keywords]`` and ``click[button]``; the clickable values are in ``info["available_actions"]``.
        Read as AgentGym's client reads a response: the text after the last ``Action:``; without one, the
        whole response if it holds ``search[`` or ``click[``, else the empty action (``detailed_instruction=True``:
        our ReAct parser).

    Rewards:
        At ``click[Buy Now]``, WebShop's ``goal.py`` score in [0, 1] of the product bought (type, attributes,
        options and price against the goal), and the episode ends; 0 before.
    """

    family = "webshop"
    acknowledgement = "Ok."  # AgentGym's WebShop conversations answer the instruction with this

    def __init__(
        self,
        task_id: str,
        render_mode: str | None = None,
        mode: str = "text",
        products_file: str | os.PathLike[str] | None = None,
        instructions_file: str | os.PathLike[str] | None = None,
        attributes_file: str | os.PathLike[str] | None = None,
        reviews_file: str | os.PathLike[str] | None = None,
        browser_config: Any = None,
        detailed_instruction: bool = False,
        exact_sizes: bool = False,
        match_option_values: bool = False,
        human_goals: bool = False,
    ):
        """``detailed_instruction=True`` explains the page format, the buttons and the reward
        instead of AgentGym's shorter instruction. The reward is WebShop's as AgentGym's server
        computes it: a goal's options are matched as ``(name, value)`` pairs, as its synthetic goals
        are. ``match_option_values=True`` matches the chosen values to the goal's values instead (as
        WebShop's human goals are scored: "12 fl oz" then passes for "16 fl oz", and a colour such as
        "dark wash" always matches itself); ``exact_sizes=True`` matches values too, a chosen size
        only to the very size asked for (so "3 piece set" does not pass for "2 piece set").
        With ``products_file=``, the goals are AgentGym's (WebShop's synthetic goals from ``attributes_file``,
        as its server makes them); ``human_goals=True``: the human instructions of ``instructions_file`` in
        file order, our earlier reading."""
        super().__init__(task_id, render_mode=render_mode)
        self.detailed_instruction = detailed_instruction
        self.exact_sizes = bool(exact_sizes)
        self.match_option_values = bool(match_option_values)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if importlib.util.find_spec("bm25s") is None:
            raise MissingExtraError(
                "WebShop needs the Python module 'bm25s'. Install it with: pip install 'agentgym-rl[webshop]'"
            )
        self.mode = mode
        self._browser_config = browser_config
        if mode == "browser":
            for module in ("selenium", "starlette", "uvicorn"):  # the browser, and the site it is pointed at
                require(module, extra="web")
            from agentgym_envs.web.browser import require_browser

            require_browser()
        needed = ("instructions_file", instructions_file) if human_goals else ("attributes_file", attributes_file)
        if products_file is None and (instructions_file is not None or attributes_file is not None):
            raise ValueError("the original WebShop data needs products_file too")
        if products_file is not None and needed[1] is None:
            raise ValueError(f"pass products_file with {needed[0]} (the original WebShop data"
                             f"{'; human_goals=True reads the human instructions' if human_goals else ''})")
        self.human_goals = bool(human_goals)
        self._data_files = (
            (products_file, instructions_file, attributes_file, reviews_file) if products_file is not None else None
        )
        self._catalogue: Catalogue | None = None
        if self._data_files is not None:
            count = len(self.catalogue.goals)
            test = list(range(min(N_TEST, max(1, count // 2))))
            self._splits = {"train": list(range(len(test), count)), "test": test}
            self._split_of = {item: name for name, items in self._splits.items() for item in items}
        self._shop: Shop | None = None
        self._goal: Goal | None = None
        self._oracle: Oracle | None = None
        self._page: _Page | None = None
        self._browser: Any = None
        self._site: Any = None
        self._session: str | None = None

    # ---- catalogue ------------------------------------------------------------------------------
    @property
    def catalogue(self) -> Catalogue:
        """The default generated catalogue, or the original data files' (loaded once per process)."""
        if self._catalogue is None:
            files = self._data_files
            self._catalogue = (cached_webshop_data(*files, human_goals=self.human_goals) if files is not None
                               else default_catalogue())
        return self._catalogue

    @property
    def shop(self) -> Shop:
        """The catalogue's shared shop, scored the way this env was made (exact sizes, option values)."""
        if self._shop is None:
            self._shop = shop_for(self.catalogue).scoring(self.exact_sizes, self.match_option_values)
        return self._shop

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` is an item: an index of the given data's goals, else one of the split items."""
        count = len(self.catalogue.goals) if self._data_files is not None else None
        if count is None:
            return super().accepts_item(item_id)
        return 0 <= item_id < count

    # ---- episode --------------------------------------------------------------------------------
    #: Wall-clock bound of a browser-mode step (seconds); see ``Browser.time_limit``.
    browser_step_timeout: float = 60.0

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        goals = self.catalogue.goals
        if not 0 <= item_id < len(goals):
            raise ValueError(f"item {item_id} is not a goal of this catalogue ({len(goals)} goals)")
        self._goal = goals[item_id]
        self._oracle = Oracle(self.shop, self._goal)
        if self.mode == "text":
            self._page = self._text_page(PageState())
            restarted = False
        else:
            self._page, restarted = self._browser_start()
        info: dict[str, Any] = {"mode": self.mode, "page": self._page.state.kind}
        if restarted:
            info["browser_restarted"] = True
        return Start(DETAILED_INSTRUCTION if self.detailed_instruction else INSTRUCTION, self._page.text, info)

    def _parse(self, response: str) -> ParsedAction:
        """As AgentGym's WebShop client: the text after the last ``Action:``; without one, the whole response
        when it holds ``search[`` or ``click[``, else the empty action (``detailed_instruction=True``: our
        ReAct parser, which takes any bare one-line action and explains a missing one)."""
        if self.detailed_instruction:
            return parse_react(response)
        return ParsedAction(agentgym_react_action(response))

    def _act(self, action: str) -> Outcome:
        assert self._page is not None and self._goal is not None, "call reset() first"
        page = self._page
        command = parse_command(action)
        error = command if isinstance(command, str) else check_command(command, page.has_search_bar, page.clickables)
        if error is not None:
            return Outcome(
                f"{error} {describe_available(page.has_search_bar, page.clickables)}",
                valid=False,
                info={"mode": self.mode, "page": page.state.kind},
            )
        restarted = False
        if self.mode == "text":
            self._page = self._text_page(self.shop.apply(self.shop.view(page.state, self._goal), command))
        else:
            self._page, restarted = self._browser_act(command)
        state = self._page.state
        info: dict[str, Any] = {"mode": self.mode, "page": state.kind}
        if restarted:
            info["browser_restarted"] = True
        if state.kind != "done":
            return Outcome(self._page.text, info=info)
        reward = float(self._page.reward or 0.0)
        info.update(purchased=state.asin, purchased_options=state.chosen)
        return Outcome(self._page.text, progress=reward, score=reward, done=True, success=is_success(reward), info=info)

    def _text_page(self, state: PageState) -> _Page:
        assert self._goal is not None
        view = self.shop.view(state, self._goal)
        reward = view.reward.reward if view.reward is not None else None
        return _Page(state, view.text, view.has_search_bar, view.clickables, reward)

    # ---- agents ---------------------------------------------------------------------------------
    def available_actions(self) -> list[str] | None:
        """The actions of the current page: ``search[<keywords>]`` where there is a search bar, and its clicks."""
        if self._page is None:
            return None
        return (["search[<keywords>]"] if self._page.has_search_bar else []) + [
            f"click[{value}]" for value in self._page.clickables
        ]

    def oracle_action(self) -> str:
        """The expert's next step on the current page, with its reason."""
        assert self._page is not None and self._oracle is not None, "call reset() first"
        thought, action = self._oracle.act(self._page.state)
        return f"Thought:\n{thought}\n\nAction:\n{action}"

    def random_action(self, rng: np.random.Generator) -> str:
        """A search with a few words of the request on the search page, else a random button."""
        assert self._page is not None and self._goal is not None, "call reset() first"
        if self._page.has_search_bar or not self._page.clickables:
            words = [w for w in re.findall(r"[a-z]+", self._goal.instruction.lower()) if len(w) > 3]
            count = min(len(words), int(rng.integers(2, 5)))
            picked = [words[int(i)] for i in rng.choice(len(words), size=count, replace=False)] if words else ["shoes"]
            return f"search[{' '.join(picked)}]"
        return f"click[{self._page.clickables[int(rng.integers(len(self._page.clickables)))]}]"

    # ---- browser mode ---------------------------------------------------------------------------
    def _browser_start(self) -> tuple[_Page, bool]:
        from agentgym_envs.web.browser import Browser, BrowserConfig
        from agentgym_envs.webshop.site import acquire_site

        if self._browser is None:
            config = self._browser_config
            self._browser = Browser(BrowserConfig(**config) if isinstance(config, dict) else config)
        if self._site is None:
            self._site = acquire_site()
        assert self._goal is not None
        self._site.close_session(self._session)
        self._session = self._site.open_session(self.shop, self._goal)
        self._browser.new_episode(origins=[self._site.base_url])
        url = self._site.url(self._session, PageState())
        return self._browser.call(lambda driver: self._load(driver, url))

    def _load(self, driver: Any, url: str) -> _Page:
        driver.get(url)
        return self._read_page()

    def _read_page(self) -> _Page:
        from agentgym_envs.webshop.site import path_to_state

        data = self._browser.wait_until(lambda driver: driver.execute_script(_READ_PAGE_JS))
        _, state = path_to_state(data["url"])
        score = data.get("score")
        return _Page(
            state,
            SEP.join(data["segments"]),
            bool(data["search"]),
            list(dict.fromkeys(data["clicks"])),
            float(score) if score is not None else None,
            data["url"],
        )

    def _browser_act(self, command: Command) -> tuple[_Page, bool]:
        url = self._page.url if self._page is not None else ""

        def perform(driver: Any) -> _Page:
            from selenium.webdriver.common.keys import Keys

            # one round trip marks the page as old and finds the search box or the button
            target = driver.execute_script(_PREPARE_JS, command.verb, command.argument)
            if target is None:
                raise RuntimeError(
                    f"{command.verb}[{command.argument}] found nothing to act on at {driver.current_url}"
                )
            if command.verb == "search":
                if all(ord(ch) <= 0xFFFF for ch in command.argument):
                    target.send_keys(command.argument + Keys.ENTER)
                else:  # chromedriver types only the Basic Multilingual Plane
                    driver.execute_script("arguments[0].value = arguments[1];", target, command.argument)
                    target.send_keys(Keys.ENTER)
            else:
                target.click()
            return self._read_page()

        with self._browser.time_limit(self.browser_step_timeout):  # a frozen Chromium is killed and relaunched
            return self._browser.call(perform, recover=lambda: self._browser.driver.get(url))

    def _release(self) -> None:
        if self._browser is not None:
            self._browser.close()
            self._browser = None
        if self._site is not None:
            from agentgym_envs.webshop.site import release_site

            self._site.close_session(self._session)
            release_site(self._site)
            self._site = None
        self._session = None
