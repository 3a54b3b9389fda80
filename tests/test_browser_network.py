"""Every Chromium the project starts is on a closed network: loopback works, nothing else does.

The checks load a loopback page that tries to reach outside hosts (by name and by IP literal)
and assert each attempt fails fast, that no browser process holds a connection to a
non-loopback address, and that the browsers of WebShop-Browser and WebArena were started with
the shared flags of ``web.browser.chromium_arguments``.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the ids)
from agentgym_envs.web import chromium_missing_reason

pytest.importorskip("selenium")
pytest.importorskip("psutil")
if chromium_missing_reason():
    pytest.skip(chromium_missing_reason(), allow_module_level=True)

from agentgym_envs.web.browser import Browser, BrowserConfig, chromium_arguments  # noqa: E402

OUTSIDE_URLS = ("http://example.com/", "https://www.google.com/", "http://93.184.216.34/", "http://10.255.255.1/")
REQUIRED_FLAGS = ("--headless", "--no-sandbox", "--disable-background-networking",
                  "--host-resolver-rules=MAP * ~NOTFOUND")

PROBE_PAGE = b"""<!doctype html><title>probe</title><script>
window.results = {};
async function probe(url) {
  const started = performance.now();
  try {
    await fetch(url, {mode: 'no-cors', cache: 'no-store'});
    window.results[url] = ['reached', performance.now() - started];
  }
  catch (e) { window.results[url] = ['failed', performance.now() - started]; }
}
</script>"""


@pytest.fixture(scope="module")
def loopback_site() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(PROBE_PAGE)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _outside_connections(browser: Browser) -> list[str]:
    """Remote addresses other than loopback that any of the browser's processes is connected to."""
    found = []
    for process in browser._processes():
        try:
            connections = process.net_connections(kind="inet")
        except Exception:  # exited meanwhile
            continue
        for connection in connections:
            host = connection.raddr.ip if connection.raddr else ""
            if host and not (host.startswith("127.") or host == "::1"):
                found.append(f"{process.name()} -> {host}:{connection.raddr.port}")
    return found


def _chromium_command_lines(browser: Browser) -> list[list[str]]:
    lines = []
    for process in browser._processes():
        try:
            command = process.cmdline()
        except Exception:
            continue
        if command and "chrom" in command[0] and "--type=" not in " ".join(command) and "driver" not in command[0]:
            lines.append(command)
    return lines


def test_launch_flags_close_the_network() -> None:
    flags = chromium_arguments(allowed_hosts=("webarena.example",),
                               extra=("--host-resolver-rules=MAP * 1.2.3.4", "--lang=en"))
    for required in REQUIRED_FLAGS:
        assert any(flag.startswith(required) for flag in flags), required
    rules = next(flag for flag in flags if flag.startswith("--host-resolver-rules"))
    assert "EXCLUDE webarena.example" in rules and "EXCLUDE localhost" in rules
    assert "--host-resolver-rules=MAP * 1.2.3.4" not in flags, "extra flags must not reopen the network"
    assert "--lang=en" in flags


def test_outside_requests_fail_fast_and_leave_no_connection(loopback_site: str) -> None:
    browser = Browser(BrowserConfig(page_load_timeout=10))
    try:
        browser.goto(loopback_site)
        probes = [*OUTSIDE_URLS, loopback_site]
        browser.driver.execute_script("for (const url of arguments[0]) probe(url);", probes)
        results = browser.wait_until(
            lambda driver: (r := driver.execute_script("return window.results")) and len(r) == len(probes) and r,
            timeout=20,
        )
        assert results[loopback_site][0] == "reached", "the loopback site must stay reachable"
        for url in OUTSIDE_URLS:
            outcome, milliseconds = results[url]
            assert outcome == "failed", f"{url} was reachable from the browser"
            assert milliseconds < 3000, f"{url} took {milliseconds:.0f} ms to fail"

        from selenium.common.exceptions import WebDriverException

        started = time.monotonic()
        with pytest.raises(WebDriverException, match="ERR_PROXY_CONNECTION_FAILED|ERR_NAME_NOT_RESOLVED"):
            browser.goto("http://example.com/")
        assert time.monotonic() - started < 5
        assert "Example Domain" not in browser.driver.page_source
        assert not _outside_connections(browser)
    finally:
        browser.close()


@pytest.mark.parametrize("env_id", ["AgentGym/WebShop-Browser-v0", "AgentGym/WebArena-Maps-v0"])
def test_env_browsers_start_with_the_closed_network_flags(env_id: str) -> None:
    if not agentgym_envs.get_task(env_id).extra_installed():
        pytest.skip(agentgym_envs.get_task(env_id).install_hint)
    env = gym.make(env_id)
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        browser = env.unwrapped._browser
        command_lines = _chromium_command_lines(browser)
        assert command_lines, "no Chromium process found under chromedriver"
        for command in command_lines:
            for required in REQUIRED_FLAGS:
                assert any(part.startswith(required) for part in command), f"{env_id}: Chromium lacks {required}"
        assert not _outside_connections(browser)
    finally:
        env.close()
