"""Compiled kernels of the pooled correction's fit (``oltunes.tuner.correction``): a tree's counts, and rounds of
backfitting (both trees' passes up and down, the families' centring, the convergence test).

Why compiled: a round was ~75 numpy calls on tables of a few hundred configurations x 3 targets, and at cluster scale
(``benchmarks.sim_speed``, 1,000 devices) tens of thousands of rounds spent their time in numpy's per-call overhead,
not in arithmetic. Here a block of rounds is one call over plain arrays.

What they must equal: the numpy formulation (kept as the reference in ``tests/tuner/correction_reference.py``), bit
for bit (``tests/tuner/test_correction_kernels.py``). ``np.bincount`` with weights adds each bin's weights in index
order starting from 0.0, so a loop over the (target, element) pairs in order makes the same sums; element-wise
``+ - * /`` are the same IEEE operations (no ``fastmath``: no reassociation, no fused multiply-add); a row's
``sum`` follows numpy's pairwise summation (``_row_sum``). No exp or log here (numpy's SIMD versions may differ from
libm's by an ulp).

Compiled lazily and cached on disk (``oltunes.jit.compiled``; a kernel calls only kernels of its own module and of
``oltunes.kernel_math``, the two files its cache's stamp covers).

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

__all__ = ["add_measurements", "cell_corrections", "fit_rounds", "tree_counts"]


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
def _tree_pass(x, tree, share, npk, eff, mu, mu_den, sums, cum):
    """Exact posterior means of one tree given partial residual sums ``x`` (T, configurations): writes each level's
    effect into ``eff``, returns the tree's sum per configuration and how far ``mu`` moved. With ``mu_den`` (the
    accelerator tree) the root ``mu`` (updated in place) is shrunk towards the prior; without (the variant tree),
    the root level towards 0."""
    leaf, par, ng, g_off, ks, eff_off = tree
    T, C = x.shape
    L = len(ng)
    lo = g_off[L - 1]
    sums[:] = 0.0
    for t in range(T):  # up: the leaf groups' sums, then each group's data as a message to its parent
        for c in range(C):
            sums[t, lo + leaf[c]] += x[t, c]
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
        acc_side, mu_change = _tree_pass(S - N * var_side, acc_tree, acc_share, acc_npk, eff, mu, mu_den,
                                         acc_sums, acc_cum)
        new_var_side, _ = _tree_pass(S - N * acc_side, var_tree, var_share, var_npk, eff, mu, no_mu,
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
def cell_corrections(cells, idx, eff, eff_at, mu, elastic, scale, intensity):
    """The corrections (configurations, T) of known configurations ``cells`` as the effects stand
    (``PooledCorrection._current`` by column): ``mu`` + each effect of its groups (``idx``: the group per
    configuration of each effect, ``eff_at`` where each effect starts in ``eff``), added in that order, + the batch
    elasticity's tilt (``elastic``: coef, x, shape groups; 0.0 for an accelerator beyond its coefficients), + the
    family growth scale x the prior's growth (``scale``: coef, the growth per shape group; 0.0 beyond its
    coefficients), + the intensity slope's term where any intensity is known (``intensity``: active, coef, mean, x
    and known per configuration; 0.0 for an accelerator beyond its slopes or a variant of unknown intensity)."""
    el_coef, el_x, n_shapes = elastic
    s_coef, growth = scale
    active, i_coef, i_mean, i_x, i_known = intensity
    T = len(mu)
    out = np.empty((len(cells), T))
    for i in range(len(cells)):
        j = cells[i]
        acc, fam, shape = idx[1][j], idx[2][j], idx[4][j]
        for t in range(T):
            v = mu[t]
            for e in range(len(idx)):
                v = v + eff[t, eff_at[e] + idx[e][j]]
            v = v + (el_coef[t, acc] * el_x[t, shape] if acc < el_coef.shape[1] and shape < n_shapes else 0.0)
            v = v + (s_coef[t, fam] if fam < s_coef.shape[1] else 0.0) * growth[shape]
            if active:
                v = v + (i_coef[t, acc] * (i_x[j] - i_mean[t, acc]) if acc < i_coef.shape[1] and i_known[j] else 0.0)
            out[i, t] = v
    return out


@compiled
def add_measurements(sums, counts, tilt_counts, cells, ys, masks, full, decay):
    """Measurements, in order, into their configurations' decayed sums, counts and full-batch counts (T, columns),
    in place (``PooledCorrection._add_all``): for each measured target, ``decay · s + y``, ``decay · n + 1`` and
    ``decay · f + full``; unmeasured ones left as they are. ``cells``: each measurement's column; ``ys, masks``:
    (measurements, T); ``full``: 1.0 for a measurement of full batches, else 0.0."""
    for i in range(len(cells)):
        j = cells[i]
        for t in range(sums.shape[0]):
            if masks[i, t]:
                sums[t, j] = decay * sums[t, j] + ys[i, t]
                counts[t, j] = decay * counts[t, j] + 1.0
                tilt_counts[t, j] = decay * tilt_counts[t, j] + full[i]
