"""Where generated data, indexes and converted models are cached on disk.

One environment variable for every family: ``$AGENTGYM_CACHE_DIR``. Without it, the platform's cache folder as
``platformdirs`` knows it: ``~/.cache/agentgym`` on Linux (``$XDG_CACHE_HOME/agentgym`` where that is set),
``~/Library/Caches/agentgym`` on macOS, ``%LOCALAPPDATA%\\agentgym\\Cache`` on Windows. A ``~/.cache/agentgym``
that earlier versions filled on macOS or Windows (or before ``$XDG_CACHE_HOME`` was set) stays in use while the
platform's folder does not exist yet, so nothing already generated or converted is lost.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

CACHE_ENV_VAR = "AGENTGYM_CACHE_DIR"
APP_NAME = "agentgym"
LEGACY_CACHE_ROOT = Path("~/.cache") / APP_NAME  # the only default before platformdirs


def cache_root() -> Path:
    """``$AGENTGYM_CACHE_DIR``, else the platform's user cache folder for agentgym (not created here)."""
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    platform_root = platformdirs.user_cache_path(APP_NAME, appauthor=False)
    legacy_root = LEGACY_CACHE_ROOT.expanduser()
    if platform_root != legacy_root and legacy_root.is_dir() and not platform_root.exists():
        return legacy_root
    return platform_root
