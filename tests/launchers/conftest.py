"""The session's shared zoo (``built_zoo``, copied) and a small real dataset for the launcher tests."""

from __future__ import annotations

import shutil

import pytest

from oltunes.config import get_settings


@pytest.fixture(scope="session")
def small_zoo(tmp_path_factory, built_zoo):
    home = tmp_path_factory.mktemp("launchers-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("OLTUNES_HOME", str(home))
    get_settings.cache_clear()
    shutil.copytree(built_zoo, home / "zoo")
    from oltunes.zoo import list_variants, make_dataset

    variant = next(v for v in list_variants(family="cnn") if v.name == "cnn-s-fp32")
    data = make_dataset("cnn", 600, home / "in.parquet", seed=3)
    yield variant, data
    mp.undo()
    get_settings.cache_clear()
