"""Where caches live: $AGENTGYM_CACHE_DIR, else platformdirs' user cache folder, and an older ~/.cache/agentgym
keeps serving where the platform's folder is elsewhere and still absent."""

from __future__ import annotations

import sys
from pathlib import Path

import platformdirs
import pytest

from agentgym_envs.core.cache import CACHE_ENV_VAR, cache_root


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    monkeypatch.delenv(CACHE_ENV_VAR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return tmp_path


def test_the_variable_wins_and_expands_the_home_folder(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV_VAR, "~/elsewhere")
    assert cache_root() == home / "elsewhere"


def test_default_is_the_platforms_user_cache_folder(home: Path) -> None:
    assert cache_root() == platformdirs.user_cache_path("agentgym", appauthor=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG layout is Linux's")
def test_linux_default_is_the_path_earlier_versions_used(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache_root() == home / ".cache" / "agentgym"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg"))
    assert cache_root() == home / "xdg" / "agentgym"  # the XDG convention, now that platformdirs decides


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="moves the platform folder through XDG_CACHE_HOME")
def test_an_existing_legacy_cache_is_kept_until_the_platform_folder_exists(home: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg"))
    legacy = home / ".cache" / "agentgym"
    (legacy / "models").mkdir(parents=True)
    assert cache_root() == legacy  # converted models and generated games are not made again
    (home / "xdg" / "agentgym").mkdir(parents=True)
    assert cache_root() == home / "xdg" / "agentgym"


def test_every_family_caches_under_the_root(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym_envs.alfworld import generator
    from agentgym_envs.search.embedded import dataset_dir
    from agentgym_envs.search.retrievers import index_dir
    from agentgym_envs.webshop.catalogue import cache_dir as webshop_cache
    from agentgym_trl.models import model_cache_dir

    monkeypatch.setenv(CACHE_ENV_VAR, str(home / "root"))
    for path in (generator.cache_dir(), dataset_dir(), index_dir(), webshop_cache(), model_cache_dir()):
        assert path.is_relative_to(home / "root"), path
