"""The kernels' decorator: cached on disk where numba can, compiled in memory where it cannot (no failure at import)."""

from __future__ import annotations

import importlib.util

import pytest
from numba import njit

from oltunes import jit
from oltunes.jit import KernelCache, compiled


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
    from oltunes.sim.serve_kernels import serve_batches

    assert serve_batches._cache is not None and isinstance(serve_batches._cache, KernelCache)


def test_a_change_to_the_shared_kernels_file_recompiles_a_cached_kernel(tmp_path):
    """numba stamps a kernel's cache with its own file only; ``compiled`` adds ``kernel_math``'s, whose kernels the
    others inline: changed, every cached kernel is a miss (compiled afresh), unchanged a hit."""
    shared, mod = tmp_path / "kernel_math.py", tmp_path / "kmod.py"
    shared.write_text("# v1\n")
    mod.write_text("def twice(x):\n    return 2.0 * x\n")
    spec = importlib.util.spec_from_file_location("kmod", mod)
    kmod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kmod)
    real = jit.SHARED
    try:
        jit.SHARED = shared
        jit._shared_hash.cache_clear()

        def run():
            f = compiled(kmod.twice)
            assert f(2.0) == 4.0
            return sum(f.stats.cache_hits.values()), sum(f.stats.cache_misses.values())

        assert run() == (0, 1)  # compiled, saved beside kmod.py
        assert run() == (1, 0)  # loaded
        shared.write_text("# v2\n")
        jit._shared_hash.cache_clear()
        assert run() == (0, 1)  # the stamp moved: compiled again
        assert run() == (1, 0)
    finally:
        jit.SHARED = real
        jit._shared_hash.cache_clear()
