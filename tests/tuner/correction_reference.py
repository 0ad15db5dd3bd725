"""The pooled correction's fit in plain numpy, as it ran before its compiled kernels (``oltunes.tuner
.fit_kernels``): the reference the kernels must equal bit for bit (``test_correction_kernels.py``). Not used at
run time."""

from __future__ import annotations

from functools import reduce
from operator import add

import numpy as np

from oltunes.tuner.correction import _TOL, MAX_ROUNDS, ROUNDS_PER_OBSERVATION, PooledCorrection
from oltunes.tuner.correction_trees import ACCELERATOR_TREE, EFFECTS, PARENTS, VARIANT_TREE, TreeCounts
from oltunes.tuner.elasticity import BOUNDS as ELASTICITY_BOUNDS
from oltunes.tuner.growth_scale import BOUNDS as SCALE_BOUNDS
from oltunes.tuner.growth_scale import GROWTH_TARGET
from oltunes.tuner.intensity import BOUNDS as INTENSITY_BOUNDS


class NumpyFit(PooledCorrection):
    """``PooledCorrection`` whose fit is the numpy one: per level one bincount and one lookup on the 2-D (target,
    group) tables, the families' centring, the rounds in Python; the slopes block (growth scales, elasticity,
    intensity slopes) by numpy's bincounts too; a configuration's correction added in Python floats."""

    def _structure(self):
        """The structure, with the flattened (target, group) bincount indices the numpy passes sum by."""
        st = super()._structure()
        if "leaf" not in st:
            T, idx, parent = self.n_targets, st["idx"], st["parent"]
            n_groups = {e: len(parent[e]) for e in EFFECTS}
            rows = np.arange(T)[:, None]

            def flat(group_of, n):
                return (group_of[None, :] + n * rows).ravel(), T * n

            st["cell_is_cfg"] = n_groups["cfg"] == st["n_cells"]
            st["leaf"] = {e: flat(idx[e], n_groups[e]) for e in ("cfg", "shape", "fam")}
            st["up"] = {c: flat(parent[c], n_groups[par]) for c, (_, par) in PARENTS.items() if par}
        return st

    @staticmethod
    def _sum_by(flat, x, T):
        return np.bincount(flat[0], x.ravel(), flat[1]).reshape(T, -1)

    def _leaf_sum(self, tree, st, x):
        if st["cell_is_cfg"] and tree[-1] == "cfg":
            return x + 0.0
        return self._sum_by(st["leaf"][tree[-1]], x, self.n_targets)

    def _tree_counts(self, tree, st, N):
        T = self.n_targets
        out = TreeCounts()
        n = self._leaf_sum(tree, st, N)
        for level in range(len(tree) - 1, -1, -1):
            e = tree[level]
            k = min(self.effect_k[e], 1e12)
            n_plus_k = n + k
            share = k / n_plus_k
            out[e] = (n, k, share, n_plus_k)
            if level:
                n = self._sum_by(st["up"][e], n * share, T)
        return out

    def _fit_tree(self, tree, st, counts, s_cell, mu_den=None):
        T = self.n_targets
        sums = {}
        s = self._leaf_sum(tree, st, s_cell)
        for level in range(len(tree) - 1, -1, -1):
            e = tree[level]
            sums[e] = s
            if level:
                s = self._sum_by(st["up"][e], s * counts[e][2], T)
        change = 0.0
        if mu_den is not None:
            mu = (s * counts[tree[0]][2]).sum(axis=1) / mu_den
            change = float(np.abs(mu - self._mu).max())
            self._mu = mu
            cum, levels = mu[:, None], tree
        else:
            cum = self._effects[tree[0]] = sums[tree[0]] / counts[tree[0]][3]
            levels = tree[1:]
        for e in levels:
            _, k, _, n_plus_k = counts[e]
            up = cum.take(st["parent"][e], axis=1)
            cum = (sums[e] + k * up) / n_plus_k
            self._effects[e] = cum - up
        if st["cell_is_cfg"] and tree[-1] == "cfg":
            return cum, change
        return cum.take(st["idx"][tree[-1]], axis=1), change

    def _centre_families(self, st, weights):
        n_fam, n, has = weights
        s = self._sum_by(st["up"]["fam_kind"], n_fam * self._effects["fam"], self.n_targets)
        shift = np.divide(s, n, out=np.zeros_like(s), where=has)
        self._effects["fam"] -= shift.take(st["parent"]["fam_kind"], axis=1)
        self._effects["kind"] += shift
        return shift

    def _refit_around(self, cells):
        """The fit and each configuration's correction before it (moved along the fit's change by the share of
        ``cells`` learnt before it) and after it, in numpy (what ``fit_kernels.fit_around`` does in one call)."""
        before = self._cell_corrections(cells)
        self._fit()
        after = self._cell_corrections(cells)
        moved = before + (after - before) * (np.arange(len(cells)) / len(cells))[:, None]
        moved[0] = before[0]
        return moved, after

    def _cell_corrections(self, cells):
        return np.array([self._cell_correction(j) for j in cells])

    def _cell_correction(self, j):
        effects, offsets = self._all_effects()
        groups = [int(self._idx[e][j]) for e in EFFECTS]
        rows = effects.take([g + o for g, o in zip(groups, offsets)], axis=1).tolist()
        out = [reduce(add, row, mu) for mu, row in zip(self._mu.tolist(), rows)]  # mu + kind + acc + ..., in order
        term = self.elastic.term(groups[1], groups[4], "", None)  # acc, shape
        out = np.add(out, term) if isinstance(term, np.ndarray) else np.array(out) + term
        out = out + self.scale.of(groups[2]) * self._shape_growth(groups[4])  # fam, shape
        return out + _intensity_cell(self.intensity, j, groups[1]) if self.intensity.active else out

    def _fit(self):
        if self._fitted == self.version:
            return
        fitted, self._fitted = self._fitted, self.version
        n_cells = len(self._cells)
        if n_cells == 0:
            return
        self._all = None
        st = self._structure()
        S, N = self._sums[:, :n_cells], self._counts[:, :n_cells]
        counts = self._fit_counts = {tree: self._tree_counts(tree, st, N) for tree in (ACCELERATOR_TREE, VARIANT_TREE)}
        acc_counts, var_counts = counts[ACCELERATOR_TREE], counts[VARIANT_TREE]
        idx = st["idx"]
        var_side = sum(self._effects[e].take(idx[e], axis=1) for e in VARIANT_TREE)
        x_growth = self.elastic.growth[GROWTH_TARGET].take(idx["shape"])
        S_untilted = S - N * self._plus_intensity(self._cell_tilt(st) + self._cell_scale(idx, x_growth), idx)
        n_top, _, share_top, _ = acc_counts[ACCELERATOR_TREE[0]]
        mu_den = (n_top * share_top).sum(axis=1) + self.root_k
        n_fam = var_counts["fam"][0]
        n = self._sum_by(st["up"]["fam_kind"], n_fam, self.n_targets)
        family_weights = n_fam, n, n > 0
        acc_side = None
        rounds = min(MAX_ROUNDS, ROUNDS_PER_OBSERVATION * (self.version - fitted))
        refit_tilt = bool(self._tilt_news)
        for done in range(0, rounds, ROUNDS_PER_OBSERVATION):
            converged = False
            for _ in range(min(ROUNDS_PER_OBSERVATION, rounds - done)):
                acc_side, mu_change = self._fit_tree(ACCELERATOR_TREE, st, acc_counts, S_untilted - N * var_side,
                                                     mu_den)
                new_var_side, _ = self._fit_tree(VARIANT_TREE, st, var_counts, S_untilted - N * acc_side)
                new_var_side -= self._centre_families(st, family_weights).take(idx["kind"], axis=1)
                change = max(mu_change, float(np.abs(new_var_side - var_side).max()))
                var_side = new_var_side
                if change < _TOL:
                    converged = True
                    break
            S_untilted = self._refit_slopes(st, S, N, acc_side + var_side, x_growth, refit_tilt)
            if converged:
                break

    def _add_all(self, cells, measurements):
        """Each measurement into its configuration's decayed sums and counts, one at a time in Python floats (what
        ``correction_kernels.add_measurements`` does in one call)."""
        for j, (*_, y, mask, _, full_batches) in zip(cells, measurements):
            m, d = np.asarray(mask, dtype=bool).tolist(), self.decay
            ys = np.asarray(y, dtype=float).tolist()
            s, n, t = self._sums[:, j].tolist(), self._counts[:, j].tolist(), self._tilt_counts[:, j].tolist()
            self._sums[:, j] = [d * s[i] + ys[i] if m[i] else s[i] for i in range(self.n_targets)]
            self._counts[:, j] = [d * n[i] + 1.0 if m[i] else n[i] for i in range(self.n_targets)]
            self._tilt_counts[:, j] = [d * t[i] + full_batches if m[i] else t[i] for i in range(self.n_targets)]
            self._tilt_news += bool(full_batches and any(m))
            self.version += 1

    def _plus_intensity(self, per_cell: np.ndarray, idx: dict[str, np.ndarray]) -> np.ndarray:
        """``per_cell`` (T, cells) + the intensity slopes' term as of their last fit; ``per_cell`` itself when no
        variant's intensity is known (nothing added: the same floats as without the term). (With ``_cell_scale``:
        the numpy terms ``fit_kernels.fit_start`` adds in one pass.)"""
        return per_cell + intensity_cells(self.intensity, idx["acc"]) if self.intensity.active else per_cell

    def _cell_scale(self, idx: dict[str, np.ndarray], x_growth: np.ndarray) -> np.ndarray:
        """The families' growth scales' term per configuration (T, cells)."""
        return self.scale.coef.take(idx["fam"], axis=1) * x_growth

    def _refit_slopes(self, st, S, N, sides, x_growth, refit_tilt, eff=None):
        idx, el = st["idx"], self.elastic
        fam_of_shape = st["parent"]["var"].take(st["parent"]["shape"])
        x_shape = el.growth[GROWTH_TARGET, :el.n_groups]
        n, _, share, _ = self._fit_counts[VARIANT_TREE]["shape"]
        unshaped = self._plus_intensity(sides - self._effects["shape"].take(idx["shape"], axis=1) + self._cell_tilt(st),
                                        idx)
        scale_fit(self.scale, x_shape, n * share,
                  self._sum_by(st["leaf"]["shape"], S - N * unshaped, self.n_targets) * share, fam_of_shape)
        scaled = self._cell_scale(idx, x_growth)
        if refit_tilt:
            self._tilt_news = 0
            shape = self._effects["shape"] + self.scale.coef.take(fam_of_shape, axis=1) * x_shape
            x_cell = centred(el, shape).take(idx["shape"], axis=1)
            n_cells = st["n_cells"]
            share = np.divide(self._tilt_counts[:, :n_cells], N, out=np.zeros_like(N), where=N > 0)
            elastic_fit(el, x_cell, N * share, (S - N * self._plus_intensity(sides + scaled, idx)) * share, idx["acc"],
                        st["parent"]["acc"])
            self._tilt_fits += 1
        if self.intensity.active:
            intensity_refit(self.intensity, self, st, S - N * (sides + scaled + self._cell_tilt(st)))
        return S - N * self._plus_intensity(self._cell_tilt(st) + scaled, idx)


def slopes_within_kind(x, n, residual_sums, acc_of, kind_of_acc, k):
    T, A = n.shape[0], len(kind_of_acc)
    K = int(kind_of_acc.max()) + 1 if A else 0
    rows = np.arange(T)[:, None]
    by_acc = (acc_of[None, :] + A * rows).ravel()
    w = np.bincount(by_acc, (n * x * x).ravel(), T * A).reshape(T, A)
    c = np.bincount(by_acc, (x * residual_sums).ravel(), T * A).reshape(T, A) / (w + k)
    by_kind = (kind_of_acc[None, :] + K * rows).ravel()
    kind_w = np.bincount(by_kind, w.ravel(), T * K).reshape(T, K)
    kind_wc = np.bincount(by_kind, (w * c).ravel(), T * K).reshape(T, K)
    kind_mean = np.divide(kind_wc, kind_w, out=np.zeros_like(kind_w), where=kind_w > 0)
    return c - kind_mean.take(kind_of_acc, axis=1)


def scale_fit(scale, x, weights, residual_sums, fam_of):
    T, F = scale.n_targets, scale.coef.shape[1]
    by_fam = (fam_of[None, :] + F * np.arange(T)[:, None]).ravel()
    w = np.bincount(by_fam, (weights * (x * x)).ravel(), T * F).reshape(T, F)
    xy = np.bincount(by_fam, (x * residual_sums).ravel(), T * F).reshape(T, F)
    scale.coef[:] = np.clip(xy / (w + scale.k), *SCALE_BOUNDS)


def centred(el, shape):
    n, h = el.n_groups, el.centre[: el.n_groups]
    growth = el.growth[:, :n] + shape[:, :n]
    H, T = len(el.centre_ids), el.n_targets
    flat = (h[None, :] + H * np.arange(T)[:, None]).ravel()
    el.mean = np.bincount(flat, growth.ravel(), T * H).reshape(T, H) / np.maximum(np.bincount(h, minlength=H), 1)
    el.x[:, :n] = growth - el.mean.take(h, axis=1)
    return el.x[:, :n]


def elastic_fit(el, x_cell, N, residual_sums, acc_of_cell, kind_of_acc):
    slopes = slopes_within_kind(x_cell, N, residual_sums, acc_of_cell, kind_of_acc, el.k)
    el.coefficients(len(kind_of_acc))[:] = np.clip(slopes, *ELASTICITY_BOUNDS)


def intensity_refit(it, pc, st, residual_sums):
    idx, T = st["idx"], it.n_targets
    counts = pc._fit_counts[ACCELERATOR_TREE]
    own = pc._effects["acc_var"].take(idx["acc_var"], axis=1) + pc._effects["cfg"].take(idx["cfg"], axis=1)
    r = residual_sums + pc._counts[:, :st["n_cells"]] * own
    s = pc._sum_by(st["up"]["cfg"], pc._leaf_sum(ACCELERATOR_TREE, st, r) * counts["cfg"][2], T)
    n, _, share, _ = counts["acc_var"]
    intensity_fit_groups(it, n * share, s * share, idx["acc_var"], st["parent"]["acc_var"], st["parent"]["acc_fam"],
                         st["parent"]["acc"])


def intensity_fit_groups(it, weights, residual_sums, acc_var_of_cell, fam_of_acc_var, acc_of_acc_fam, kind_of_acc):
    T, A, G = it.n_targets, len(kind_of_acc), weights.shape[1]
    n_cells = len(acc_var_of_cell)
    known_cells = it.known[:n_cells]
    n_known = np.bincount(acc_var_of_cell, known_cells, G)
    known = (n_known > 0).astype(float)
    x = np.divide(np.bincount(acc_var_of_cell, it.x[:n_cells] * known_cells, G), n_known,
                  out=np.zeros(G), where=n_known > 0)
    acc_of = acc_of_acc_fam.take(fam_of_acc_var)
    rows = np.arange(T)[:, None]
    by_acc = (acc_of[None, :] + A * rows).ravel()
    n = weights * known
    n_acc = np.bincount(by_acc, n.ravel(), T * A).reshape(T, A)
    has = n_acc > 0
    mean = np.divide(np.bincount(by_acc, (n * x).ravel(), T * A).reshape(T, A), n_acc,
                     out=np.zeros_like(n_acc), where=has)
    xc = (x - mean.take(acc_of, axis=1)) * known
    slopes = slopes_within_kind(xc, weights, residual_sums, acc_of, kind_of_acc, it.k)
    it.coef = np.where(has, np.clip(slopes, *INTENSITY_BOUNDS), 0.0)
    it.mean = mean


def _intensity_cell(it, j: int, acc_group: int):
    """One configuration's intensity term (``intensity_cells`` for one column, the same IEEE operations)."""
    if acc_group >= it.coef.shape[1] or not it.known[j]:
        return 0.0
    return it.coef[:, acc_group] * (it.x[j] - it.mean[:, acc_group])


def intensity_cells(it, acc_of_cell: np.ndarray) -> np.ndarray:
    """An ``IntensitySlope``'s term per configuration (T, cells), as of its last fit (0 before the first)."""
    n_cells = len(acc_of_cell)
    if it.coef.shape[1] == 0:
        return np.zeros((it.n_targets, n_cells))
    a = np.minimum(acc_of_cell, it.coef.shape[1] - 1)
    fitted = acc_of_cell < it.coef.shape[1]  # an accelerator newer than the last fit: 0
    x, known = it.x[:n_cells], it.known[:n_cells] * fitted
    return it.coef.take(a, axis=1) * ((x - it.mean.take(a, axis=1)) * known)
