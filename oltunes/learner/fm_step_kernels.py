"""The dense FM's learning step up to its gradient (``fm_learning.FMLearning._sgd_step``), compiled: one observation's
latent sums, its prediction, its error (on standardised targets if asked), the robust weights (and their running
scales) and the clipped gradient per target, in one call. The parameters' step is ``ftml_kernel.fm_step_update``'s.

Why compiled: ~25 numpy calls and Python loops over a handful of targets per step; at cluster scale
(``benchmarks.sim_speed``, 1,000 devices, ~21,000 steps) their overhead outweighed the arithmetic. What it must equal:
the numpy formulation (``tests/learner/test_fm_step_equivalence.py`` keeps it), bit for bit: the same IEEE operations
in the same order (no ``fastmath``), sums in numpy's order, Python's ``min``/``max`` as written (NaN kept the way
they keep it). The linear term ``vals @ W[rows]`` is a BLAS product and stays numpy's (its order of additions is
BLAS's own): the caller passes it in.
"""

from __future__ import annotations

import numpy as np

from oltunes.jit import compiled
from oltunes.kernel_math import pairwise_sum

__all__ = ["ROBUST_RATE", "ROBUST_WARMUP", "fm_step_error"]

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
