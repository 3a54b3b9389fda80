"""``WebArenaEnv``: WebArena tasks in headless Chromium, observed through the accessibility tree.

Two targets, one env:

* embedded (default): the five sites of ``agentgym_envs/webarena`` are served on loopback by the
  env itself (started lazily, one server per site and env, stopped by ``close()``); every episode
  gets fresh site databases, and the 50 test tasks (15 Shopping, 15 CMS, 10 Maps, 5 GitLab,
  5 Reddit) plus 340 train tasks come from ``catalog.py``, each with a scripted solution;
* real WebArena: ``gym.make(id, config_path="webarena/config_files", base_urls={...})`` (or
  ``$WEBARENA_SHOPPING`` ... for the URLs) plays WebArena's own task configs against your
  deployments with the same evaluators (``db_state`` checks need the embedded sites).

One Chromium per env, taken from the process's ``BROWSER_POOL`` and handed back (wiped) by
``close()`` so the next env skips the launch; or a ``browser=`` shared by envs that step one at a
time. Each episode starts from one blank tab with cookies, cache and site storage wiped. Actions go inside triple
backticks (see ``actions.py``); a bad action, a missing element, a page that does not load in
time or a URL outside the task's sites gives feedback, never an exception or a hang. Reward: the
WebArena evaluators' 0/1 score at ``stop``; at the turn cap the final state is scored (answer "").
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from agentgym_envs.core import Outcome, ParsedAction, Start, TextEnv, parse_backtick, require
from agentgym_envs.core.judge import JudgeUnavailable, LLMJudge
from agentgym_envs.webarena.actions import ACTION_HELP, Command, parse_command, resolve_script_step
from agentgym_envs.webarena.evaluation import evaluate, fuzzy_match
from agentgym_envs.webarena.observation import TEXT_ROLES, Tree, render_tree
from agentgym_envs.webarena.sites import ENV_PREFIX, SITES, SUBTASK_SITE, app_class, base_urls_from_environment

INSTRUCTION = f"""You are an autonomous intelligent agent tasked with navigating a web browser. You will be given \
web-based tasks. These tasks will be accomplished through the use of specific actions you can issue.

Here's the information you'll have:
The user's objective: This is the task you're trying to complete.
The current web page's accessibility tree: This is a simplified representation of the webpage, providing key \
information. Each element has an id in brackets.
The current web page's URL: This is the page you're currently navigating.
The open tabs: These are the tabs you have open.
The previous action: This is the action you just performed.

The actions you can perform fall into several categories:

Page Operation Actions:
`click [id]`: This action clicks on an element with a specific id on the webpage.
`type [id] [content] [press_enter_after=0|1]`: Use this to type the content into the field with id, replacing what it \
holds. By default, the "Enter" key is pressed after typing unless press_enter_after is set to 0.
`hover [id]`: Hover over an element with id.
`press [key_comb]`: Simulates the pressing of a key combination on the keyboard (e.g., Control+v).
`scroll [direction=down|up]`: Scroll the page up or down.

Tab Management Actions:
`new_tab`: Open a new, empty browser tab.
`tab_focus [tab_index]`: Switch the browser's focus to a specific tab using its index.
`close_tab`: Close the currently active tab.

URL Navigation Actions:
`goto [url]`: Navigate to a specific URL.
`go_back`: Navigate to the previously viewed page.
`go_forward`: Navigate to the next page (if a previous 'go_back' action was performed).

Completion Action:
`stop [answer]`: Issue this action when you believe the task is complete. If the objective is to find a text-based \
answer, provide the answer in the bracket. If you believe the task is impossible to complete, provide the answer as \
"N/A" in the bracket.

To be successful, it is very important to follow the following rules:
1. You should only issue an action that is valid given the current observation.
2. You should only issue one action at a time.
3. Generate the action in the correct format: put the action inside triple backticks, for example "In summary, the \
next action I will perform is ```click [1234]```".
4. Issue the stop action when you think you have achieved the objective. Don't generate anything after stop.

Valid actions: {ACTION_HELP}."""

_KEYS = {"enter": "ENTER", "return": "ENTER", "tab": "TAB", "escape": "ESCAPE", "esc": "ESCAPE",
         "backspace": "BACKSPACE",
         "delete": "DELETE", "arrowup": "ARROW_UP", "arrowdown": "ARROW_DOWN", "arrowleft": "ARROW_LEFT",
         "arrowright": "ARROW_RIGHT", "pageup": "PAGE_UP", "pagedown": "PAGE_DOWN", "home": "HOME", "end": "END",
         "space": "SPACE", "control": "CONTROL", "ctrl": "CONTROL", "shift": "SHIFT", "alt": "ALT", "meta": "COMMAND"}
#: How long after a click/type/press to watch for a navigation started by page scripts. Form
#: submissions and link clicks are seen directly (their events), so they never depend on this.
NAVIGATION_SETTLE_SECONDS = 0.03
#: The most characters one ``type`` enters. Each key is a browser round trip whose cost grows with the
#: field's length (15,000 characters took 45 s); WebArena's answers and queries are far shorter. Longer
#: text is cut here and the observation says so.
MAX_TYPED_CHARS = 2_000
_MARK_JS = """
window.__agentgymDoc = arguments[0]; window.__agentgymLeaving = false;
if (!window.__agentgymHooked) {
  window.__agentgymHooked = true;
  const leave = () => { window.__agentgymLeaving = true; };
  window.addEventListener('beforeunload', leave);
  document.addEventListener('submit', e => { if (!e.defaultPrevented && !(e.target.target === '_blank')) leave(); });
  document.addEventListener('click', e => {
    const a = e.target.closest ? e.target.closest('a[href]') : null;
    const href = a ? a.getAttribute('href') : '';
    if (a && !e.defaultPrevented && a.target !== '_blank' && !href.startsWith('#') && !href.startsWith('javascript:')) \
leave();
  });
}
"""
_PROBE_JS = "return [window.__agentgymDoc === arguments[0], !!window.__agentgymLeaving];"
_SELECT_OPTION_JS = """
const select = arguments[0], wanted = arguments[1].trim().toLowerCase();
for (const option of select.options) {
  if (option.text.trim().toLowerCase() === wanted || option.value.toLowerCase() === wanted) {
    select.value = option.value;
    select.dispatchEvent(new Event('input', {bubbles: true}));
    select.dispatchEvent(new Event('change', {bubbles: true}));
    return null;
  }
}
return Array.from(select.options).map(o => o.text.trim());
"""


class WebArenaEnv(TextEnv):
    """A WebArena task in headless Chromium, observed through the accessibility tree.

    Actions:
        WebArena's actions inside triple backticks: ``click [id]``, ``type [id] [text] [0|1]``, ``hover [id]``,
        ``press [keys]``, ``scroll [up|down]``, ``new_tab``, ``tab_focus [n]``, ``close_tab``, ``goto [url]``,
        ``go_back``, ``go_forward``, ``stop [answer]``.

    Rewards:
        The WebArena evaluators' 0/1 score at ``stop [answer]``; on the last turn of the budget the episode runs
        under (its ``TimeLimit``), without ``stop``, the final state is scored with an empty answer.
    """

    family = "webarena"
    acknowledgement = "Ok."  # AgentGym's WebArena conversations answer the instruction with this
    max_observation_length = 64_000

    def __init__(
        self,
        task_id: str,
        render_mode: str | None = None,
        config_path: str | os.PathLike[str] | None = None,
        base_urls: dict[str, str] | None = None,
        browser: Any = None,
        browser_config: Any = None,
        page_load_timeout: float = 10.0,
        judge: LLMJudge | dict[str, Any] | None = None,
        step_timeout: float = 60.0,
        lenient_matching: bool = False,
    ):
        """``judge`` (off by default): an ``LLMJudge`` or its fields ({"base_url", "model", ...}) that
        grades ``fuzzy_match`` string answers as WebArena does, instead of the fixed offline rule.
        ``lenient_matching=True``: the project's forgiving string and URL checks instead of
        WebArena's (see ``evaluation.py``)."""
        for module in ("selenium", "starlette", "uvicorn"):  # the browser, and the sites it is pointed at
            require(module, extra="web")
        from agentgym_envs.web.browser import require_browser

        require_browser()
        super().__init__(task_id, render_mode=render_mode)
        self._site_keys = [SUBTASK_SITE[sub] for sub in self.task.subtasks]
        self.page_load_timeout = float(page_load_timeout)
        self.judge = LLMJudge.of(judge)
        self.lenient_matching = bool(lenient_matching)
        #: wall-clock bound of a step (or reset): past it the browser is killed, relaunched and the page reloaded
        self.step_timeout = float(step_timeout)
        self._external_configs: dict[int, dict[str, Any]] | None = None
        self._real_bases: dict[str, str] = {}
        if config_path is not None:
            self._real_bases = {**base_urls_from_environment(),
                                **{k: v.rstrip("/") for k, v in (base_urls or {}).items()}}
            self._external_configs = load_webarena_configs(config_path, self._site_keys)
            if not self._external_configs:
                raise ValueError(f"no WebArena task config under {config_path} uses only the sites {self._site_keys}")
            needed = {site for config in self._external_configs.values() for site in config["sites"] if site in SITES}
            missing = sorted(needed - set(self._real_bases))
            if missing:
                names = ", ".join(f"${'WEBARENA_' + SITES[m].env_var}" for m in missing)
                raise ValueError(f"real WebArena tasks need base URLs for {missing}: pass base_urls= or set {names}")
            ids = sorted(self._external_configs)
            self._splits = {"train": [], "test": ids}
            self._split_of = {item: "test" for item in ids}
            self.default_split = "test"
        elif base_urls:
            raise ValueError("base_urls= targets real WebArena deployments; pass config_path= (WebArena's task "
                             "configs) too")
        self._browser = browser
        self._owns_browser = browser is None
        self._browser_config = browser_config
        self._servers: dict[str, Any] = {}
        self._config: dict[str, Any] = {}
        self._tree = Tree([])
        self._observation = ""
        self._previous_action = "None"
        self._solution_step = 0
        self._oracle_expected: str | None = None
        self._last_url = ""

    # ---- sites ----------------------------------------------------------------------------------
    @property
    def embedded(self) -> bool:
        """Whether the tasks run on the embedded sites (not on WebArena configs and real deployments)."""
        return self._external_configs is None

    def task_config(self, item_id: int) -> dict[str, Any]:
        """The WebArena config of one item: the embedded catalogue's, or the one loaded from the configs given.

        Args:
            item_id: the item's id.

        Returns:
            The task's config (intent, start URL, evaluation, and for embedded tasks the scripted solution).
        """
        if self._external_configs is not None:
            return self._external_configs[item_id]
        from agentgym_envs.webarena.catalog import embedded_tasks

        return embedded_tasks()[item_id]

    def _base(self, site: str) -> str:
        """The real base URL of a site (starting its embedded server on first use)."""
        if not self.embedded:
            return self._real_bases[site]
        if site not in self._servers:
            from agentgym_envs.webarena.server import SiteServer

            self._servers[site] = SiteServer(app_class(site)())
        return self._servers[site].base_url

    def _display_pairs(self) -> list[tuple[str, str]]:
        if not self.embedded:
            return []
        return [(server.base_url, SITES[site].display_url) for site, server in self._servers.items()]

    def display_url(self, address: str) -> str:
        """``address`` as the agent sees it: the embedded servers' loopback bases shown as the sites' names."""
        for real, shown in self._display_pairs():
            address = address.replace(real, shown)
        return address

    def real_url(self, address: str) -> str:
        """A URL as the agent or a config writes it (placeholder, display address) -> the address to load."""
        address = address.strip()
        for site, info in SITES.items():
            if info.placeholder in address:
                known = self.embedded or site in self._real_bases
                address = address.replace(info.placeholder, self._base(site) if known else info.placeholder)
            if self.embedded and (address == info.display_url or address.startswith(info.display_url + "/")
                                  or address.startswith(info.display_url + "?")):
                address = self._base(site) + address[len(info.display_url):]
        return address

    def _allowed(self, address: str) -> bool:
        if address == "about:blank":
            return True
        bases = [s.base_url for s in self._servers.values()] if self.embedded else list(self._real_bases.values())
        return any(address == b or address.startswith(b + "/") or address.startswith(b + "?") for b in bases)

    # ---- browser --------------------------------------------------------------------------------
    @property
    def browser(self) -> Any:
        """The env's browser, taken from the process's pool on first use (closed to other hosts)."""
        if self._browser is None:
            from agentgym_envs.web.browser import BROWSER_POOL, BrowserConfig

            config = self._browser_config
            if isinstance(config, dict):
                config = BrowserConfig(**config)
            if config is None:
                # closed network (web.browser.chromium_arguments); real deployments' hosts stay reachable
                hosts = tuple(sorted({urlsplit(base).hostname or "" for base in self._real_bases.values()} - {""}))
                config = BrowserConfig(page_load_timeout=self.page_load_timeout, allowed_hosts=hosts)
            self._browser = BROWSER_POOL.acquire(config)
        return self._browser

    def _driver_call(self, action, recover_url: str | None = None) -> tuple[Any, bool]:
        def recover() -> None:
            """After a relaunch: the page again, and its tree (the ids are the same, the new
            browser's node handles are not), so the retried action finds its element."""
            self._load(recover_url)
            self._tree = render_tree(self.browser.accessibility_nodes())

        return self.browser.call(action, recover if recover_url else None)

    def _load(self, address: str) -> str | None:
        """Open ``address`` in the current tab; a note if it did not finish loading in time, ``_Unreachable``
        if nothing answers there (Chromium's ``net::ERR_...``)."""
        from selenium.common.exceptions import TimeoutException, WebDriverException

        driver = self.browser.driver
        driver.set_page_load_timeout(self.page_load_timeout)
        try:
            driver.get(address)
        except TimeoutException:
            return self._stop_loading()
        except WebDriverException as error:
            reason = _NETWORK_ERROR.search(error.msg or "")
            if reason is None or not self.browser.is_alive():
                raise
            raise _Unreachable(address, reason.group(0)) from None
        return None

    def _unreachable_message(self, error: _Unreachable) -> str:
        """One line for a start page that does not answer: which site, where, and what to do."""
        site = next((key for key, base in self._real_bases.items() if error.address.startswith(base)), None)
        if self.embedded or site is None:
            return f"the page {self.display_url(error.address)} cannot be reached ({error.reason})"
        variable = ENV_PREFIX + SITES[site].env_var if site in SITES else "the base URL"
        return (f"the WebArena site {site!r} does not answer at {self._real_bases[site]} ({error.reason}): start the "
                f"deployment, or point base_urls={{{site!r}: ...}} or ${variable} at it")

    def _stop_loading(self) -> str:
        try:
            self.browser.driver.execute_script("window.stop()")
        except Exception:
            pass
        return (f"The page did not finish loading within {self.page_load_timeout:g} seconds; loading was stopped and "
                "the page is shown as far as it loaded.")

    # ---- episode --------------------------------------------------------------------------------
    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        self._config = self.task_config(item_id)
        sites = [s for s in self._config["sites"] if s in SITES]
        bases = [self._base(site) for site in sites]
        if self.embedded:  # every started site, also one a previous episode opened with goto
            for server in self._servers.values():
                server.app.reset()
        # wipe the storage of every site a browser may have opened (an earlier episode's goto included)
        origins = sorted({*bases, *(server.base_url for server in self._servers.values())})
        self.browser.new_episode(origins=origins)  # relaunches a dead browser itself
        if not self.embedded:
            self._apply_storage_state()
        self._previous_action = "None"
        self._solution_step = 0
        self._oracle_expected = None
        start_urls = [self.real_url(u) for u in self._config["start_url"].split(" |AND| ")]
        start_url = start_urls[0]
        try:
            (note, restarted) = self._driver_call(lambda driver: self._open_start_pages(driver, start_urls))
        except _Unreachable as error:
            raise SiteUnreachableError(self._unreachable_message(error)) from None
        observation = self._observe(note)
        info = {"intent": self._config["intent"], "sites": sites, "start_url": self.display_url(start_url)}
        if restarted:
            info["browser_restarted"] = True
        return Start(INSTRUCTION, observation, info)

    def _open_start_pages(self, driver: Any, addresses: list[str]) -> str | None:
        """WebArena's start: one tab per start URL (``a |AND| b``), the first one focused."""
        notes = [self._load(addresses[0])]
        if len(addresses) > 1:
            first = driver.current_window_handle
            for address in addresses[1:]:
                driver.switch_to.new_window("tab")
                notes.append(self._load(address))
            driver.switch_to.window(first)
        return next((n for n in notes if n), None)

    def _apply_storage_state(self) -> None:
        """Real WebArena: load the task's Playwright storage state (login cookies) if the file exists."""
        path = self._config.get("storage_state")
        root = self._config.get("_config_dir", ".")
        if not path:
            return
        full = Path(path) if Path(path).is_absolute() else Path(root) / path
        if not full.is_file():
            full = Path(path)
        if full.is_file():
            cookies = json.loads(full.read_text()).get("cookies", [])
            params = [{k: c[k] for k in ("name", "value", "domain", "path", "secure",
                                         "httpOnly") if k in c} for c in cookies]
            if params:
                self.browser.driver.execute_cdp_cmd("Network.setCookies", {"cookies": params})

    def action_response(self, action: str) -> str:
        """The action inside triple backticks (``click [12]`` -> ```` ```click [12]``` ````), unless it has them."""
        return action if "```" in action else f"```{action.strip()}```"

    def _parse(self, response: str) -> ParsedAction:
        return parse_backtick(response)

    def _act(self, action: str) -> Outcome:
        command = parse_command(action)
        if isinstance(command, str):
            return self._invalid(command)
        if command.name == "stop":
            return self._finish(command.text, action)
        try:
            (feedback, restarted) = self._driver_call(lambda driver: self._execute(command),
                                                      recover_url=self._last_url or None)
        except _InvalidAction as error:
            return self._invalid(str(error))
        except Exception as error:  # the browser failed twice: report, keep the episode alive
            return self._invalid(f"The browser could not perform the action ({type(error).__name__}); the page was "
                                 f"reloaded. Try again.")
        if restarted:
            restarted = "The browser stopped responding and was restarted; the page was reloaded."
            feedback = " ".join(filter(None, [feedback, restarted]))
        self._previous_action = action
        if action == self._oracle_expected:
            self._solution_step += 1
        observation = self._observe(feedback)
        return Outcome(observation, info={"browser_restarted": True} if restarted else {})

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """As ``TextEnv.step``, bounded by the step timeout (a page can hang the browser)."""
        self.require_episode()  # before self.browser, which would start a Chromium for a closed env
        with self.browser.time_limit(self.step_timeout):
            return super().step(action)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """As ``TextEnv.reset``, bounded by the step timeout (loading the start pages can hang)."""
        with self.browser.time_limit(self.step_timeout):
            return super().reset(seed=seed, options=options)

    def _budget_spent(self, outcome: Outcome) -> Outcome:
        """The last turn of the budget without ``stop``: whatever the response was, the final state is scored (empty
        answer), so a state-changing task counts at the budget the episode runs under."""
        score, failures = self._evaluate("")
        return replace(outcome, progress=score, score=score, success=score >= 1.0,
                       info={**outcome.info, "evaluation_failures": failures})

    def _invalid(self, message: str) -> Outcome:
        return Outcome(f"{message}\n\n{self._observation}", valid=False)

    def _finish(self, answer: str, action: str) -> Outcome:
        self._previous_action = action
        score, failures = self._evaluate(answer)
        verdict = "The task was completed successfully." if score >= 1.0 else "The task was not completed."
        return Outcome(f"You stopped with the answer {answer!r}. {verdict}", progress=score, score=score, done=True,
                       success=score >= 1.0, info={"answer": answer, "evaluation_failures": failures})

    def _evaluate(self, answer: str) -> tuple[float, list[str]]:
        def run_locator(address: str, locator: str) -> str | None:
            def read(driver: Any) -> str | None:
                if address != "last":
                    self._load(address)
                return driver.execute_script(f"try {{ return String({locator or 'document.body.innerText'}); }} catch "
                                             f"(e) {{ return null; }}")

            try:
                return self._driver_call(read)[0]
            except Exception:
                return None

        def run_sql(site: str, sql: str, params: list[Any]) -> list[list[Any]]:
            if site not in self._servers:
                return []
            return [list(row) for row in self._servers[site].app.query(sql, tuple(params))]

        fuzzy = fuzzy_match
        if self.judge is not None:
            judge, intent = self.judge, str(self._config.get("intent", ""))

            def fuzzy(given: str, reference: str) -> bool:
                return judge.accepts(intent, given, reference)

        try:
            score, failures = evaluate(self._config, answer, self._current_url(), self.real_url, run_locator,
                                       run_sql if self.embedded else None, fuzzy, self.lenient_matching)
        except JudgeUnavailable as error:
            return 0.0, [str(error)]
        return score, [self.display_url(failure) for failure in failures]  # no random loopback port in info

    def _current_url(self) -> str:
        try:
            return self._driver_call(lambda driver: driver.current_url)[0]
        except Exception:
            return ""

    # ---- actions --------------------------------------------------------------------------------
    def _execute(self, command: Command) -> str | None:
        """Perform a (non-stop) command; returns a note for the observation or raises ``_InvalidAction``."""
        driver = self.browser.driver
        note = None
        if command.name == "type" and len(command.text) > MAX_TYPED_CHARS:
            note = (f"Only the first {MAX_TYPED_CHARS} of the text's {len(command.text)} characters were typed "
                    f"(type enters at most {MAX_TYPED_CHARS}).")
            command = Command(command.name, command.element, command.text[:MAX_TYPED_CHARS], command.enter)
        feedback = self._perform(command, driver)
        return " ".join(filter(None, [note, feedback])) or None

    def _perform(self, command: Command, driver: Any) -> str | None:
        from selenium.common.exceptions import TimeoutException

        may_navigate = command.name == "click" or (command.name == "type" and command.enter) or (
            command.name == "press" and "enter" in command.text.lower())
        if may_navigate:
            self._mark_document(driver)
        try:
            if command.name in ("click", "hover", "type"):
                self._act_on_element(command, driver)
            elif command.name == "press":
                self._press_keys(command, driver)
            elif command.name == "scroll":
                sign = 1 if command.text == "down" else -1
                driver.execute_script(f"window.scrollBy(0, {sign} * window.innerHeight * 0.8)")
            elif command.name in ("new_tab", "tab_focus", "close_tab"):
                self._switch_tab(command, driver)
            elif command.name == "goto":
                return self._goto(command)
            elif command.name == "go_back":
                driver.back()
            elif command.name == "go_forward":
                driver.forward()
        except TimeoutException:
            return self._stop_loading()
        if may_navigate and not self._settle(driver):
            return self._stop_loading()
        if not self.browser.wait_for_page(self.page_load_timeout):
            return self._stop_loading()
        return None

    def _act_on_element(self, command: Command, driver: Any) -> None:
        """click, hover or type on the element of the observation's id ``[command.element]``."""
        from selenium.common.exceptions import TimeoutException, WebDriverException
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        node = self._tree.by_id(command.element or 0)
        if node is None or node.backend_id is None:
            raise _InvalidAction(f"There is no element [{command.element}] on the current page. Use an id shown in "
                                 f"brackets in the observation.")
        try:
            element = self.browser.element_for_node(node.backend_id)
        except LookupError:
            raise _InvalidAction(f"Element [{command.element}] is no longer on the page.") from None
        try:
            if command.name == "click":
                try:
                    element.click()
                except WebDriverException as error:  # covered or not clickable: a script click still works
                    if isinstance(error, TimeoutException) or not self.browser.is_alive():
                        raise
                    driver.execute_script("arguments[0].click()", element)
            elif command.name == "hover":
                ActionChains(driver).move_to_element(element).perform()
            else:
                self._type(node.role, element, command, Keys)
        except WebDriverException as error:
            if isinstance(error, TimeoutException) or not self.browser.is_alive():
                raise
            reason = (error.msg or type(error).__name__).splitlines()[0][:200]
            raise _InvalidAction(f"Could not {command.name} element [{command.element}] ({node.role} {node.name!r}): "
                                 f"{reason}") from None

    @staticmethod
    def _press_keys(command: Command, driver: Any) -> None:
        """press: a key or a combination (``Control+a``): the modifiers held down around the last key."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        keys = [k.strip() for k in command.text.split("+") if k.strip()]
        names = [getattr(Keys, _KEYS[k.lower()]) if k.lower() in _KEYS else k for k in keys]
        if not names or any(len(n) != 1 for n in names):
            raise _InvalidAction(f"Unknown key combination {command.text!r}; "
                                 f"use names like Enter, Tab, Control+a, Shift+Tab.")
        chain = ActionChains(driver)
        for key in names[:-1]:
            chain.key_down(key)
        chain.send_keys(names[-1])
        for key in reversed(names[:-1]):
            chain.key_up(key)
        chain.perform()

    @staticmethod
    def _switch_tab(command: Command, driver: Any) -> None:
        """new_tab, tab_focus or close_tab."""
        if command.name == "new_tab":
            driver.switch_to.new_window("tab")
        elif command.name == "tab_focus":
            handles = driver.window_handles
            if not 0 <= int(command.element or 0) < len(handles):
                raise _InvalidAction(f"There is no tab {command.element}; tabs are numbered 0 to {len(handles) - 1}.")
            driver.switch_to.window(handles[int(command.element or 0)])
        elif len(driver.window_handles) == 1:  # close_tab: chromedriver ends the session with its last window
            old = driver.current_window_handle
            driver.switch_to.new_window("tab")
            new = driver.current_window_handle
            driver.switch_to.window(old)
            driver.close()
            driver.switch_to.window(new)
        else:
            driver.close()
            driver.switch_to.window(driver.window_handles[-1])

    def _goto(self, command: Command) -> str | None:
        """goto: only the task's sites are reachable (a closed network)."""
        address = self.real_url(command.text)
        if not self._allowed(address):
            if self.embedded:
                sites = ", ".join(self.display_url(self._base(s)) for s in self._site_keys)
            else:
                sites = ", ".join(self._real_bases.values())
            raise _InvalidAction(f"Cannot open {command.text}: this is a closed network and only the task's web sites "
                                 f"are reachable ({sites}).")
        try:
            return self._load(address)
        except _Unreachable as error:
            raise _InvalidAction(
                f"Cannot open {command.text}: the site does not answer ({error.reason}).") from None

    def _mark_document(self, driver: Any) -> None:
        """Tag the current document and note when it starts unloading, so ``_settle`` can tell a
        navigation that an action started (form submits start theirs a moment later) from none."""
        self._document_token = getattr(self, "_document_token", 0) + 1
        driver.execute_script(_MARK_JS, self._document_token)

    def _settle(self, driver: Any) -> bool:
        """Wait until a navigation the action started has finished (``False`` on timeout)."""
        import time

        started = time.monotonic()
        while True:
            same_document, leaving = driver.execute_script(_PROBE_JS, self._document_token)
            elapsed = time.monotonic() - started
            if not same_document:
                return True
            if not leaving and elapsed >= NAVIGATION_SETTLE_SECONDS:
                return True
            if elapsed >= self.page_load_timeout:
                return False
            time.sleep(0.01)

    def _type(self, role: str, element: Any, command: Command, keys: Any) -> None:
        tag = (element.tag_name or "").lower()
        editable = tag in ("input", "textarea", "select") or element.get_attribute("contenteditable") == "true"
        input_type = (element.get_attribute("type") or "text").lower() if tag == "input" else ""
        if tag == "input" and input_type in ("radio", "checkbox", "submit", "button", "hidden", "image", "reset"):
            editable = False
        if not editable and role not in TEXT_ROLES:
            raise _InvalidAction(f"Element [{command.element}] is a {role}, not a text field; type works on textbox, "
                                 f"searchbox, spinbutton and combobox elements.")
        if tag == "select":
            options = self.browser.driver.execute_script(_SELECT_OPTION_JS, element, command.text)
            if options is not None:
                raise _InvalidAction(f"[{command.element}] has no option {command.text!r}; its options are {options}.")
            return
        element.clear()
        element.send_keys(command.text)
        if command.enter:
            element.send_keys(keys.ENTER)

    # ---- observation ----------------------------------------------------------------------------
    def _observe(self, note: str | None = None) -> str:
        def read(driver: Any) -> tuple[Tree, str, str]:
            tree = render_tree(self.browser.accessibility_nodes())
            handles = driver.window_handles
            current = driver.current_window_handle
            targets = driver.execute_cdp_cmd("Target.getTargets", {}).get("targetInfos", [])
            titles = {t["targetId"]: t.get("title", "") for t in targets}
            tabs = " | ".join(f"Tab {i}{' (current)' if h == current else ''}: {titles.get(h, '')}" for i,
                              h in enumerate(handles))
            return tree, tabs, driver.current_url

        try:
            (self._tree, tabs, address), _ = self._driver_call(read, recover_url=None)
        except Exception as error:
            self._tree, tabs, address = Tree([]), "Tab 0 (current)", ""
            note = f"{note or ''} The page could not be read ({type(error).__name__}).".strip()
        lines = [tabs, "", self.display_url(self._tree.text()) or "(the page is empty)", "",
                 f"URL: {self.display_url(address)}", f"OBJECTIVE: {self._config.get('intent', '')}",
                 f"PREVIOUS ACTION: {self._previous_action}"]
        if note:
            lines.append(f"NOTE: {note}")
        self._observation = "\n".join(lines)
        self._last_url = address
        return self._observation

    # ---- agents ---------------------------------------------------------------------------------
    def oracle_action(self) -> str:
        """The next step of the task's scripted solution, with element references resolved to ids."""
        solution = self._config.get("solution")
        if not solution:
            raise NotImplementedError("this task has no scripted solution")
        step = solution[min(self._solution_step, len(solution) - 1)]

        def element_id(role: str, name: str) -> int | None:
            return getattr(self._tree.find(role, name), "id", None)

        resolved = resolve_script_step(step, element_id) or step
        self._oracle_expected = resolved
        return f"Let's think step-by-step. Following the plan, the next action I will perform is ```{resolved}```"

    def random_action(self, rng: np.random.Generator) -> str:
        """A click on a random link or button of the page, a scroll down or going back."""
        clickable = [n.id for n in self._tree.nodes if n.role in ("link", "button")]
        choices = [f"click [{i}]" for i in clickable] + ["scroll [down]", "go_back"]
        return f"```{choices[int(rng.integers(len(choices)))]}```"

    def _release(self) -> None:
        """Stop the embedded sites and hand the browser back to the process's pool (wiped)."""
        origins = [server.base_url for server in self._servers.values()] or list(self._real_bases.values())
        if self._browser is not None and self._owns_browser:
            from agentgym_envs.web.browser import BROWSER_POOL

            browser, self._browser = self._browser, None
            BROWSER_POOL.release(browser, origins)
        for server in self._servers.values():
            server.shutdown()
        self._servers.clear()


class _InvalidAction(Exception):
    """An action the page cannot carry out; its message is shown to the agent."""


#: Chromium's error for a page that could not be fetched at all (refused, unknown host, no route, ...)
_NETWORK_ERROR = re.compile(r"net::ERR_[A-Z_]+")


class _Unreachable(Exception):
    """Nothing answered at ``address`` (``reason``: Chromium's ``net::ERR_...``)."""

    def __init__(self, address: str, reason: str):
        super().__init__(f"{address}: {reason}")
        self.address, self.reason = address, reason


class SiteUnreachableError(ConnectionError):
    """An episode cannot start because its site does not answer (a real WebArena deployment that is down)."""


def load_webarena_configs(config_path: str | os.PathLike[str], sites: list[str]) -> dict[int, dict[str, Any]]:
    """WebArena task configs (a directory of ``<id>.json`` files or one JSON list file) that use only ``sites``."""
    path = Path(config_path)
    if path.is_dir():
        files = sorted(glob.glob(str(path / "*.json")))
        raw = [json.loads(Path(f).read_text()) for f in files]
        raw = [c for c in raw if isinstance(c, dict) and "task_id" in c]
    else:
        data = json.loads(path.read_text())
        raw = data if isinstance(data, list) else [data]
    configs = {}
    for config in raw:
        if config.get("sites") and set(config["sites"]) <= set(sites):
            configs[int(config["task_id"])] = {**config, "_config_dir": str(path if path.is_dir() else path.parent)}
    return configs
