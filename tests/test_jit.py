"""The kernels' decorator: cached on disk where numba can, compiled in memory where it cannot (no failure at import)."""

from __future__ import annotations

import pytest
from numba import njit

from oltunes.jit import compiled


def test_a_function_numba_cannot_cache_is_still_compiled():
    """A function with no source file (where a read-only package without a writable home leaves numba too) has no
    cache location: ``njit(cache=True)`` refuses it, ``compiled`` compiles it in memory."""
    ns: dict = {}
    exec("def add_one(x):\n    return x + 1.0\n", ns)  # noqa: S102 (a function without a file, on purpose)
    with pytest.raises(RuntimeError, match="no locator"):
        njit(cache=True)(ns["add_one"])
    f = compiled(ns["add_one"])
    assert f(1.5) == 2.5 and f.signatures  # compiled (typed at its first call)


def test_a_kernel_is_cached_next_to_its_module():
    from oltunes.tuner.correction_kernels import tree_counts

    assert tree_counts._cache is not None and type(tree_counts._cache).__name__ == "FunctionCache"
