"""The streaming objective's effective-batch energy (``objectives.effective_batch_energy``) as one compiled pass:
numpy needs a dozen small calls (a search, index arithmetic, a gather) on every decision's grid.

The same arithmetic in the same order as the numpy expression (``tests/tuner/test_objective_kernels.py`` checks
it bit for bit), so decisions do not move; the search is numpy's binary search for ``side="right"``, NaN above
every number.
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.jit import compiled

__all__ = ["effective_batch_cells"]


@compiled
def _right(b: np.ndarray, x: float) -> int:
    """``np.searchsorted(b, x, side="right")`` for an ascending ``b`` (a NaN ``x`` goes last)."""
    lo, hi = 0, b.shape[0]
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if x < b[mid] or (math.isnan(b[mid]) and not math.isnan(x)):  # x sorts before b[mid] (NaN sorts last)
            hi = mid
        else:
            lo = mid + 1
    return lo


@compiled
def effective_batch_cells(energy: np.ndarray, lat: np.ndarray, b: np.ndarray, c: np.ndarray,
                          rate: float) -> np.ndarray:
    """energy (P, V, B, C) read at the largest configured batch <= min(own batch, the effective batch
    1 + rate x batch-1 latency / 1000 / concurrency) (the first batch when none is)."""
    P, V, B, C = energy.shape
    out = np.empty((P, V, B, C))
    for p in range(P):
        for v in range(V):
            for j in range(C):
                top = _right(b, 1.0 + rate * lat[p, v, 0, j] / 1000.0 / c[j]) - 1
                for i in range(B):
                    out[p, v, i, j] = energy[p, v, max(min(top, i), 0), j]
    return out
