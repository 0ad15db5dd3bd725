"""Compiled kernels of the pooled correction's slopes block (in ``PooledCorrection._fit``): the families' growth
scales (``tuner.growth_scale``), the batch elasticity (``tuner.elasticity``) and the intensity slopes
(``tuner.intensity``) given both trees' fit, in one call.

Why compiled, and what they must equal: as ``oltunes.tuner.correction_kernels`` (its docstring): ~60 numpy calls a
block on tables of a few hundred configurations, now one call; bit for bit the numpy formulation kept as the
reference in ``tests/tuner/correction_reference.py``: a weighted ``np.bincount`` is a loop adding in index order
from 0.0, ``np.clip`` is ``max`` then ``min`` (NaN kept), ``np.divide(..., where=...)`` leaves 0.0 where not.

A term that is absent in the numpy formulation (no intensity known) is absent here too, not added as 0.0: ``x + 0.0``
is not ``x`` for ``x = -0.0``.
"""

from __future__ import annotations

import numpy as np

from oltunes.jit import compiled

__all__ = ["centre_growth", "clip", "elastic_fit", "fit_start", "intensity_fit", "refit_slopes", "scale_fit",
           "slopes_within_kind"]


@compiled
def clip(v: float, lo: float, hi: float) -> float:
    """``np.clip`` of one value (``minimum(maximum(v, lo), hi)``: NaN stays NaN)."""
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


@compiled
def slopes_within_kind(x, n, residual_sums, acc_of, kind_of_acc, k):
    """Ridge slopes (T, accelerators) of ``residual_sums`` on ``x`` per accelerator (``n``: each column's weight,
    ``acc_of``: its accelerator; ``k``: the pseudo-count), each less its kind's weighted mean: a slope common to a
    kind belongs to the effects the kind's accelerators share."""
    T, G = n.shape
    A = len(kind_of_acc)
    K = 0
    for a in range(A):
        K = max(K, kind_of_acc[a] + 1)
    w, c = np.zeros((T, A)), np.zeros((T, A))
    for t in range(T):
        for g in range(G):
            w[t, acc_of[g]] += n[t, g] * x[t, g] * x[t, g]
            c[t, acc_of[g]] += x[t, g] * residual_sums[t, g]
    kind_w, kind_wc = np.zeros((T, K)), np.zeros((T, K))
    for t in range(T):
        for a in range(A):
            c[t, a] = c[t, a] / (w[t, a] + k)
            kind_w[t, kind_of_acc[a]] += w[t, a]
            kind_wc[t, kind_of_acc[a]] += w[t, a] * c[t, a]
        for kk in range(K):
            kind_wc[t, kk] = kind_wc[t, kk] / kind_w[t, kk] if kind_w[t, kk] > 0 else 0.0
        for a in range(A):
            c[t, a] = c[t, a] - kind_wc[t, kind_of_acc[a]]
    return c


@compiled
def scale_fit(coef, x, weights, residual_sums, fam_of, k, lo, hi):
    """The families' growth scales into ``coef`` (T, families) (what ``GrowthScale`` holds): ridge coefficients on the
    prior's growth ``x`` per shape group, clipped to [lo, hi]."""
    T, F = coef.shape
    w, xy = np.zeros((T, F)), np.zeros((T, F))
    for t in range(T):
        for g in range(len(x)):
            w[t, fam_of[g]] += weights[t, g] * (x[g] * x[g])
            xy[t, fam_of[g]] += x[g] * residual_sums[t, g]
        for f in range(F):
            coef[t, f] = clip(xy[t, f] / (w[t, f] + k), lo, hi)


@compiled
def centre_growth(growth, shape, centre, n_groups, n_centres, x_out):
    """The batch elasticity's centred growth (``BatchElasticity.centred``): ``growth + shape`` per shape group, less
    its centre's mean, into ``x_out[:, :n_groups]``; returns the means (T, centres)."""
    T = growth.shape[0]
    count = np.zeros(n_centres, np.intp)
    for g in range(n_groups):
        count[centre[g]] += 1
    mean, grown = np.zeros((T, n_centres)), np.empty((T, n_groups))
    for t in range(T):
        for g in range(n_groups):
            grown[t, g] = growth[t, g] + shape[t, g]
            mean[t, centre[g]] += grown[t, g]
        for h in range(n_centres):
            mean[t, h] = mean[t, h] / max(count[h], 1)
        for g in range(n_groups):
            x_out[t, g] = grown[t, g] - mean[t, centre[g]]
    return mean


@compiled
def elastic_fit(coef, x, n, residual_sums, acc_of, kind_of_acc, k, lo, hi):
    """The batch elasticity's coefficients into ``coef[:, :accelerators]`` (``BatchElasticity.fit``)."""
    slopes = slopes_within_kind(x, n, residual_sums, acc_of, kind_of_acc, k)
    for t in range(slopes.shape[0]):
        for a in range(slopes.shape[1]):
            coef[t, a] = clip(slopes[t, a], lo, hi)


@compiled
def intensity_fit(weights, residual_sums, acc_var_of_cell, fam_of_acc_var, acc_of_acc_fam, kind_of_acc, x_cell,
                  known_cell, k, lo, hi):
    """The intensity slopes and their centres (T, accelerators) from per-(accelerator x variant) group data
    (``tuner.intensity``: ``weights`` what each group's data weighs, ``residual_sums`` their weighted sums less the
    other effects); accelerators with no known intensity keep 0."""
    T, G = weights.shape
    A = len(kind_of_acc)
    n_known, x_sum = np.zeros(G), np.zeros(G)
    for c in range(len(acc_var_of_cell)):
        n_known[acc_var_of_cell[c]] += known_cell[c]
        x_sum[acc_var_of_cell[c]] += x_cell[c] * known_cell[c]
    known, x, acc_of = np.empty(G), np.empty(G), np.empty(G, np.intp)
    for g in range(G):  # a group's cells share its variant: all known or none
        known[g] = 1.0 if n_known[g] > 0 else 0.0
        x[g] = x_sum[g] / n_known[g] if n_known[g] > 0 else 0.0
        acc_of[g] = acc_of_acc_fam[fam_of_acc_var[g]]
    n_acc, mean = np.zeros((T, A)), np.zeros((T, A))
    for t in range(T):
        for g in range(G):
            n = weights[t, g] * known[g]
            n_acc[t, acc_of[g]] += n
            mean[t, acc_of[g]] += n * x[g]
        for a in range(A):
            mean[t, a] = mean[t, a] / n_acc[t, a] if n_acc[t, a] > 0 else 0.0
    xc = np.empty((T, G))
    for t in range(T):
        for g in range(G):
            xc[t, g] = (x[g] - mean[t, acc_of[g]]) * known[g]
    coef = slopes_within_kind(xc, weights, residual_sums, acc_of, kind_of_acc, k)
    for t in range(T):
        for a in range(A):
            coef[t, a] = clip(coef[t, a], lo, hi) if n_acc[t, a] > 0 else 0.0
    return coef, mean


@compiled
def _intensity_term(coef, mean, x, known, a_cell, t, c):
    """The intensity slopes' term of one (target, configuration): 0.0 before the slopes' first fit, and for an
    accelerator newer than it."""
    A = coef.shape[1]
    if A == 0:
        return 0.0
    a = min(a_cell, A - 1)
    fitted = 1.0 if a_cell < A else 0.0
    return coef[t, a] * ((x[c] - mean[t, a]) * (known[c] * fitted))


@compiled
def refit_slopes(sides, tilt, i_coef, i_mean, refit_tilt, fixed):
    """The slopes block (``PooledCorrection._fit``) given both trees' fit ``sides`` (T, configurations): the growth
    scales (``scale``: coef, updated in place, k, bounds), then, with ``refit_tilt``, the batch elasticity on the
    growth as the correction now predicts it (``elastic``: growth, x and coef updated in place, centres, k, bounds,
    the full-batch counts), then, where any intensity is known, the intensity slopes (``intensity``: active, x and
    known per configuration, the groups' parents, k, bounds; ``i_coef, i_mean`` as of their last fit). Returns the
    sums less the slopes' terms, the tilt per configuration, the elasticity's centres' means (empty without
    ``refit_tilt``), the intensity slopes and centres. ``fixed``: what does not change over a fit, in one tuple (the
    configurations' sums ``S`` and counts ``N``, the prior's growth per configuration, the effects' groups per
    configuration ``idx`` and parents, the effects ``eff`` and where three of them start, the counts of the shape,
    configuration and accelerator x variant levels, ``scale``, ``elastic``, ``intensity``)."""
    S, N, x_growth, idx, parents, eff, eff_at, shape_counts, cfg_share, acc_var_counts = fixed[:10]
    scale, elastic, intensity = fixed[10:]
    T, C = S.shape
    shape_of, fam_of, acc_of, av_of, cfg_of = idx
    var_of_shape, fam_of_var, av_of_cfg, kind_of_acc = parents
    shape_off, av_off, cfg_off = eff_at
    shape_n, shape_share = shape_counts
    av_n, av_share = acc_var_counts
    coef_s, k_s, lo_s, hi_s = scale
    growth, el_x, el_coef, centre, n_centres, k_e, lo_e, hi_e, tilt_counts = elastic
    active, i_x, i_known, acc_of_acc_fam, fam_of_acc_var, k_i, lo_i, hi_i = intensity
    G = len(var_of_shape)
    fam_of_shape, x_shape = np.empty(G, np.intp), np.empty(G)
    for g in range(G):
        fam_of_shape[g] = fam_of_var[var_of_shape[g]]
        x_shape[g] = growth[0, g]
    # the growth scales, on the shape groups' sums with their own effects integrated out
    by_shape = np.zeros((T, G))
    for t in range(T):
        for c in range(C):
            u = sides[t, c] - eff[t, shape_off + shape_of[c]] + tilt[t, c]
            if active:
                u = u + _intensity_term(i_coef, i_mean, i_x, i_known, acc_of[c], t, c)
            by_shape[t, shape_of[c]] += S[t, c] - N[t, c] * u
    weights, residual = np.empty((T, G)), np.empty((T, G))
    for t in range(T):
        for g in range(G):
            weights[t, g] = shape_n[t, g] * shape_share[t, g]
            residual[t, g] = by_shape[t, g] * shape_share[t, g]
    scale_fit(coef_s, x_shape, weights, residual, fam_of_shape, k_s, lo_s, hi_s)
    scaled = np.empty((T, C))
    for t in range(T):
        for c in range(C):
            scaled[t, c] = coef_s[t, fam_of[c]] * x_growth[c]
    el_mean = np.empty((T, 0))
    if refit_tilt:  # the elasticity on the growth as the correction now predicts it
        shape = np.empty((T, G))
        for t in range(T):
            for g in range(G):
                shape[t, g] = eff[t, shape_off + g] + coef_s[t, fam_of_shape[g]] * x_shape[g]
        el_mean = centre_growth(growth, shape, centre, G, n_centres, el_x)
        x_cell, n_full, resid = np.empty((T, C)), np.empty((T, C)), np.empty((T, C))
        for t in range(T):
            for c in range(C):
                share = tilt_counts[t, c] / N[t, c] if N[t, c] > 0 else 0.0
                v = sides[t, c] + scaled[t, c]
                if active:
                    v = v + _intensity_term(i_coef, i_mean, i_x, i_known, acc_of[c], t, c)
                x_cell[t, c] = el_x[t, shape_of[c]]
                n_full[t, c] = N[t, c] * share
                resid[t, c] = (S[t, c] - N[t, c] * v) * share
        elastic_fit(el_coef, x_cell, n_full, resid, acc_of, kind_of_acc, k_e, lo_e, hi_e)
        tilt = np.empty((T, C))
        for t in range(T):
            for c in range(C):
                tilt[t, c] = el_coef[t, acc_of[c]] * el_x[t, shape_of[c]]
    if active:  # the intensity slopes, on the accelerator x variant groups' data, their own effects integrated out
        G_cfg, G_av = len(av_of_cfg), len(fam_of_acc_var)
        by_cfg = np.zeros((T, G_cfg))
        for t in range(T):
            for c in range(C):
                r = S[t, c] - N[t, c] * (sides[t, c] + scaled[t, c] + tilt[t, c])
                own = eff[t, av_off + av_of[c]] + eff[t, cfg_off + cfg_of[c]]
                by_cfg[t, cfg_of[c]] += r + N[t, c] * own
        by_av = np.zeros((T, G_av))
        for t in range(T):
            for q in range(G_cfg):
                by_av[t, av_of_cfg[q]] += by_cfg[t, q] * cfg_share[t, q]
        weights, residual = np.empty((T, G_av)), np.empty((T, G_av))
        for t in range(T):
            for g in range(G_av):
                weights[t, g] = av_n[t, g] * av_share[t, g]
                residual[t, g] = by_av[t, g] * av_share[t, g]
        i_coef, i_mean = intensity_fit(weights, residual, av_of, fam_of_acc_var, acc_of_acc_fam, kind_of_acc, i_x,
                                       i_known, k_i, lo_i, hi_i)
    out = np.empty((T, C))
    for t in range(T):
        for c in range(C):
            v = tilt[t, c] + scaled[t, c]
            if active:
                v = v + _intensity_term(i_coef, i_mean, i_x, i_known, acc_of[c], t, c)
            out[t, c] = S[t, c] - N[t, c] * v
    return out, tilt, el_mean, i_coef, i_mean


@compiled
def fit_start(S, N, tilt, scale_coef, x_growth, eff, var_at, idx, intensity):
    """What a fit starts from (``PooledCorrection._fit``), in one pass over the configurations: the sums less the
    slopes' terms as of their last fit, ``S − N·((tilt + scale·growth) + intensity term)`` (the intensity term only
    where ``active``), and the variant side, ``0 + fam + var + shape`` effects in that order (Python's ``sum`` of the
    three gathered tables). ``var_at``: where those three effects start in ``eff``; ``idx``: per configuration, its
    family, its accelerator and its (fam, var, shape) groups; ``intensity``: active, coef, mean, and x and known per
    configuration (``_intensity_term``)."""
    fam_of, acc_of, var_groups = idx
    active, i_coef, i_mean, i_x, i_known = intensity
    T, C = S.shape
    untilted, var_side = np.empty((T, C)), np.empty((T, C))
    for t in range(T):
        for c in range(C):
            v = tilt[t, c] + scale_coef[t, fam_of[c]] * x_growth[c]
            if active:
                v = v + _intensity_term(i_coef, i_mean, i_x, i_known, acc_of[c], t, c)
            untilted[t, c] = S[t, c] - N[t, c] * v
            side = 0.0
            for e in range(len(var_at)):
                side = side + eff[t, var_at[e] + var_groups[e][c]]
            var_side[t, c] = side
    return untilted, var_side
