"""Compiled kernels of the pooled correction's fit (``PooledCorrection._fit``), the whole fit in one call (``fit``):
the trees' counts, rounds of backfitting (both trees' passes up and down, the families' centring, the convergence
test) and, after each ``step`` of rounds, the slopes block: the families' growth scales (``tuner.growth_scale``), the
batch elasticity (``tuner.elasticity``) and the intensity slopes (``tuner.intensity``) given both trees' fit. After
a chunk of measurements, the fit and the chunk's configurations' corrections before and after it are one call too
(``fit_around``, ``PooledCorrection.learn_many``): as three calls, their set-up and numba's dispatch cost ~4 % of the
tuner's observe CPU at 1,000 devices (``benchmarks.sim_speed``, side by side).

Why compiled: a round was ~75 numpy calls on tables of a few hundred configurations x 3 targets, a slopes block ~60,
and at cluster scale (``benchmarks.sim_speed``, 1,000 devices) tens of thousands of rounds spent their time in numpy's
per-call overhead, not in arithmetic. Why one call: with a block of rounds and a slopes block as two calls, a fit of a
few blocks still spent as much in Python set-up and numba's dispatch of the many arguments as in arithmetic. Why one
file, long as it is: a kernel calls only kernels of its own module (``oltunes.jit``: the disk cache's stamp covers
that file and ``oltunes.kernel_math`` only), and ``fit_around`` calls every kernel here.

What they must equal: the numpy formulation (kept as the reference in ``tests/tuner/correction_reference.py``), bit
for bit (``tests/tuner/test_correction_kernels.py``). ``np.bincount`` with weights adds each bin's weights in index
order starting from 0.0, so a loop over the (target, element) pairs in order makes the same sums; element-wise
``+ - * /`` are the same IEEE operations (no ``fastmath``: no reassociation, no fused multiply-add); a row's
``sum`` follows numpy's pairwise summation (``_row_sum``); ``np.clip`` is ``max`` then ``min`` (NaN kept),
``np.divide(..., where=...)`` leaves 0.0 where not. No exp or log here (numpy's SIMD versions may differ from
libm's by an ulp). A term that is absent in the numpy formulation (no intensity known) is absent here too, not added
as 0.0: ``x + 0.0`` is not ``x`` for ``x = -0.0``.

A tree is given as plain arrays, its levels coarse to fine (``correction_trees.tree_arrays`` builds them): ``leaf``
the leaf group of each configuration, ``par`` every level's parent per group side by side (the root level's are 0),
``ng`` groups per level, ``g_off`` where each level starts in ``par`` and in a (target, all levels' groups) table,
``ks`` each level's pseudo-count, ``eff_off`` where each level's effect starts in the (target, all effects) table.
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.jit import compiled
from oltunes.kernel_math import pairwise_sum

__all__ = ["cell_corrections", "centre_growth", "clip", "elastic_fit", "fit", "fit_around", "fit_rounds", "fit_start",
           "intensity_fit", "refit_slopes", "scale_fit", "slopes_within_kind", "tree_counts"]


@compiled
def _row_sum(a: np.ndarray) -> float:
    """``a.sum()`` of a contiguous 1-D array as numpy reduces it: 0.0 + the pairwise sum."""
    return 0.0 + pairwise_sum(a, 0, len(a))


@compiled
def tree_counts(N: np.ndarray, leaf: np.ndarray, par: np.ndarray, ng: np.ndarray, g_off: np.ndarray,
                ks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per level of a tree (columns ``g_off[l]:g_off[l + 1]``): the measurements under each group ``n``, the share
    of its data it passes up ``k / (n + k)``, and ``n + k``; from ``N`` (T, configurations)."""
    T, C = N.shape
    L = len(ng)
    G = g_off[L]
    n, share, npk = np.zeros((T, G)), np.empty((T, G)), np.empty((T, G))
    lo = g_off[L - 1]
    for t in range(T):
        for c in range(C):
            n[t, lo + leaf[c]] += N[t, c]
    for level in range(L - 1, -1, -1):
        a, k = g_off[level], ks[level]
        for t in range(T):
            for g in range(ng[level]):
                npk[t, a + g] = n[t, a + g] + k
                share[t, a + g] = k / npk[t, a + g]
        if level:
            p0 = g_off[level - 1]
            for t in range(T):
                for g in range(ng[level]):
                    n[t, p0 + par[a + g]] += n[t, a + g] * share[t, a + g]
    return n, share, npk


@compiled
def _tree_pass(S, N, other, tree, share, npk, eff, mu, mu_den, sums, cum):
    """Exact posterior means of one tree given partial residual sums ``S - N * other`` (T, configurations; ``other``:
    the other tree's sum per configuration, taken element by element as numpy's two operations): writes each level's
    effect into ``eff``, returns the tree's sum per configuration and how far ``mu`` moved. With ``mu_den`` (the
    accelerator tree) the root ``mu`` (updated in place) is shrunk towards the prior; without (the variant tree),
    the root level towards 0."""
    leaf, par, ng, g_off, ks, eff_off = tree
    T, C = S.shape
    L = len(ng)
    lo = g_off[L - 1]
    sums[:] = 0.0
    for t in range(T):  # up: the leaf groups' sums, then each group's data as a message to its parent
        for c in range(C):
            sums[t, lo + leaf[c]] += S[t, c] - N[t, c] * other[t, c]
    for level in range(L - 1, 0, -1):
        a, p0 = g_off[level], g_off[level - 1]
        for t in range(T):
            for g in range(ng[level]):
                sums[t, p0 + par[a + g]] += sums[t, a + g] * share[t, a + g]
    change, first = 0.0, 0
    if len(mu_den):  # the root: mu, shrunk towards the prior by its evidence
        row = np.empty(ng[0])
        for t in range(T):
            for g in range(ng[0]):
                row[g] = sums[t, g] * share[t, g]
            m = _row_sum(row) / mu_den[t]
            d = abs(m - mu[t])
            if d > change or math.isnan(d):  # NaN propagates, as numpy's max
                change = d
            mu[t] = m
    else:  # a root under 0: its data shrunk towards 0
        for t in range(T):
            for g in range(ng[0]):
                v = sums[t, g] / npk[t, g]
                cum[t, g] = v
                eff[t, eff_off[0] + g] = v
        first = 1
    for level in range(first, L):  # down: a group's cumulative value = its data shrunk towards its parent's
        a, k = g_off[level], ks[level]
        p0 = g_off[level - 1] if level else 0
        for t in range(T):
            for g in range(ng[level]):
                up = mu[t] if level == 0 else cum[t, p0 + par[a + g]]
                v = (sums[t, a + g] + k * up) / npk[t, a + g]
                cum[t, a + g] = v
                eff[t, eff_off[level] + g] = v - up
    side = np.empty((T, C))
    for t in range(T):
        for c in range(C):
            side[t, c] = cum[t, lo + leaf[c]]
    return side, change


@compiled
def fit_rounds(rounds, S, N, var_side, eff, mu, mu_den, acc_tree, acc_counts, var_tree, var_counts, fam_kind,
               kind_of_cell, kind_off, tol):
    """Up to ``rounds`` rounds of backfitting (``PooledCorrection._fit``): the accelerator tree given the variant
    side, the variant tree given the accelerator side, the families' centring per kind; stops once neither ``mu``
    nor the variant side moves by ``tol``. ``S``: the configurations' sums less the slopes' terms; ``eff`` (T, all
    effects) and ``mu`` updated in place; ``*_counts``: ``tree_counts``' (share, n + k) tables, and the variant
    tree's ``n``. Returns both sides per configuration and whether it converged."""
    T, C = S.shape
    var_share, var_npk, var_n = var_counts
    acc_share, acc_npk = acc_counts
    acc_g, var_g = acc_tree[3], var_tree[3]
    acc_sums, acc_cum = np.empty((T, acc_g[-1])), np.empty((T, acc_g[-1]))
    var_sums, var_cum = np.empty((T, var_g[-1])), np.empty((T, var_g[-1]))
    n_fam, fam_off = var_tree[2][0], var_tree[5][0]
    K = acc_tree[2][0]  # kinds
    n_kind = np.zeros((T, K))  # the families' weights per kind (their measurements), fixed over the fit
    for t in range(T):
        for f in range(n_fam):
            n_kind[t, fam_kind[f]] += var_n[t, f]
    no_mu = np.empty(0)
    acc_side = np.zeros((T, C))
    for _ in range(rounds):
        acc_side, mu_change = _tree_pass(S, N, var_side, acc_tree, acc_share, acc_npk, eff, mu, mu_den,
                                         acc_sums, acc_cum)
        new_var_side, _ = _tree_pass(S, N, acc_side, var_tree, var_share, var_npk, eff, mu, no_mu,
                                     var_sums, var_cum)
        # the families' centring: each kind's mean family effect (weighted by measurements) moves into the kind, the
        # fit unchanged. Both trees can carry a common offset per kind (all families up, the kind down); only the
        # weak priors tell them apart, so alternating between the trees would take many rounds to share it out.
        shift = np.zeros((T, K))
        for t in range(T):
            for f in range(n_fam):
                shift[t, fam_kind[f]] += var_n[t, f] * eff[t, fam_off + f]
            for k in range(K):
                shift[t, k] = shift[t, k] / n_kind[t, k] if n_kind[t, k] > 0 else 0.0
            for f in range(n_fam):
                eff[t, fam_off + f] -= shift[t, fam_kind[f]]
            for k in range(K):
                eff[t, kind_off + k] += shift[t, k]
        change = mu_change
        moved = 0.0
        for t in range(T):
            for c in range(C):
                v = new_var_side[t, c] - shift[t, kind_of_cell[c]]
                d = abs(v - var_side[t, c])
                if d > moved or math.isnan(d):
                    moved = d
                new_var_side[t, c] = v
        if moved > change:  # noqa: PLR1730 (Python's max(mu's change, the variant side's), NaN as Python keeps it)
            change = moved
        var_side = new_var_side
        if change < tol:
            return acc_side, var_side, True
    return acc_side, var_side, False


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
def intensity_terms(coef, mean, x, known, acc_of):
    """``_intensity_term`` of every (target, configuration) (T, configurations): what a slopes block reads twice
    (the intensity slopes as of their last fit) and the next one reads again, computed once."""
    T, C = mean.shape[0], len(acc_of)
    out = np.empty((T, C))
    for t in range(T):
        for c in range(C):
            out[t, c] = _intensity_term(coef, mean, x, known, acc_of[c], t, c)
    return out


@compiled
def refit_slopes(sides, tilt, i_coef, i_mean, i_term, refit_tilt, fixed):
    """The slopes block (``PooledCorrection._fit``) given both trees' fit ``sides`` (T, configurations): the growth
    scales (``scale``: coef, updated in place, k, bounds), then, with ``refit_tilt``, the batch elasticity on the
    growth as the correction now predicts it (``elastic``: growth, x and coef updated in place, centres, k, bounds,
    the full-batch counts), then, where any intensity is known, the intensity slopes (``intensity``: active, x and
    known per configuration, the groups' parents, k, bounds; ``i_coef, i_mean`` as of their last fit, ``i_term`` their
    term per configuration, ``intensity_terms``'). Returns the sums less the slopes' terms, the tilt per configuration,
    the elasticity's centres' means (empty without ``refit_tilt``), the intensity slopes, centres and terms.
    ``fixed``: what does not change over a fit, in one tuple (the configurations' sums ``S`` and counts ``N``, the
    prior's growth per configuration, the effects' groups per configuration ``idx`` and parents, the effects ``eff``
    and where three of them start, the counts of the shape, configuration and accelerator x variant levels,
    ``scale``, ``elastic``, ``intensity``)."""
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
                u = u + i_term[t, c]
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
                    v = v + i_term[t, c]
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
        i_term = intensity_terms(i_coef, i_mean, i_x, i_known, acc_of)
    out = np.empty((T, C))
    for t in range(T):
        for c in range(C):
            v = tilt[t, c] + scaled[t, c]
            if active:
                v = v + i_term[t, c]
            out[t, c] = S[t, c] - N[t, c] * v
    return out, tilt, el_mean, i_coef, i_mean, i_term


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


@compiled
def fit(rounds, step, S, N, x_growth, eff, mu, root_k, tol, tilt, i_coef, i_mean, refit_tilt, trees, groups, state):
    """A whole fit (``PooledCorrection._fit``): both trees' counts (``tree_counts``), the start (``fit_start``), then
    up to ``rounds`` rounds, ``step`` at a time (``fit_rounds``), each ``step`` followed by the slopes block
    (``refit_slopes``), until converged. ``S, N``: the configurations' sums and counts; ``eff`` (T, all effects), ``mu``
    and the slopes' coefficients in ``state`` updated in place; ``tilt``: the elasticity's per configuration as of its
    last fit; ``i_coef, i_mean``: the intensity slopes as of theirs. ``trees``: the accelerator and variant trees
    (``correction_trees.tree_arrays``), the kind of each family group and of each configuration; ``groups``: per
    configuration its (shape, fam, acc, acc_var, cfg) and its variant tree's groups, and the (shape, var, cfg, acc)
    parents; ``state``: ``scale``, ``elastic``, ``intensity`` as ``refit_slopes`` reads them. Returns the tilt, the
    elasticity's centres' means (empty without ``refit_tilt``), the intensity slopes and centres, the slopes blocks
    run, and each tree's counts, (share, n + k, n)."""
    acc_tree, var_tree, fam_kind, kind_of_cell = trees
    idx, var_groups, parents = groups
    scale, elastic, intensity = state
    T = S.shape[0]
    acc_n, acc_share, acc_npk = tree_counts(N, acc_tree[0], acc_tree[1], acc_tree[2], acc_tree[3], acc_tree[4])
    var_n, var_share, var_npk = tree_counts(N, var_tree[0], var_tree[1], var_tree[2], var_tree[3], var_tree[4])
    S_untilted, var_side = fit_start(S, N, tilt, scale[0], x_growth, eff, var_tree[5], (idx[1], idx[2], var_groups),
                                     (intensity[0], i_coef, i_mean, intensity[1], intensity[2]))
    # mu's denominator, the same every round: the kinds' (n x share) summed, + the prior's evidence
    K = acc_tree[2][0]
    mu_den, row = np.empty(T), np.empty(K)
    for t in range(T):
        for g in range(K):
            row[g] = acc_n[t, g] * acc_share[t, g]
        mu_den[t] = _row_sum(row) + root_k
    va, aa = var_tree[3], acc_tree[3]  # where the shape, accelerator x variant and configuration levels' columns are
    fixed = (S, N, x_growth, idx, parents, eff, (var_tree[5][2], acc_tree[5][3], acc_tree[5][4]),
             (var_n[:, va[2]:va[3]], var_share[:, va[2]:va[3]]), acc_share[:, aa[4]:aa[5]],
             (acc_n[:, aa[3]:aa[4]], acc_share[:, aa[3]:aa[4]]), scale, elastic, intensity)
    el_mean = np.empty((T, 0))
    # the intensity slopes' term per configuration as of their last fit (none: never read)
    i_term = intensity_terms(i_coef, i_mean, intensity[1], intensity[2], idx[2]) if intensity[0] else np.empty((T, 0))
    blocks = 0
    for done in range(0, rounds, step):
        acc_side, var_side, converged = fit_rounds(min(step, rounds - done), S_untilted, N, var_side, eff, mu, mu_den,
                                                   acc_tree, (acc_share, acc_npk), var_tree,
                                                   (var_share, var_npk, var_n), fam_kind, kind_of_cell, 0, tol)
        S_untilted, tilt, mean, i_coef, i_mean, i_term = refit_slopes(acc_side + var_side, tilt, i_coef, i_mean,
                                                                      i_term, refit_tilt, fixed)
        blocks += 1
        if refit_tilt:
            el_mean = mean
        if converged:
            break
    return tilt, el_mean, i_coef, i_mean, blocks, (acc_share, acc_npk, acc_n), (var_share, var_npk, var_n)


@compiled
def cell_corrections(cells, idx, eff, eff_at, mu, elastic, scale, intensity):
    """The corrections (configurations, T) of known configurations ``cells`` as the effects stand
    (``PooledCorrection._current`` by column): ``mu`` + each effect of its groups (``idx``: the group per
    configuration of each effect, (effects, configurations); ``eff_at`` where each effect starts in ``eff``), added in
    that order, + the batch elasticity's tilt (``elastic``: coef, x, shape groups; 0.0 for an accelerator beyond its
    coefficients), + the family growth scale x the prior's growth (``scale``: coef, the growth per shape group; 0.0
    beyond its coefficients), + the intensity slope's term where any intensity is known (``intensity``: active, coef,
    mean, x and known per configuration; 0.0 for an accelerator beyond its slopes or a variant of unknown
    intensity)."""
    el_coef, el_x, n_shapes = elastic
    s_coef, growth = scale
    active, i_coef, i_mean, i_x, i_known = intensity
    T = len(mu)
    out = np.empty((len(cells), T))
    for i in range(len(cells)):
        j = cells[i]
        acc, fam, shape = idx[1, j], idx[2, j], idx[4, j]
        for t in range(T):
            v = mu[t]
            for e in range(idx.shape[0]):
                v = v + eff[t, eff_at[e] + idx[e, j]]
            v = v + (el_coef[t, acc] * el_x[t, shape] if acc < el_coef.shape[1] and shape < n_shapes else 0.0)
            v = v + (s_coef[t, fam] if fam < s_coef.shape[1] else 0.0) * growth[shape]
            if active:
                v = v + (i_coef[t, acc] * (i_x[j] - i_mean[t, acc]) if acc < i_coef.shape[1] and i_known[j] else 0.0)
            out[i, t] = v
    return out


@compiled
def fit_around(cells, idx, eff_at, before_coef, n_shapes, growth, rounds, step, S, N, x_growth, eff, mu, root_k, tol,
               tilt, i_coef, i_mean, refit_tilt, trees, groups, state):
    """A whole ``fit`` (its arguments from ``rounds`` on) with the corrections of the configurations ``cells`` read
    around it by ``cell_corrections`` (``idx, eff_at`` as there; the elasticity's coefficients as they stood
    ``before_coef``, as many shape groups as it has ``n_shapes``, the prior's growth per shape group ``growth``): each
    one's "before", the correction before the fit moved along the fit's change by the share of them learnt before it
    (``PooledCorrection.learn_many``: ``b + (a - b) * (k / n)``, the first ``b`` as it is), and each one's "after".
    Returns them, then what ``fit`` returns. Read before the fit writes ``eff``, ``mu`` and the slopes' tables in place:
    the very values the correction stood at."""
    scale, elastic, intensity = state
    active, i_x, i_known = intensity[0], intensity[1], intensity[2]
    before = cell_corrections(cells, idx, eff, eff_at, mu, (before_coef, elastic[1], n_shapes), (scale[0], growth),
                              (active, i_coef, i_mean, i_x, i_known))
    out = fit(rounds, step, S, N, x_growth, eff, mu, root_k, tol, tilt, i_coef, i_mean, refit_tilt, trees, groups,
              state)
    after = cell_corrections(cells, idx, eff, eff_at, mu, (elastic[2], elastic[1], n_shapes), (scale[0], growth),
                             (active, out[2], out[3], i_x, i_known))
    n = len(cells)
    moved = before.copy()
    for i in range(1, n):
        share = i / n
        for t in range(before.shape[1]):
            moved[i, t] = before[i, t] + (after[i, t] - before[i, t]) * share
    return moved, after, out
