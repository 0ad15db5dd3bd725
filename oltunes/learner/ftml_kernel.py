"""FTML's rule (``oltunes.learner.ftml``), compiled: the update of one coordinate (or of arrays of them, element-wise),
and the row path's step over a parameter table's active rows in one call; and the dense FM's learning step
(``fm_learning.FMLearning._sgd_step``) on it, whole: its error and gradient (``fm_step_error``), its parameters' FTML
step (``fm_step_update``), or both in one call (``fm_step``).

Why compiled: the FM takes two row steps per observation and replay (its weights, its latents), each ~15 numpy calls
on a handful of rows, and ~25 numpy calls and Python loops over a handful of targets up to its gradient; at cluster
scale (``benchmarks.sim_speed``, 1,000 devices, ~21,000 steps) their per-call overhead outweighed the arithmetic. Why
in one file: a kernel calls only kernels of its own module and of ``oltunes.kernel_math`` (the files its cache's stamp
covers: ``oltunes.jit``), and ``fm_step`` runs them all.

What they must equal: the numpy formulation, bit for bit (the same IEEE operations in the same order: no
``fastmath``, so no fused multiply-add or reassociation; ``sqrt`` is correctly rounded everywhere; sums in numpy's
order; Python's ``min``/``max`` as written, NaN kept the way they keep it); ``tests/learner/test_fm_step_equivalence.py``
keeps the numpy step as the reference. The linear term ``vals @ W[rows]`` is a BLAS product and stays numpy's (its
order of additions is BLAS's own): the caller passes it in. Compiled lazily and cached on disk
(``oltunes.jit.compiled``).
"""

from __future__ import annotations

import numpy as np

from oltunes.jit import compiled
from oltunes.kernel_math import pairwise_sum

__all__ = ["ROBUST_RATE", "ROBUST_WARMUP", "fm_step", "fm_step_error", "fm_step_update", "ftml_rows", "ftml_rule"]

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


# -- the dense FM's learning step (``fm_learning.FMLearning._sgd_step``): its gradient, its parameters' step given it,
# and both in one call.


ROBUST_WARMUP = 20  # observations per target before robust down-weighting starts
ROBUST_RATE = 0.05  # decay of the running |residual| scale afterwards


@compiled
def _robust_weights(err, mask, c, scale, n_scale, update):
    """Down-weight residuals beyond ``c`` x the running mean |residual| (per target), ``(c s / |r|)^2``.

    Adaptive optimizers (FTML, Adam) normalise the gradient's size away, so clipping it (Huber) does not stop one
    failed measurement (e.g. a run that swapped: 400x its neighbours) from pulling the model as hard as a good one —
    and a replay buffer would pull again and again; this weight makes such a point's pull fade like a redescending
    M-estimator. The scale ``s`` follows the fresh (pre-update: ``update``) residuals: a plain mean over the first
    ``ROBUST_WARMUP`` (no weighting yet: a cold model is wrong everywhere), then an exponential average of
    ``min(|r|, 4 s)``, so that a real level shift raises ``s`` within tens of observations and is learned, not
    rejected. ``scale, n_scale`` updated in place."""
    T = err.shape[0]
    wt = np.empty(T)
    for t in range(T):
        a, lim = abs(err[t]), c * scale[t]
        if n_scale[t] >= ROBUST_WARMUP and a > lim:
            r = lim / (1e-12 if 1e-12 > a else a)  # noqa: FURB136 (Python's max(a, 1e-12), spelled out)
            wt[t] = r * r
        else:
            wt[t] = 1.0
    if update:
        for t in range(T):
            s, n = scale[t], n_scale[t]
            ready = n >= ROBUST_WARMUP
            if mask[t]:
                n += 1
            n_scale[t] = n
            if mask[t]:
                a = abs(err[t])
                rate = ROBUST_RATE if ready else 1.0 / (n if n > 1 else 1)  # noqa: FURB136
                capped = (4.0 * s if 4.0 * s < a else a) if ready else a  # noqa: FURB136 (Python's min(a, 4 s))
                scale[t] = s + rate * (capped - s)
    return wt


@compiled
def fm_step_error(W, lin, V, rows, vals, y, mask, w, clip, standardize, mu, sd, robust, c, scale, n_scale, fresh):
    """One observation's step up to its gradient. Returns (prediction (T,), gradient per target (T,), the latent sums
    ``s`` (T, k)):

    * ``s[t, :]`` = Σ_j V[rows[j], t, :]·vals[j] (from +0.0, in j's order: numpy's ``xv.sum(axis=0)``), and the
      interaction ``½(‖s[t]‖² − Σ_j ‖V[rows[j], t, :]·vals[j]‖²)``, each squared norm a pairwise sum over the factors
      and the j's added in order (``(xv * xv).sum(axis=(0, 2))``);
    * the raw prediction ``(W[0] + lin) + interaction`` (``lin = vals @ W[rows]``, numpy's); with ``standardize`` the
      error is taken on standardised targets, ``raw − (y − mu) / sd``, and the prediction returned is
      ``raw · sd + mu``; else the error is ``raw − y``;
    * with ``robust``, the error times its robust weight beyond ``c`` x the running scale (``_robust_weights``; the
      scales move when ``fresh``);
    * the gradient ``min(max(w · error, −clip), clip)`` where ``mask``, else 0.0."""
    T, k = V.shape[1], V.shape[2]
    s = np.zeros((T, k))
    sq = np.empty(k)
    yhat, err, g = np.empty(T), np.empty(T), np.empty(T)
    for t in range(T):
        q = 0.0
        for j in range(rows.shape[0]):
            r, x = rows[j], vals[j]
            for f in range(k):
                xv = V[r, t, f] * x
                s[t, f] += xv
                sq[f] = xv * xv
            q += pairwise_sum(sq, 0, len(sq))
        for f in range(k):
            sq[f] = s[t, f] * s[t, f]
        raw = (W[0, t] + lin[t]) + 0.5 * (pairwise_sum(sq, 0, len(sq)) - q)
        if standardize:
            err[t] = raw - (y[t] - mu[t]) / sd[t]
            yhat[t] = raw * sd[t] + mu[t]
        else:
            err[t] = raw - y[t]
            yhat[t] = raw
    if robust:
        wt = _robust_weights(err, mask, c, scale, n_scale, fresh)
        for t in range(T):
            err[t] = err[t] * wt[t]
    for t in range(T):
        if mask[t]:
            v = w * err[t]
            v = -clip if -clip > v else v  # noqa: FURB136 (Python's max(v, -clip): NaN kept as it keeps it)
            g[t] = clip if clip < v else v  # noqa: FURB136 (Python's min(v, clip))
        else:
            g[t] = 0.0
    return yhat, g, s


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



@compiled
def fm_step(W, lin, V, rows, vals, y, mask, w, clip, standardize, mu, sd, robust, c, scale, n_scale, fresh, l2_weight,
            l2_latent, w_opt, v_opt):
    """One observation's whole step in one call: ``fm_step_error`` (its arguments first), then ``fm_step_update`` on
    that gradient (the rest). Returns the prediction, the gradient, the latent sums and whether the update was made
    (False: the update declined, nothing but the error's robust scales changed)."""
    yhat, g, s = fm_step_error(W, lin, V, rows, vals, y, mask, w, clip, standardize, mu, sd, robust, c, scale, n_scale,
                               fresh)
    return yhat, g, s, fm_step_update(W, V, rows, vals, s, g, l2_weight, l2_latent, w_opt, v_opt)
