"""Flow tests run for real: Prefect's test harness (a real ephemeral API on SQLite), a real MLflow SQLite store,
real worker processes running ONNX Runtime on the session's shared zoo (``built_zoo``, copied: never modified).
"""

from __future__ import annotations

import shutil
import socket

import pytest
import yaml

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


@pytest.fixture
def own_home(settings_env, monkeypatch, flows_home, tmp_path):
    """A home of the test's own (the session's zoo linked in): its runs, tuner state and lease book touch no other
    test's."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "zoo").symlink_to(flows_home / "zoo")
    monkeypatch.setenv("OLTUNES_HOME", str(home))
    settings_env()
    return home


@pytest.fixture
def one_device_inventory(tmp_path):
    """Writes an inventory of one CPU pool with one device of `slots` slots; returns its path."""

    def write(name: str, slots: int):
        path = tmp_path / "inventory.yaml"
        path.write_text(yaml.safe_dump({"pools": [
            {"name": name, "accelerator": "cpu", "count": 1, "slots_per_device": slots, "cpu_set": [0]}]}))
        return path

    return write
