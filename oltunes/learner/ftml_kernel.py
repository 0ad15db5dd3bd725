"""FTML's rule (``oltunes.learner.ftml``), compiled: the update of one coordinate (or of arrays of them, element-wise),
and the row path's step over a parameter table's active rows in one call.

Why compiled: the FM takes two row steps per observation and replay (its weights, its latents), each ~15 numpy calls
on a handful of rows; at cluster scale (``benchmarks.sim_speed``, 1,000 devices) their per-call overhead was ~2 of
the ~11 s the tuner spent learning. What it must equal: the numpy formulation, bit for bit (the same IEEE operations
in the same order: no ``fastmath``, so no fused multiply-add or reassociation; ``sqrt`` is correctly rounded
everywhere); ``tests/learner/test_fm_step_equivalence.py`` keeps the numpy step as the reference. Compiled lazily
and cached on disk (``oltunes.jit.compiled``).
"""

from __future__ import annotations

import numpy as np

from oltunes.jit import compiled

__all__ = ["fm_step_update", "ftml_rows", "ftml_rule"]


@compiled
def ftml_rule(theta, g, p1, p2, v, d_prev, z, lr, b1, b2, eps):
    """One FTML step of ``theta`` given gradient ``g``, ``p1, p2 = beta_1**t, beta_2**t`` and the state ``v, d, z``
    (``FTML``'s docstring gives the formulas); scalars or arrays alike. Returns (theta, v, d, z)."""
    v = b2 * v + (1.0 - b2) * g * g
    d = (1.0 - p1) / lr * (np.sqrt(v / (1.0 - p2)) + eps)
    sigma = d - b1 * d_prev
    z = b1 * z + (1.0 - b1) * g - sigma * theta
    return -z / d, v, d, z


@compiled
def ftml_rows(table, rows, g, ts, v, d, z, p1s, p2s, lr, b1, b2, eps):
    """``FTML.step_rows``: ``table[rows]`` (rows unique) and their state (``ts`` step counts, ``v, d, z`` shaped like
    the table) updated in place given the rows' gradients ``g``, the powers read from ``p1s, p2s`` (``beta**k``
    for k = 0, 1, ...). Returns False, changing nothing, when a row's next step count is beyond the tables."""
    for r in rows:
        if ts[r] + 1 >= len(p1s):
            return False
    n, m = table.shape[0], table.size // max(table.shape[0], 1)
    tf, vf, df, zf = table.reshape((n, m)), v.reshape((n, m)), d.reshape((n, m)), z.reshape((n, m))
    gf = g.reshape((len(rows), m))
    for i in range(len(rows)):
        r = rows[i]
        t = ts[r] + 1
        ts[r] = t
        p1, p2 = p1s[t], p2s[t]
        for j in range(m):
            tf[r, j], vf[r, j], df[r, j], zf[r, j] = ftml_rule(tf[r, j], gf[i, j], p1, p2, vf[r, j], df[r, j],
                                                               zf[r, j], lr, b1, b2, eps)
    return True


# -- the dense FM's parameter step given its gradient (``fm_learning.FMLearning._sgd_step``; the gradient is
# ``fm_step_kernels.fm_step_error``'s). Here, not in a module of its own: it runs ``ftml_rule``, and a kernel calls only
# kernels of its own module and of ``oltunes.kernel_math`` (the files its cache's stamp covers: ``oltunes.jit``).


@compiled
def _ready(ts, rows, p1s):
    """Whether every row's next step count is within the powers' tables (``ftml_rows``' check)."""
    for r in rows:
        if ts[r] + 1 >= len(p1s):
            return False
    return True


@compiled
def fm_step_update(W, V, rows, vals, s, g, l2_weight, l2_latent, w_opt, v_opt):
    """The FM's gradient step on its weights ``W`` (bias row 0, then ``rows``) and latents ``V`` (``rows``), each table
    updated in place by FTML's row path (``ftml_rows``) with its optimizer's state and constants ``w_opt, v_opt`` =
    (step counts, v, d, z, beta_1**k, beta_2**k, lr, beta_1, beta_2, eps). The gradients as
    ``FMLearning._sgd_step``'s numpy formulas make them, element by element: the bias row's ``1·g``, a weight row's
    ``vals[i]·g + l2_weight·W[r]`` and a latent row's ``g·(vals[i]·s − V[r]·vals[i]²) + l2_latent·V[r]``, read before
    the row is stepped (``rows`` unique, without 0). Returns False, changing nothing, when a row's next step count is
    beyond an optimizer's powers' tables."""
    wt, wv, wd, wz, wp1, wp2, wlr, wb1, wb2, weps = w_opt
    vt, vv, vd, vz, vp1, vp2, vlr, vb1, vb2, veps = v_opt
    if wt[0] + 1 >= len(wp1) or not _ready(wt, rows, wp1) or not _ready(vt, rows, vp1):
        return False
    T, k = V.shape[1], V.shape[2]
    n = wt[0] + 1
    wt[0] = n
    p1, p2 = wp1[n], wp2[n]
    for j in range(T):
        W[0, j], wv[0, j], wd[0, j], wz[0, j] = ftml_rule(W[0, j], 1.0 * g[j], p1, p2, wv[0, j], wd[0, j], wz[0, j],
                                                          wlr, wb1, wb2, weps)
    for i in range(rows.shape[0]):
        r, x = rows[i], vals[i]
        n = wt[r] + 1
        wt[r] = n
        p1, p2 = wp1[n], wp2[n]
        for j in range(T):
            gw = x * g[j] + l2_weight * W[r, j]
            W[r, j], wv[r, j], wd[r, j], wz[r, j] = ftml_rule(W[r, j], gw, p1, p2, wv[r, j], wd[r, j], wz[r, j],
                                                              wlr, wb1, wb2, weps)
    for i in range(rows.shape[0]):
        r, x = rows[i], vals[i]
        xx = x * x
        n = vt[r] + 1
        vt[r] = n
        p1, p2 = vp1[n], vp2[n]
        for j in range(T):
            for c in range(k):
                gv = g[j] * (x * s[j, c] - V[r, j, c] * xx) + l2_latent * V[r, j, c]
                V[r, j, c], vv[r, j, c], vd[r, j, c], vz[r, j, c] = ftml_rule(
                    V[r, j, c], gv, p1, p2, vv[r, j, c], vd[r, j, c], vz[r, j, c], vlr, vb1, vb2, veps)
    return True
