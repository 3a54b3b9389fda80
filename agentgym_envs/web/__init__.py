"""Shared browser layer for the web families (WebShop's browser mode, WebArena).

Light on purpose: importing this package does not import Selenium. ``browser.py`` holds the
Chromium management (launch flags, per-episode isolation, timeouts, restart after a crash); this
module only finds the Chromium binaries and offers ``BrowserTaskSpec``, a task spec that counts as
installed only when the Python extras *and* Chromium are there, so registry-derived tests skip a
browser id with the command that fixes it instead of failing on a machine without a browser.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from agentgym_envs.core.tasks import TaskSpec

#: Debian packages that provide ``/usr/bin/chromium`` and ``/usr/bin/chromedriver``.
APT_PACKAGES = ("chromium", "chromium-driver")
APT_HINT = "apt-get update && apt-get install -y " + " ".join(APT_PACKAGES)
CHROMIUM_ENV, CHROMEDRIVER_ENV = "AGENTGYM_CHROMIUM", "AGENTGYM_CHROMEDRIVER"
_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _executable(path: str | None) -> str | None:
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


def find_chromium() -> tuple[str | None, str | None]:
    """(browser, driver) paths: ``$AGENTGYM_CHROMIUM`` / ``$AGENTGYM_CHROMEDRIVER`` if set, else the first on PATH."""
    browser = _executable(os.environ.get(CHROMIUM_ENV)) or next(
        (p for p in map(shutil.which, _CHROMIUM_NAMES) if p), None
    )
    driver = _executable(os.environ.get(CHROMEDRIVER_ENV)) or shutil.which("chromedriver")
    return browser, driver


def chromium_missing_reason() -> str | None:
    """Why no browser can be launched (``None`` when Chromium and chromedriver are both found)."""
    browser, driver = find_chromium()
    missing = [name for name, path in (("chromium", browser), ("chromedriver", driver)) if path is None]
    if not missing:
        return None
    return (
        f"{' and '.join(missing)} not found (looked at ${CHROMIUM_ENV}/${CHROMEDRIVER_ENV} and PATH); "
        f"install them with: {APT_HINT}"
    )


#: What an env that drives a Chromium costs an env server at least (``TaskSpec.weight``, in units of a light
#: in-process env): a browser spec declares no less.
BROWSER_WEIGHT = 8


@dataclass(frozen=True)
class BrowserTaskSpec(TaskSpec):
    """A task spec whose env also needs Chromium: installed = Python extras present and browser found; its weight is
    at least a browser's (``BROWSER_WEIGHT``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight", max(BROWSER_WEIGHT, self.weight))

    def extra_installed(self) -> bool:
        """Whether the Python extra is installed and Chromium can be found."""
        return super().extra_installed() and chromium_missing_reason() is None

    @property
    def install_hint(self) -> str:
        """The pip command and the system packages a browser env needs."""
        return f"pip install 'agentgym-rl[{self.extra}]' and {APT_HINT}"
