"""The package's compiled kernels' decorator: numba's ``njit``, its machine code cached on disk where it can be.

Compiling every kernel once takes ~12 s of CPU (a first simulated run that fits the correction and the FM, 2026-11:
the correction's rounds ~4 s, its slopes block ~5 s, the rest ~1 s each or less); loading them from the cache ~0.2 s.
The test suite and the simulator spawn many processes, so the code is cached (``cache=True``): in ``__pycache__``
next to the kernel's module, or, where that directory is not writable, numba's per-user cache (``NUMBA_CACHE_DIR``
moves both); only the first process after a kernel's file changes compiles it. Where no cache location is writable
(a read-only install run by a user without a home), numba refuses ``cache=True`` at import: the kernels are then
compiled in memory in every process instead. Lazy (typed at the first call) rather than eager signatures: every call
passes the same types, and eager ones would compile, or load, at import in processes that never fit.

numba's cache notices changes to the kernel's own file only, not to kernels it calls in other modules: a kernel calls
only kernels of its own module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import njit

__all__ = ["compiled"]


def compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` compiled (no ``fastmath``: the same IEEE operations in the same order), cached where it can be."""
    try:
        return njit(cache=True)(fn)
    except RuntimeError:  # "no locator available": nowhere writable to cache
        return njit(fn)
