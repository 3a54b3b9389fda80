"""Chromium driven by Selenium: one browser per env worker, a clean slate per episode.

``Browser`` is what a web env holds. It launches Debian's Chromium lazily with the flags that work
as root on a closed network (``chromium_arguments``: nothing but loopback is reachable), gives
every episode fresh state (one new blank tab, cookies, cache and the storage of the visited
origins cleared), notices a dead browser and launches a new one, bounds every wait (and, with
``time_limit``, a whole env step), and releases the processes and the temporary profile on
``close()`` (also at interpreter exit if the env was never closed; after a SIGKILL, the next
process reaps them). A long-running worker
relaunches its browser every ``max_episodes_per_launch`` episodes so memory cannot creep up
over hours of training.

Usage::

    browser = Browser()
    browser.new_episode(origins=["http://127.0.0.1:8000"])
    browser.goto("http://127.0.0.1:8000/")
    browser.call(lambda driver: driver.find_element(By.ID, "go").click())
    browser.close()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from agentgym_envs.core import require
from agentgym_envs.web import chromium_missing_reason, find_chromium

#: Flags for headless Chromium as root without network access: no sandbox (root), no GPU, and no
#: background traffic (component updates, sync, first-run pages, QUIC), /dev/shm may be tiny.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
)

#: Host names that always resolve: the loopback sites the envs serve themselves.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: A proxy nobody listens on: every request that is not loopback (or allowed) goes there and fails
#: at once. Host resolver rules alone stop names, not IP literals such as ``http://93.184.216.34/``.
DEAD_PROXY = "http://127.0.0.1:9"
#: Flags that would reopen the network; ``chromium_arguments`` drops them from caller extras.
_NETWORK_FLAGS = (
    "--host-resolver-rules", "--proxy-server", "--proxy-bypass-list", "--no-proxy-server", "--proxy-pac-url",
)


def chromium_arguments(allowed_hosts: Iterable[str] = (), extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Every command-line flag a Chromium of this project starts with (the one place they are built).

    ``CHROMIUM_FLAGS``, then the closed network: every host name but loopback and ``allowed_hosts``
    (e.g. a real WebArena deployment) resolves to NOTFOUND, and every other request, IP literals
    included, goes to a dead proxy. ``extra`` flags are appended, except ones that would change
    these network rules.
    """
    hosts = [*LOOPBACK_HOSTS, *(h for h in allowed_hosts if h not in LOOPBACK_HOSTS)]
    resolver = "MAP * ~NOTFOUND , " + " , ".join(f"EXCLUDE {host.strip('[]')}" for host in hosts)
    network = (
        f"--host-resolver-rules={resolver}",
        f"--proxy-server={DEAD_PROXY}",
        "--proxy-bypass-list=" + ";".join(hosts),
    )
    kept = tuple(flag for flag in extra if not flag.startswith(_NETWORK_FLAGS))
    return (*CHROMIUM_FLAGS, *network, *kept)


#: What a site can leave behind for the next episode. ("all" also wipes browser-internal caches
#: such as the shader cache, which costs several times longer and holds no site state.)
SITE_STORAGE_TYPES = ",".join((
    "cookies", "local_storage", "session_storage", "indexeddb", "websql", "service_workers", "cache_storage",
    "file_systems", "shared_storage", "storage_buckets",
))

T = TypeVar("T")

#: Temporary profiles are named ``agentgym-browser-<owner pid>-<random>``, so a later process can
#: tell the leftovers of a process that was killed outright (``reap_orphaned_browsers``).
PROFILE_PREFIX = "agentgym-browser-"
_reaped = False


def reap_orphaned_browsers() -> int:
    """Kill the Chromium and chromedriver processes, and delete the profiles, left by a process that
    died without closing its browsers (SIGKILL gives it no chance; Chromium outlives chromedriver).

    Only profiles whose owner pid no longer exists are touched, and only processes started with one
    of those profiles (and their chromedriver), so live browsers of other processes are safe.
    Runs once per process, before its first launch. Returns how many processes were killed.
    """
    try:
        import psutil
    except ImportError:
        return 0
    orphans = []
    for profile in Path(tempfile.gettempdir()).glob(f"{PROFILE_PREFIX}*-*"):
        owner = profile.name[len(PROFILE_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and int(owner) != os.getpid() and not psutil.pid_exists(int(owner)):
            orphans.append(profile)
    if not orphans:
        return 0
    flags = {f"--user-data-dir={profile}" for profile in orphans}
    victims: dict[int, Any] = {}
    for process in psutil.process_iter(["cmdline"]):
        if flags.intersection(process.info["cmdline"] or ()):
            victims[process.pid] = process
            with contextlib.suppress(Exception):
                parent = process.parent()
                if parent is not None and "chromedriver" in parent.name():
                    victims[parent.pid] = parent
    for process in victims.values():
        with contextlib.suppress(Exception):
            process.kill()
    psutil.wait_procs(list(victims.values()), timeout=5)
    for profile in orphans:
        shutil.rmtree(profile, ignore_errors=True)
    return len(victims)


class BrowserError(RuntimeError):
    """The browser could not do what was asked, even after a restart."""


@dataclass(frozen=True)
class BrowserConfig:
    """Timeouts and limits of one browser (seconds)."""

    window_size: tuple[int, int] = (1280, 1024)
    page_load_timeout: float = 30.0
    script_timeout: float = 10.0
    wait_timeout: float = 10.0
    poll_frequency: float = 0.01
    command_timeout: float = 60.0
    launch_attempts: int = 2
    max_episodes_per_launch: int | None = 1000
    extra_arguments: tuple[str, ...] = ()
    #: Hosts besides loopback the browser may reach (real WebArena deployments); nothing else resolves.
    allowed_hosts: tuple[str, ...] = ()


def _quit_driver(driver: Any, profile_dir: str | None, processes: list[Any]) -> None:
    """Stop chromedriver and Chromium, kill what ``quit()`` left behind, delete the profile; never raises.

    ``processes`` are ``psutil.Process`` handles taken while the browser ran: psutil refuses to
    signal a process whose pid was meanwhile reused, so only our own processes are ever killed.
    """
    if driver is not None:
        try:
            driver.quit()
        except Exception:
            pass
    for process in processes:
        try:
            if process.is_running():
                process.kill()
        except Exception:
            pass
    if profile_dir:
        shutil.rmtree(profile_dir, ignore_errors=True)


def _running(process: Any) -> bool:
    try:
        return bool(process.is_running())
    except Exception:
        return False


class Browser:
    """One headless Chromium for one env worker (not shared between threads)."""

    def __init__(self, config: BrowserConfig | None = None):
        self.config = config or BrowserConfig()
        self.launches = 0
        self.restarts = 0
        self.timeouts = 0
        self._driver: Any = None
        self._profile_dir: str | None = None
        self._episodes_since_launch = 0
        self._lock = threading.RLock()
        self._finalizer: weakref.finalize | None = None
        #: Every process seen under chromedriver since the launch: if chromedriver itself dies, Chromium
        #: is reparented away from it and only this list still finds it to kill.
        self._known_processes: list[Any] = []

    # ---- lifecycle ------------------------------------------------------------------------------
    @property
    def driver(self) -> Any:
        """The Selenium WebDriver, launching Chromium on first use."""
        if self._driver is None:
            self._launch()
        return self._driver

    @property
    def running(self) -> bool:
        """Whether Chromium has been started (and not closed)."""
        return self._driver is not None

    def _launch(self) -> None:
        reason = chromium_missing_reason()
        if reason is not None:
            raise BrowserError(reason)
        webdriver = require("selenium.webdriver", extra="web")
        from selenium.webdriver.chrome.service import Service

        global _reaped
        if not _reaped:
            _reaped = True
            reap_orphaned_browsers()
        binary, driver_path = find_chromium()
        last_error: Exception | None = None
        for _ in range(max(1, self.config.launch_attempts)):
            profile = tempfile.mkdtemp(prefix=f"{PROFILE_PREFIX}{os.getpid()}-")
            options = webdriver.ChromeOptions()
            options.binary_location = binary
            for flag in chromium_arguments(self.config.allowed_hosts, self.config.extra_arguments):
                options.add_argument(flag)
            options.add_argument(f"--user-data-dir={profile}")
            options.add_argument("--window-size={},{}".format(*self.config.window_size))
            try:
                driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
            except Exception as error:  # a launch can fail under load; try once more
                shutil.rmtree(profile, ignore_errors=True)
                last_error = error
                continue
            self._known_processes = []
            # registered before anything else can fail, so a browser that started is always quit
            self._finalizer = weakref.finalize(self, _quit_driver, driver, profile, self._known_processes)
            self._driver, self._profile_dir = driver, profile
            self._remember_processes()
            driver.command_executor._client_config.timeout = self.config.command_timeout
            driver.set_page_load_timeout(self.config.page_load_timeout)
            driver.set_script_timeout(self.config.script_timeout)
            self._episodes_since_launch = 0
            self.launches += 1
            return
        raise BrowserError(f"Chromium did not start: {last_error}") from last_error

    def _processes(self) -> list[Any]:
        """chromedriver and every Chromium process under it, as psutil handles (empty without psutil)."""
        service = getattr(self._driver, "service", None)
        process = getattr(service, "process", None)
        if process is None:
            return []
        try:
            import psutil

            root = psutil.Process(process.pid)
            return [root, *root.children(recursive=True)]
        except Exception:
            return []

    def _remember_processes(self) -> None:
        """Add the processes now under chromedriver to ``_known_processes`` (in place: the exit
        finalizer holds the same list) and forget the ones that have exited."""
        alive = [process for process in self._known_processes if _running(process)]
        known = {process.pid for process in alive}
        self._known_processes[:] = alive + [p for p in self._processes() if p.pid not in known]

    def is_alive(self) -> bool:
        """Whether the browser answers a trivial script."""
        if self._driver is None:
            return False
        service = getattr(self._driver, "service", None)
        process = getattr(service, "process", None)
        if process is not None and process.poll() is not None:
            return False
        try:
            return self._driver.execute_script("return 1") == 1
        except Exception:
            return False

    def restart(self) -> None:
        """Throw the current browser away (whatever state it is in) and launch a new one."""
        with self._lock:
            self._shutdown()
            self.restarts += 1
            self._launch()

    def close(self) -> None:
        """Quit Chromium and chromedriver and delete the profile; safe to call twice."""
        with self._lock:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._finalizer is not None:
            if self._driver is not None:
                self._remember_processes()
            processes = list(self._known_processes)
            self._finalizer.detach()
            self._finalizer = None
            _quit_driver(self._driver, self._profile_dir, processes)
        self._driver = self._profile_dir = None

    # ---- episodes -------------------------------------------------------------------------------
    def new_episode(self, origins: Iterable[str] = ()) -> None:
        """Fresh state for a new episode: one blank tab, no cookies, no cache, no site storage.

        ``origins`` are the sites the episode will visit (their local storage, IndexedDB, service
        workers, ... are wiped). A dead browser, or one past ``max_episodes_per_launch``, is relaunched.
        """
        with self._lock:
            limit = self.config.max_episodes_per_launch
            if self._driver is not None and (
                not self.is_alive() or (limit is not None and self._episodes_since_launch >= limit)
            ):
                self.restart()
            try:
                self._clean(origins)
            except Exception:
                self.restart()
                self._clean(origins)
            self._episodes_since_launch += 1
            self._remember_processes()

    def _clean(self, origins: Iterable[str]) -> None:
        driver = self.driver
        old = driver.window_handles
        # a new tab has no history (go_back cannot reach the last episode's pages); closing the old
        # ones first stops their scripts, so none writes state after the wipe
        driver.switch_to.new_window("tab")
        fresh = driver.current_window_handle
        for handle in old:
            driver.switch_to.window(handle)
            driver.close()
        driver.switch_to.window(fresh)
        driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        driver.execute_cdp_cmd("Network.clearBrowserCache", {})
        for origin in origins:
            driver.execute_cdp_cmd(
                "Storage.clearDataForOrigin", {"origin": origin.rstrip("/"), "storageTypes": SITE_STORAGE_TYPES}
            )

    @contextlib.contextmanager
    def time_limit(self, seconds: float | None) -> Iterator[None]:
        """Bound what runs inside (an env step) to about ``seconds``.

        Past the limit the browser's processes are killed without a word to them (a frozen Chromium
        answers nothing, and each WebDriver command would wait ``command_timeout``): the stuck call
        fails at once, and ``call`` relaunches the browser and retries, as after a crash.
        """
        if not seconds or self._driver is None:
            yield
            return
        timer = threading.Timer(seconds, self._kill)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _kill(self) -> None:
        """SIGKILL chromedriver and Chromium (``restart`` or ``close`` then cleans up)."""
        self.timeouts += 1
        for process in list(self._known_processes):
            try:
                process.kill()
            except Exception:  # already gone
                pass

    # ---- actions --------------------------------------------------------------------------------
    def goto(self, url: str) -> None:
        """Load ``url`` in the current tab."""
        self.driver.get(url)

    def wait_until(self, condition: Callable[[Any], T], timeout: float | None = None) -> T:
        """Poll ``condition(driver)`` every ``poll_frequency`` seconds until it is truthy (bounded wait)."""
        from selenium.webdriver.support.ui import WebDriverWait

        wait = WebDriverWait(
            self.driver, timeout or self.config.wait_timeout, poll_frequency=self.config.poll_frequency
        )
        return wait.until(condition)

    def call(self, action: Callable[[Any], T], recover: Callable[[], None] | None = None) -> tuple[T, bool]:
        """Run ``action(driver)``; if it fails because the browser died or hung, relaunch it, run
        ``recover()`` (e.g. reload the episode's page) and try once more.

        Returns ``(result, restarted)``. An error of a live browser (a missing element, a bad
        script) is raised as is: that is the caller's bug, not a crash.
        """
        from selenium.common.exceptions import TimeoutException, WebDriverException
        from urllib3.exceptions import HTTPError as DriverConnectionError  # chromedriver itself is gone

        try:
            return action(self.driver), False
        except (WebDriverException, TimeoutException, OSError, DriverConnectionError) as error:
            if self.is_alive() and not isinstance(error, TimeoutException):
                raise
            first_error = error
        self.restart()
        try:
            if recover is not None:
                recover()
            return action(self.driver), True
        except Exception as error:
            raise BrowserError(f"the browser failed twice: {first_error!r}, then {error!r}") from error


    # ---- page inspection (CDP) ------------------------------------------------------------------
    def accessibility_nodes(self) -> list[dict[str, Any]]:
        """Chromium's full accessibility tree of the current tab, as CDP ``Accessibility.getFullAXTree`` nodes."""
        return self.driver.execute_cdp_cmd("Accessibility.getFullAXTree", {}).get("nodes", [])

    def element_for_node(self, backend_node_id: int) -> Any:
        """The Selenium element of a DOM node named by its CDP backend node id (a text node gives its
        parent element). Raises ``LookupError`` if the node is gone from the page."""
        from selenium.webdriver.common.by import By

        driver = self.driver
        try:
            handle = driver.execute_cdp_cmd("DOM.resolveNode", {"backendNodeId": int(backend_node_id)})
            driver.execute_cdp_cmd("Runtime.callFunctionOn", {
                "objectId": handle["object"]["objectId"],
                "functionDeclaration": "function(){const e=this.nodeType===1?this:this.parentElement;"
                                       "if(e){e.setAttribute('data-agentgym-target','1')}return !!e}",
                "returnByValue": True,
            })
            element = driver.find_element(By.CSS_SELECTOR, "[data-agentgym-target]")
        except Exception as error:
            raise LookupError(f"node {backend_node_id} is not on the page") from error
        driver.execute_script("arguments[0].removeAttribute('data-agentgym-target')", element)
        return element

    def wait_for_page(self, timeout: float | None = None) -> bool:
        """Wait (bounded) until the current document has finished loading; ``False`` on timeout."""
        from selenium.common.exceptions import TimeoutException

        try:
            self.wait_until(lambda driver: driver.execute_script("return document.readyState") == "complete", timeout)
            return True
        except TimeoutException:
            return False


class BrowserPool:
    """Idle browsers kept for reuse, so an env created after another one was closed starts without
    a Chromium launch (about a second, plus half a second to quit).

    An env takes a browser for its whole life (``acquire``), so no two live envs ever share one;
    ``release`` wipes the browser (one blank tab, no cookies, the given origins' storage cleared)
    and keeps it if fewer than ``max_idle`` are idle, else quits it. Idle browsers are quit by
    ``clear()`` or at interpreter exit. ``$AGENTGYM_BROWSER_POOL=0`` turns pooling off.
    """

    def __init__(self, max_idle: int = 2):
        self.max_idle = max_idle
        self._idle: list[Browser] = []
        self._lock = threading.Lock()

    def acquire(self, config: BrowserConfig | None = None) -> Browser:
        """An idle browser of this configuration, or a new one (started on first use)."""
        config = config or BrowserConfig()
        with self._lock:
            for index, browser in enumerate(self._idle):
                if browser.config == config:
                    del self._idle[index]
                    return browser
        return Browser(config)

    def release(self, browser: Browser, origins: Iterable[str] = ()) -> None:
        """Take back an env's browser: wiped for a new episode (``origins``: the sites it visited) and kept idle, or
        closed when the pool is full, pooling is off (``AGENTGYM_BROWSER_POOL=0``) or the wipe fails.
        """
        import os

        keep = self.max_idle > 0 and os.environ.get("AGENTGYM_BROWSER_POOL", "1") != "0" and browser.running
        with self._lock:
            keep = keep and len(self._idle) < self.max_idle  # a full pool: no point wiping the browser first
        if keep:
            try:
                browser.new_episode(origins)
                keep = browser.is_alive()
            except Exception:
                keep = False
        with self._lock:
            if keep and len(self._idle) < self.max_idle:
                self._idle.append(browser)
                return
        browser.close()

    def clear(self) -> None:
        """Quit every idle browser."""
        with self._lock:
            idle, self._idle = self._idle, []
        for browser in idle:
            browser.close()

    @property
    def idle(self) -> int:
        """How many browsers wait in the pool."""
        return len(self._idle)


#: The process's pool (used by WebArena; any web env may use it).
BROWSER_POOL = BrowserPool()


def require_browser() -> None:
    """Raise ``BrowserError`` naming the apt packages when Chromium or chromedriver is missing."""
    reason = chromium_missing_reason()
    if reason is not None:
        raise BrowserError(reason)
