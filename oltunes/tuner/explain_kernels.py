"""The runner-ups' grid scans (``explain.runner_ups``) in one compiled pass: each (option, variant) pair's best
feasible objective and its cell, and the best infeasible cell, where numpy makes two masked copies of the grid, a transposed
copy, a minimum and an argmin.

The same results as those numpy calls (``tests/tuner/test_explain_kernels.py`` checks them bit for bit):
``np.min``'s NaN propagation, ``np.argmin``'s first NaN or else first minimum.
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.jit import compiled

__all__ = ["pair_minima"]


@compiled
def pair_minima(feasible: np.ndarray, obj: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(best, at, worst_first): ``best[p, v]`` = min over the pair's cells of obj where feasible, else inf (NaN if
    any such value is NaN); ``at[p, v]`` = where it is among the pair's (B x C) cells, as ``np.argmin`` of obj where
    feasible (else inf) finds it when ``best[p, v]`` is finite; ``worst_first`` = the flat argmin of obj where
    infeasible, else inf (the first NaN, or else the first minimum)."""
    P, V, B, C = obj.shape
    best = np.empty((P, V))
    best_at = np.zeros((P, V), dtype=np.int64)
    at, low, low_nan = 0, math.inf, False
    flat = 0
    for p in range(P):
        for v in range(V):
            m, mi, cell = math.inf, 0, 0
            for b in range(B):
                for c in range(C):
                    x = obj[p, v, b, c]
                    if feasible[p, v, b, c]:
                        if not math.isnan(m) and (math.isnan(x) or x < m):
                            m, mi = x, cell
                    elif not low_nan and (math.isnan(x) or x < low):
                        at, low, low_nan = flat, x, math.isnan(x)
                    flat += 1
                    cell += 1
            best[p, v] = m
            best_at[p, v] = mi
    return best, best_at, at
