"""Where generated data, indexes and converted models are cached on disk.

One environment variable for every family: ``$AGENTGYM_CACHE_DIR`` (default ``~/.cache/agentgym``).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV_VAR = "AGENTGYM_CACHE_DIR"


def cache_root() -> Path:
    """``$AGENTGYM_CACHE_DIR`` or ``~/.cache/agentgym`` (not created here)."""
    return Path(os.environ.get(CACHE_ENV_VAR) or Path.home() / ".cache" / "agentgym").expanduser()
