"""A small real zoo (cnn, size s) for the launcher tests; ``OLTUNES_TEST_ZOO`` may point at a built one to copy."""

from __future__ import annotations

import os
import shutil

import pytest

from oltunes.config import get_settings


@pytest.fixture(scope="session")
def small_zoo(tmp_path_factory):
    home = tmp_path_factory.mktemp("launchers-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("OLTUNES_HOME", str(home))
    get_settings.cache_clear()
    if os.environ.get("OLTUNES_TEST_ZOO"):
        shutil.copytree(os.environ["OLTUNES_TEST_ZOO"], home / "zoo")
    from oltunes.zoo import build_zoo, list_variants, make_dataset

    build_zoo(families=["cnn"], sizes=["s"])
    variant = next(v for v in list_variants(family="cnn") if v.name == "cnn-s-fp32")
    data = make_dataset("cnn", 600, home / "in.parquet", seed=3)
    yield variant, data
    mp.undo()
    get_settings.cache_clear()
