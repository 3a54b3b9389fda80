"""Optional dependencies: import an engine, or say which extra to install."""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType

from gymnasium.error import DependencyNotInstalled


class MissingExtraError(ImportError, DependencyNotInstalled):
    """An env's engine is not installed; the message names the pip command that fixes it.

    Also Gymnasium's ``DependencyNotInstalled``, which ``gym.make`` raises for a missing dependency
    (``TextEnv.__init__`` checks the id's extra, so ``make`` fails rather than the first ``reset``).
    """


def _missing(what: str, extra: str) -> MissingExtraError:
    return MissingExtraError(f"this environment needs {what}, which is not installed. "
                             f"Install it with: pip install 'agentgym-rl[{extra}]'")


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ``MissingExtraError`` naming ``pip install 'agentgym-rl[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise _missing(f"the Python module {module!r}", extra) from error


def distribution_version(distribution: str, extra: str) -> str:
    """The installed version of a distribution, or ``MissingExtraError`` naming the extra.

    ``importlib.metadata.version`` raises a bare ``PackageNotFoundError`` that says nothing about
    how to fix it; envs that key caches or data on a package's version ask through this instead.
    """
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError as error:
        raise _missing(f"the package {distribution!r}", extra) from error
