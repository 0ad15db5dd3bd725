"""Shared fixtures: every test gets its own OLTUNES_HOME so runtime state never leaks between tests."""

from __future__ import annotations

import os

import pytest

from oltunes.config import OFFLINE_ENV, REPO_ROOT, Settings, get_settings

for _k, _v in OFFLINE_ENV.items():
    os.environ.setdefault(_k, _v)

SHARED_DATA = Settings().shared_data


@pytest.fixture
def oltunes_home(tmp_path, monkeypatch):
    home = tmp_path / "oltunes-home"
    monkeypatch.setenv("OLTUNES_HOME", str(home))
    get_settings.cache_clear()
    yield home
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data folder {SHARED_DATA} is absent (it sits beside the repo as ../shared/data)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def repo_root():
    return REPO_ROOT


@pytest.fixture(scope="session")
def built_zoo(tmp_path_factory):
    """The full shipped zoo, built once per test session (seeded and cached, so every area shares it)."""
    from oltunes.zoo import build_zoo

    zoo_dir = tmp_path_factory.getbasetemp() / "built-zoo"
    build_zoo(zoo_dir)
    return zoo_dir
