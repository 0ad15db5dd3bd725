"""Shared fixtures: every test gets its own OLTUNES_HOME so runtime state never leaks between tests."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from oltunes.config import OFFLINE_ENV, REPO_ROOT, Settings, get_settings

for _k, _v in OFFLINE_ENV.items():
    os.environ.setdefault(_k, _v)

SHARED_DATA = Settings().shared_data
_SESSION_HOME = tempfile.mkdtemp(prefix="oltunes-tests-")


def pytest_configure(config):
    # No test writes to the repo's .oltunes/ or the user's ~/.prefect: the whole session gets a scratch home.
    os.environ["OLTUNES_HOME"] = os.path.join(_SESSION_HOME, "home")
    os.environ["PREFECT_HOME"] = os.path.join(_SESSION_HOME, "prefect")
    for var in ("OLTUNES_TUNER_URL", "OLTUNES_MLFLOW_TRACKING_URI", "PREFECT_API_URL"):
        os.environ.pop(var, None)
    get_settings.cache_clear()


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_HOME, ignore_errors=True)


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
