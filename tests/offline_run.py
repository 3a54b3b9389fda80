"""Running an example or benchmark script in a subprocess the way the tests all do: offline, one thread."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: No downloads; one torch thread per process (the suite runs beside other jobs); no tokenizer fork warnings.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_offline(command: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """``command`` in ``cwd`` with ``OFFLINE_ENV`` over this environment; output captured, exit code not checked."""
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **OFFLINE_ENV}, cwd=cwd,
                          timeout=timeout)
