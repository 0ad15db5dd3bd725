"""The runner-ups' grid scans (``explain.runner_ups``) in one compiled pass: each (option, variant) pair's best
feasible objective, and the best infeasible cell, where numpy makes two masked copies of the grid, a transposed
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
def pair_minima(feasible: np.ndarray, obj: np.ndarray) -> tuple[np.ndarray, int]:
    """(best, worst_first): ``best[p, v]`` = min over the pair's cells of obj where feasible, else inf (NaN if
    any such value is NaN); ``worst_first`` = the flat argmin of obj where infeasible, else inf (the first NaN,
    or else the first minimum)."""
    P, V, B, C = obj.shape
    best = np.empty((P, V))
    at, low, low_nan = 0, math.inf, False
    flat = 0
    for p in range(P):
        for v in range(V):
            m = math.inf
            for b in range(B):
                for c in range(C):
                    x = obj[p, v, b, c]
                    if feasible[p, v, b, c]:
                        if not math.isnan(m) and (math.isnan(x) or x < m):
                            m = x
                    elif not low_nan and (math.isnan(x) or x < low):
                        at, low, low_nan = flat, x, math.isnan(x)
                    flat += 1
            best[p, v] = m
    return best, at
