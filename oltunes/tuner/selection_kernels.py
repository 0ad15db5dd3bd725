"""The least-violating fallback (``Selector.least_violating``) over the candidate grid in one compiled pass: the
graded violation of every cell and the first cell in its lexicographic order, where numpy makes a dozen passes
and temporaries over the grid, then a key-by-key search (``selection.lexsort_first``).

The same arithmetic in the same order as the numpy expressions, ``np.maximum``'s NaN propagation and
``lexsort``'s comparisons (NaN above every number and tied with NaN, -0.0 tied with 0.0, the first of the
tied); ``tests/tuner/test_selection_kernels.py`` checks it bit for bit. ``lexsort_first5``: the choice's
tie-breaks (``selection.lexsort_first`` of five float keys) in one pass.
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.jit import compiled
from oltunes.kernel_math import divide

__all__ = ["graded_violation", "lexsort_first5"]


@compiled
def _maximum(a: float, b: float) -> float:
    """``np.maximum`` of two numbers: NaN if either is (the operands are never 0.0 and -0.0 here: x - 1.0 is
    never -0.0)."""
    if math.isnan(a):
        return a
    if math.isnan(b):
        return b
    return a if a >= b else b  # noqa: FURB136 (the tie rule spelled out, not left to max)


@compiled
def _before(x: float, y: float) -> bool:
    """``x`` sorts before ``y`` (lexsort's order: NaN last)."""
    return x < y or (math.isnan(y) and not math.isnan(x))


@compiled
def graded_violation(req_lat: np.ndarray, pess_thr: np.ndarray, obj: np.ndarray, cap_fail: np.ndarray,
                     co_fail: np.ndarray, shortfall: np.ndarray, crowd: np.ndarray, slo_ms: float,
                     streaming: bool, demand: float, crowding: float) -> tuple[int, np.ndarray]:
    """(first, graded) over (P, V, B, C): graded = max(0, req_lat / slo - 1) (streaming: also
    max(that, demand / pess_thr - 1)) + crowding x crowd[p] + co_fail x 1.0; ``first`` the flat index of
    lexsort's first by (cap_fail, shortfall[v], graded, obj); the graded returned as inf where the cell fails
    the device or the accuracy floor."""
    P, V, B, C = obj.shape
    graded = np.empty((P, V, B, C))
    first = -1
    bc, bs, bg, bo = 0, 0.0, 0.0, 0.0
    flat = 0
    for p in range(P):
        for v in range(V):
            for b in range(B):
                for c in range(C):
                    over = _maximum(0.0, divide(req_lat[p, v, b, c], slo_ms) - 1.0)
                    if streaming:
                        over = _maximum(over, divide(demand, pess_thr[p, v, b, c]) - 1.0)
                    g = over + crowding * crowd[p] + (1.0 if co_fail[p, v, b, c] else 0.0)
                    cf, sf, o = int(cap_fail[p, v, b, c]), shortfall[v], obj[p, v, b, c]
                    if first < 0 or (cf < bc) or (cf == bc and (_before(sf, bs) or (not _before(bs, sf) and (
                            _before(g, bg) or (not _before(bg, g) and _before(o, bo)))))):
                        first, bc, bs, bg, bo = flat, cf, sf, g, o
                    graded[p, v, b, c] = math.inf if (cf or sf > 0) else g
                    flat += 1
    return first, graded


@compiled
def _order(x: float, y: float) -> int:
    """-1, 0 or 1 as ``x`` sorts before, with or after ``y`` (lexsort's order: NaN last, tied with NaN; -0.0 tied
    with 0.0)."""
    if _before(x, y):
        return -1
    if _before(y, x):
        return 1
    return 0


@compiled
def lexsort_first5(k0: np.ndarray, k1: np.ndarray, k2: np.ndarray, k3: np.ndarray, k4: np.ndarray) -> int:
    """``np.lexsort((k0, k1, k2, k3, k4))[0]`` (k4 the primary key) of five float keys of one length: the first
    position whose keys, primary first, none sorts before."""
    best = 0
    for i in range(1, len(k0)):
        c = _order(k4[i], k4[best])
        if c == 0:
            c = _order(k3[i], k3[best])
            if c == 0:
                c = _order(k2[i], k2[best])
                if c == 0:
                    c = _order(k1[i], k1[best])
                    if c == 0:
                        c = _order(k0[i], k0[best])
        if c < 0:
            best = i
    return best
