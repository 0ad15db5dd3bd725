"""Arithmetic the compiled kernels share, written once: numpy's pairwise summation and numpy's division, where a
plain compiled ``sum`` or ``/`` would round differently or raise.

A kernel anywhere in the package may call these: ``oltunes.jit`` stamps every kernel's disk cache with this file's
contents too, so a change here recompiles the kernels that inlined it.
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.jit import compiled

__all__ = ["divide", "pairwise_sum"]


@compiled
def _block_sum(a: np.ndarray, lo: int, n: int) -> float:
    """numpy's pairwise sum of ``a[lo:lo + n]`` for n <= 128 (``pairwise_sum`` in its ``loops_utils.h``): a plain
    loop from -0.0 below 8, else 8 accumulators combined as a tree and the rest added in order."""
    if n < 8:
        r = -0.0
        for i in range(lo, lo + n):
            r += a[i]
        return r
    r0, r1, r2, r3, r4, r5, r6, r7 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3], a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = lo + 8
    end = lo + n - n % 8
    while i < end:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    r = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < lo + n:
        r += a[i]
        i += 1
    return r


@compiled
def pairwise_sum(a: np.ndarray, lo: int, n: int) -> float:
    """numpy's pairwise sum of ``a[lo:lo + n]`` (a contiguous vector): above 128 the two halves (the first a
    multiple of 8) summed apart, then added; walked with an explicit stack (a recursive function's cached machine
    code crashed when loaded). ``a.sum()`` is ``0.0 +`` this: numpy's ``add.reduce`` starts from 0.0."""
    if n <= 128:  # (no stack to allocate: the kernels' sums are mostly this short)
        return _block_sum(a, lo, n)
    los, ns, phase, vals = np.empty(64, np.intp), np.empty(64, np.intp), np.zeros(64, np.int8), np.empty(64)
    top, ret = 0, 0.0
    los[0], ns[0] = lo, n
    while top >= 0:
        m = ns[top]
        h = m // 2 - (m // 2) % 8
        if phase[top] == 0:
            if m <= 128:
                ret = _block_sum(a, los[top], m)
                top -= 1
                continue
            phase[top] = 1
            top += 1
            los[top], ns[top], phase[top] = los[top - 1], h, 0
        elif phase[top] == 1:
            vals[top], phase[top] = ret, 2
            top += 1
            los[top], ns[top], phase[top] = los[top - 1] + h, m - h, 0
        else:
            ret = vals[top] + ret
            top -= 1
    return ret


@compiled
def divide(a: float, b: float) -> float:
    """``a / b`` as numpy divides (numba raises on a zero divisor): +-inf, a NaN ``a`` itself, and for 0 / 0 the
    processor's default NaN (x86: the sign bit set)."""
    if b == 0.0:
        if math.isnan(a):
            return a
        if a == 0.0:
            return math.copysign(math.nan, -1.0)
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b
