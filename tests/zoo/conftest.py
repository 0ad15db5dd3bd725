"""`built_zoo`: the full zoo built once per test session (shared dir, so every area's copy of this fixture
reuses the same cached build)."""

from __future__ import annotations

import pytest

from oltunes.zoo import build_zoo


@pytest.fixture(scope="session")
def built_zoo(tmp_path_factory):
    zoo_dir = tmp_path_factory.getbasetemp() / "built-zoo"
    build_zoo(zoo_dir)
    return zoo_dir
