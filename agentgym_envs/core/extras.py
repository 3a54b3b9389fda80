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
    return MissingExtraError(f"{what} is not installed (it comes with the [{extra}] extra). "
                             f"Install it with: pip install 'agentgym-rl[{extra}]'")


def not_installed(modules: list[str]) -> str:
    """``"the Python module 'a', which is not installed"``, or ``"the Python modules 'a' and 'b', which are ..."``."""
    names = [repr(module) for module in modules]
    if len(names) == 1:
        return f"the Python module {names[0]}, which is not installed"
    return f"the Python modules {', '.join(names[:-1])} and {names[-1]}, which are not installed"


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ``MissingExtraError`` naming ``pip install 'agentgym-rl[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise _missing(f"The Python module {module!r}", extra) from error


def distribution_version(distribution: str, extra: str) -> str:
    """The installed version of a distribution, or ``MissingExtraError`` naming the extra.

    ``importlib.metadata.version`` raises a bare ``PackageNotFoundError`` that says nothing about
    how to fix it; envs that key caches or data on a package's version ask through this instead.
    """
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError as error:
        raise _missing(f"The package {distribution!r}", extra) from error
