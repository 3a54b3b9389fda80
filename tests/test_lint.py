"""The lint is part of the test suite, so CI (``bash scripts/setup.sh && python -m pytest -q``) keeps the code
within the project's own rules: ``[tool.ruff]`` in pyproject.toml (120 columns, pycodestyle and pyflakes)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINTED = ["agentgym_envs", "agentgym_trl", "tests", "benchmarks", "examples", "scripts"]


def ruff_command() -> list[str] | None:
    """How to run ruff here: the module of this Python (the ``[dev]`` extra installs it), else one on PATH."""
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    return [found] if found else None


def test_the_code_passes_ruff() -> None:
    command = ruff_command()
    if command is None:
        assert not os.environ.get("CI"), "CI must lint: scripts/setup.sh installs ruff with the [dev] extra"
        pytest.skip("ruff is not installed (it comes with the [dev] extra: pip install -e '.[dev]')")
    result = subprocess.run([*command, "check", "--no-cache", "--output-format", "concise", *LINTED], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"
