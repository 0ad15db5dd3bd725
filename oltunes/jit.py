"""The package's compiled kernels' decorator: numba's ``njit``, its machine code cached on disk where it can be.

Compiling every kernel once takes ~12 s of CPU (a first simulated run that fits the correction and the FM, 2026-11:
the correction's rounds ~4 s, its slopes block ~5 s, the rest ~1 s each or less); loading them from the cache ~0.2 s.
The test suite and the simulator spawn many processes, so the code is cached: in ``__pycache__`` next to the kernel's
module, or, where that directory is not writable, numba's per-user cache (``NUMBA_CACHE_DIR`` moves both); only the
first process after a kernel's file changes compiles it. Where no cache location is writable (a read-only install run
by a user without a home), the kernels are compiled in memory in every process instead. Lazy (typed at the first call)
rather than eager signatures: every call passes the same types, and eager ones would compile, or load, at import in
processes that never fit.

numba stamps a cached kernel with its own file's contents only, yet a kernel's machine code includes the kernels it
calls: a kernel calling one of another file would keep stale code when that file changed. So a kernel calls only
kernels of its own module and the shared arithmetic of ``oltunes.kernel_math``, and here every kernel's stamp covers
that file too (``_SharedStamp``: numba's own locators, the stamp extended).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numba import njit
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    InTreeCacheLocator,
    UserProvidedCacheLocator,
    UserWideCacheLocator,
)

__all__ = ["compiled"]

SHARED = Path(__file__).with_name("kernel_math.py")  # the one file of kernels that kernels of other files call


@functools.cache
def _shared_hash() -> bytes:
    return hashlib.sha256(SHARED.read_bytes()).digest()


class _SharedStamp:
    """A locator's source stamp (the kernel's file's hash) with the shared kernels' file's hash appended."""

    def get_source_stamp(self):
        return (super().get_source_stamp(), _shared_hash())


class _UserProvided(_SharedStamp, UserProvidedCacheLocator):
    pass


class _InTree(_SharedStamp, InTreeCacheLocator):
    pass


class _UserWide(_SharedStamp, UserWideCacheLocator):
    pass


class _Impl(CompileResultCacheImpl):
    _locator_classes = (_UserProvided, _InTree, _UserWide)  # numba's order, notebooks and zips left out


class KernelCache(FunctionCache):
    """numba's function cache, its stamp covering ``oltunes.kernel_math`` too."""

    _impl_class = _Impl


def compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` compiled (no ``fastmath``: the same IEEE operations in the same order), cached where it can be."""
    dispatcher = njit(fn)
    try:
        # what ``njit(cache=True)`` does (``Dispatcher.enable_caching``), with this module's cache class
        dispatcher._cache = KernelCache(fn)
    except RuntimeError:  # "no locator available": nowhere writable to cache; compiled in memory
        pass
    return dispatcher
