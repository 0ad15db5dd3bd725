"""The examples in the package's docstrings run and say what they print (`pytest` collects ``tests/`` only)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import oltunes


def _modules_with_examples() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(oltunes.__path__, "oltunes."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        if any(t.examples for t in doctest.DocTestFinder().find(module)):
            names.append(info.name)
    return names


MODULES = _modules_with_examples()


def test_the_package_has_examples_to_check() -> None:
    assert len(MODULES) >= 5, MODULES  # a broken walk would otherwise pass with nothing checked


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (run it with -s)"
