"""The package's compiled kernels' decorator: numba's ``njit``, its machine code cached on disk where it can be.

Compiling every kernel takes seconds (README: the measured cost), and the test suite spawns many processes, so the
code is cached (``cache=True``): in ``__pycache__`` next to the kernel's module, or, where that directory is not
writable, numba's per-user cache (``NUMBA_CACHE_DIR`` moves both); only the first process after a change compiles.
Where no cache location is writable (a read-only install run by a user without a home), numba refuses ``cache=True``
at import: the kernels are then compiled in memory in every process instead. Lazy (typed from the first call) rather
than eager signatures: every call passes the same array types, and an eager signature would compile at import even
in processes that never fit.
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
