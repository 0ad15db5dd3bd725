"""The dense FM's per-row sums as one compiled pass (numpy takes a dozen small calls for them per scoring).

For padded index arrays (rows, vals) of shape (n, m), per row i and target t:

* ``lin[i, t]`` = Σ_j W[rows[i, j], t]·vals[i, j], added to +0.0 in j's order (numpy's sum over a non-last axis);
* ``s[i, t, :]`` = Σ_j V[rows[i, j], t, :]·vals[i, j], likewise;
* ``q[i, t]`` = Σ_j ‖V[rows[i, j], t, :]·vals[i, j]‖², each j's squared norm a pairwise sum over the factors
  (numpy's sum over the contiguous last axis) added to the running total in j's order: what
  ``(xv * xv).sum(axis=(1, 3))`` does;
* ``inter[i, t]`` = ½(‖s[i, t]‖² − q[i, t]), the norm again a pairwise sum.

The same operations in the same order as the numpy expressions (``tests/learner/test_fm_kernels.py`` checks it bit
for bit), so predictions and decisions do not move.
"""

from __future__ import annotations

import numpy as np

from oltunes.jit import compiled
from oltunes.kernel_math import pairwise_sum

__all__ = ["MAX_FACTORS", "grid_sum", "key_overlap", "newcomer_sums", "part_sums", "prefixed_unary"]

MAX_FACTORS = 128  # the kernels' latent sums are tested against numpy's up to 128 factors


@compiled
def part_sums(W: np.ndarray, V: np.ndarray, rows: np.ndarray,
              vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lin, s, q, inter) of padded index arrays: shapes (n, T), (n, T, k), (n, T), (n, T)."""
    n, m = rows.shape
    T, k = V.shape[1], V.shape[2]
    lin = np.empty((n, T))
    s = np.empty((n, T, k))
    q = np.empty((n, T))
    inter = np.empty((n, T))
    xv, sq = np.empty(k), np.empty(k)
    for i in range(n):
        for t in range(T):
            r0, v0 = rows[i, 0], vals[i, 0]
            acc = 0.0 + W[r0, t] * v0  # (numpy's reduction starts from +0.0: a -0.0 product comes out +0.0)
            for c in range(k):
                xv[c] = V[r0, t, c] * v0
                s[i, t, c] = 0.0 + xv[c]
                sq[c] = xv[c] * xv[c]
            qt = pairwise_sum(sq, 0, len(sq))
            for j in range(1, m):
                r, v = rows[i, j], vals[i, j]
                acc += W[r, t] * v
                for c in range(k):
                    xv[c] = V[r, t, c] * v
                    s[i, t, c] += xv[c]
                    sq[c] = xv[c] * xv[c]
                qt += pairwise_sum(sq, 0, len(sq))
            lin[i, t] = acc
            q[i, t] = qt
            for c in range(k):
                sq[c] = s[i, t, c] * s[i, t, c]
            inter[i, t] = 0.5 * (pairwise_sum(sq, 0, len(sq)) - qt)
    return lin, s, q, inter


@compiled
def prefixed_unary(W: np.ndarray, V: np.ndarray, head_rows: np.ndarray, head_vals: np.ndarray, rows: np.ndarray,
                   vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``part_sums`` of every row of (rows, vals) with the one-row (head_rows, head_vals) before it (the job's
    features before each placement's, padding included, as ``fm_scoring._prefixed`` lays them out), without
    building those arrays: (unary, s), unary[t, i] = lin[i, t] + inter[i, t] (T, n), s (n, T, k). The same
    operations in the same order as ``part_sums`` on the prefixed arrays, written out again: the shared loop as
    helper kernels, inlined or not, made both 1.5-2x slower (measured on 40 and 400 rows)."""
    n, m1 = rows.shape
    m0 = head_rows.shape[1]
    T, k = V.shape[1], V.shape[2]
    unary = np.empty((T, n))
    s = np.empty((n, T, k))
    xv, sq = np.empty(k), np.empty(k)
    for i in range(n):
        for t in range(T):
            r0, v0 = head_rows[0, 0], head_vals[0, 0]
            acc = 0.0 + W[r0, t] * v0  # (numpy's reduction starts from +0.0: a -0.0 product comes out +0.0)
            for c in range(k):
                xv[c] = V[r0, t, c] * v0
                s[i, t, c] = 0.0 + xv[c]
                sq[c] = xv[c] * xv[c]
            qt = pairwise_sum(sq, 0, len(sq))
            for j in range(1, m0 + m1):
                if j < m0:
                    r, v = head_rows[0, j], head_vals[0, j]
                else:
                    r, v = rows[i, j - m0], vals[i, j - m0]
                acc += W[r, t] * v
                for c in range(k):
                    xv[c] = V[r, t, c] * v
                    s[i, t, c] += xv[c]
                    sq[c] = xv[c] * xv[c]
                qt += pairwise_sum(sq, 0, len(sq))
            for c in range(k):
                sq[c] = s[i, t, c] * s[i, t, c]
            unary[t, i] = acc + 0.5 * (pairwise_sum(sq, 0, len(sq)) - qt)
    return unary, s


@compiled
def grid_sum(block: np.ndarray, w0: np.ndarray, unary: np.ndarray, cross: np.ndarray, at: np.ndarray,
             sd: np.ndarray, mu: np.ndarray, scale: bool, plus_a: np.ndarray, plus_b: np.ndarray) -> np.ndarray:
    """The candidate grid (T, D, S) in one pass: per cell, ``block[t, s] + w0[t]``, then the dynamic group's own
    term ``unary[t, d]`` (none when ``unary`` has no columns), then its cross term with each static group m in
    order, ``cross[t, d, at[m, s]]``, then ``x * sd[t] + mu[t]`` if ``scale``, then ``plus_a[t, d, s]`` and
    ``plus_b[t, d, s]`` (each skipped when empty): the additions ``raw_grid``'s broadcasts (and its caller's
    sums) made, in their order, without their passes over the grid and temporaries."""
    T, S = block.shape
    D = max(unary.shape[1], 1)
    M = at.shape[0]
    out = np.empty((T, D, S))
    for t in range(T):
        for d in range(D):
            for s in range(S):
                x = block[t, s] + w0[t]
                if unary.shape[1]:
                    x += unary[t, d]
                    for m in range(M):
                        x += cross[t, d, at[m, s]]
                if scale:
                    x = x * sd[t] + mu[t]
                if plus_a.size:
                    x = x + plus_a[t, d, s]
                if plus_b.size:
                    x = x + plus_b[t, d, s]
                out[t, d, s] = x
    return out


@compiled
def key_overlap(rows_a: np.ndarray, vals_a: np.ndarray, rows_d: np.ndarray, vals_d: np.ndarray) -> np.ndarray:
    """Where the padded index arrays' features meet: ``out[i, j, m]`` = vals_a[i, a] if row i of (rows_a, vals_a)
    has the feature of entry m of row j of (rows_d, vals_d) (at a), else +0.0. Padding (value 0) meets nothing; a
    feature sits at most once in a row (``index`` of a dict), so every entry is written at most once."""
    n, wa = rows_a.shape
    nd, md = rows_d.shape
    out = np.zeros((n, nd, md))
    for i in range(n):
        for a in range(wa):
            v = vals_a[i, a]
            if v == 0.0:
                continue
            f = rows_a[i, a]
            for j in range(nd):
                for m in range(md):
                    if vals_d[j, m] != 0.0 and rows_d[j, m] == f:
                        out[i, j, m] = v
    return out


@compiled
def newcomer_sums(y_a: np.ndarray, y_d: np.ndarray, cross: np.ndarray, a_at: np.ndarray, vals_d: np.ndarray,
                  norms: np.ndarray, sd: np.ndarray, mu: np.ndarray, scale: bool) -> np.ndarray:
    """``raw_sums_of``'s outputs (n_a, n_d, T) from its BLAS product ``cross`` (T, n_a, n_d), in one pass:
    ``(y_a[i, t] + y_d[j, t]) + cross[t, i, j]``, less (if ``a_at`` has rows) the overlap correction
    Σ_m (a_at[i, j, m]·vals_d[j, m])·norms[j, m, t] added to +0.0 in m's order (numpy's einsum of three operands
    without a BLAS path), then ``x * sd[t] + mu[t]`` if ``scale``: the numpy expressions' operations, in order."""
    n, nd = cross.shape[1], cross.shape[2]
    T = y_a.shape[1]
    md = vals_d.shape[1]
    out = np.empty((n, nd, T))
    for i in range(n):
        for j in range(nd):
            for t in range(T):
                x = (y_a[i, t] + y_d[j, t]) + cross[t, i, j]
                if a_at.shape[0]:
                    c = 0.0
                    for m in range(md):
                        c += (a_at[i, j, m] * vals_d[j, m]) * norms[j, m, t]
                    x -= c
                if scale:
                    x = x * sd[t] + mu[t]
                out[i, j, t] = x
    return out
