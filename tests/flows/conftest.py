"""Flow tests run for real: Prefect's test harness (a real ephemeral API on SQLite), a real MLflow SQLite store,
real worker processes running ONNX Runtime on the session's shared zoo (``built_zoo``, copied: never modified).
"""

from __future__ import annotations

import shutil
import socket

import pytest

from oltunes.config import get_settings


@pytest.fixture(scope="session")
def flows_home(tmp_path_factory, built_zoo):
    home = tmp_path_factory.mktemp("flows-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("OLTUNES_HOME", str(home))
    for var in ("OLTUNES_TUNER_URL", "OLTUNES_MLFLOW_TRACKING_URI"):
        mp.delenv(var, raising=False)
    get_settings.cache_clear()
    shutil.copytree(built_zoo, home / "zoo")
    yield home
    mp.undo()
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def prefect_api(flows_home):
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def settings_env(monkeypatch, flows_home, prefect_api):
    """Per-test setting overrides (monkeypatch.setenv then settings_env()) that never leak into other tests."""

    def apply() -> None:
        get_settings.cache_clear()

    yield apply
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def dataset(flows_home, tmp_path_factory):
    from oltunes.zoo import make_dataset

    return make_dataset("cnn", 1_500, tmp_path_factory.mktemp("data") / "cnn-1500.parquet", seed=1)


@pytest.fixture
def closed_url():
    """A loopback URL nobody listens on: a real 'unreachable' service."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
