"""Browser envs under faults: a frozen Chromium, a killed owner process, episode isolation of tab
history, resources over many envs, and byte-identical info (no random loopback ports)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the ids)
from agentgym_envs.web import chromium_missing_reason

pytest.importorskip("selenium")
psutil = pytest.importorskip("psutil")
if chromium_missing_reason():
    pytest.skip(chromium_missing_reason(), allow_module_level=True)

from agentgym_envs.web.browser import BROWSER_POOL, PROFILE_PREFIX, reap_orphaned_browsers  # noqa: E402

MAPS = "AgentGym/WebArena-Maps-v0"


def _freeze(processes: list) -> None:
    for process in processes:
        try:
            process.send_signal(signal.SIGSTOP)
        except psutil.Error:
            pass


def test_a_frozen_browser_costs_one_bounded_step_and_is_replaced() -> None:
    env = gym.make(MAPS, step_timeout=3.0, browser_config={"page_load_timeout": 3, "command_timeout": 30}).unwrapped
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        browser = env.browser
        frozen = browser._processes()
        _freeze(frozen)
        started = time.monotonic()
        obs, reward, terminated, truncated, info = env.step("```scroll [down]```")
        elapsed = time.monotonic() - started
        assert elapsed < 20, f"a step on a frozen browser took {elapsed:.1f} s"
        assert info.get("browser_restarted") and "restarted" in obs
        assert browser.timeouts == 1 and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in frozen)
        obs, reward, terminated, truncated, info = env.step(env.oracle_action())
        assert info["valid_action"] and not info.get("browser_restarted")
    finally:
        env.close()


def test_tab_history_does_not_survive_reset() -> None:
    env = gym.make(MAPS).unwrapped
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        for _ in range(3):  # walk a few pages of the first task
            env.step(env.oracle_action())
        visited = env.browser.driver.current_url
        env.reset(seed=0, options={"split": "test", "index": 1})
        start = env.browser.driver.current_url
        env.step("```go_back```")
        back = env.browser.driver.current_url
        assert back != visited and back in (start, "about:blank", "data:,"), (visited, start, back)
    finally:
        env.close()


def test_info_is_identical_across_envs_with_different_ports() -> None:
    """Two envs serve their sites on different random loopback ports; the episodes' info (and the
    evaluation failures of a wrong answer) must not show them."""
    first, second = gym.make(MAPS), gym.make(MAPS)
    try:
        outcomes = []
        for env in (first, second):
            obs, info = env.reset(seed=0, options={"split": "test", "index": 0})
            obs, reward, terminated, truncated, info = env.step("```stop [somewhere else]```")
            outcomes.append((obs, info))
        assert outcomes[0] == outcomes[1]
        ports = {urlsplit(server.base_url).port for env in (first,
                                                            second) for server in env.unwrapped._servers.values()}
        assert len(ports) > 1
        assert all(str(port) not in str(outcomes[0]) for port in ports)
    finally:
        first.close()
        second.close()


def test_many_envs_leak_no_threads_or_descriptors() -> None:
    process = psutil.Process()

    def cycle() -> None:
        env = gym.make(MAPS)
        env.reset(seed=0, options={"split": "test", "index": 0})
        env.step("```scroll [down]```")
        env.close()

    for _ in range(3):  # warm-up: the pool's browsers, caches
        cycle()
    threads, fds = threading.active_count(), process.num_fds()
    for _ in range(15):
        cycle()
    assert threading.active_count() <= threads + 2, f"threads {threads} -> {threading.active_count()}"
    assert process.num_fds() <= fds + 8, f"file descriptors {fds} -> {process.num_fds()}"
    BROWSER_POOL.clear()


OWNER = textwrap.dedent("""
    import sys, time
    from agentgym_envs.web.browser import Browser
    browser = Browser()
    browser.goto("about:blank")
    print(" ".join(str(p.pid) for p in browser._processes()), flush=True)
    time.sleep(600)
""")


def test_browsers_of_a_killed_process_are_reaped() -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        pids = [int(pid) for pid in owner.stdout.readline().split()]
        assert len(pids) >= 2, "the owner process did not start a browser"
        profiles = list(Path("/tmp").glob(f"{PROFILE_PREFIX}{owner.pid}-*"))
        assert profiles
    finally:
        owner.kill()
        owner.wait()
    time.sleep(0.5)
    assert any(psutil.pid_exists(pid) for pid in pids), "Chromium outlives its owner's SIGKILL (what the reaper is for)"
    assert reap_orphaned_browsers() >= 1
    survivors = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not survivors, survivors
    assert not any(profile.exists() for profile in profiles)


def test_webshop_browser_step_is_bounded_too() -> None:
    env = gym.make("AgentGym/WebShop-Browser-v0").unwrapped
    env.browser_step_timeout = 3.0
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        _freeze(env._browser._processes())
        started = time.monotonic()
        obs, reward, terminated, truncated, info = env.step(env.oracle_action())
        assert time.monotonic() - started < 20 and info.get("browser_restarted")
        assert info["valid_action"] and not terminated
    finally:
        env.close()


def test_a_crashed_browser_mid_episode_costs_no_action() -> None:
    """The browser dies between two steps: the next action (an element id of the old page) is
    carried out on the relaunched browser's reloaded page."""
    env = gym.make(MAPS).unwrapped
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        env.step(env.oracle_action())
        for process in env.browser._processes():
            process.kill()
        obs, reward, terminated, truncated, info = env.step(env.oracle_action())
        assert info["valid_action"] and info.get("browser_restarted"), obs[:300]
    finally:
        env.close()
