"""Scoring with the dense factorization machine: many encoded rows at once, the outer product of disjoint
feature parts (the tuner's candidate grid), and feature-wise sums (a co-runner added to many placed jobs).

All of them avoid a per-candidate gather by combining per-part sums with the O(nk) identity
:math:`\\sum_{i<j}\\langle v_i,v_j\\rangle x_i x_j = \\tfrac12(\\lVert\\sum_i v_i x_i\\rVert^2 - \\sum_i\\lVert v_i x_i\\rVert^2)`.
A mixin over :class:`~oltunes.learner.fm_state.FMState`'s tables.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np



def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise dot products of latent sums: (i, T, k) x (j, T, k) -> (T, i, j) (matmul: cheaper than einsum)."""
    return np.matmul(a.transpose(1, 0, 2), b.transpose(1, 2, 0))


def _prefixed(row: np.ndarray, block: np.ndarray) -> np.ndarray:
    """``block`` with the one-row ``row`` before every row: ``np.hstack([np.repeat(row, n, 0), block])``."""
    out = np.empty((block.shape[0], row.shape[1] + block.shape[1]), dtype=np.result_type(row, block))
    out[:, :row.shape[1]] = row
    out[:, row.shape[1]:] = block
    return out


def stack_indexed(indexed: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One-row (rows, vals) index arrays (``index`` of one feature dict each) stacked and zero-padded to the
    widest: what ``index`` gives for all the dicts at once."""
    m = max(r.shape[1] for r, _ in indexed)
    rows = np.zeros((len(indexed), m), dtype=np.intp)
    vals = np.zeros((len(indexed), m))
    for i, (r, v) in enumerate(indexed):
        rows[i, : r.shape[1]] = r[0]
        vals[i, : v.shape[1]] = v[0]
    return rows, vals


def _job_prefixed(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """``parts`` with a leading single-row part (the job) appended to every row of the next (its features join
    each placement's row)."""
    parts = list(parts)
    if len(parts) > 1 and parts[0][0].shape[0] == 1:
        (r0, v0), (r1, v1) = parts[0], parts[1]
        parts[:2] = [(_prefixed(r0, r1), _prefixed(v0, v1))]
    return parts


class FMScoring:
    """Prediction methods of the dense FMs (needs :class:`~oltunes.learner.fm_state.FMState`)."""

    def _raw_many(self, rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Raw outputs (n, n_targets) for padded index arrays."""
        lin, _, _, inter = self._part_sums(rows, vals)
        return self._unscale(self._W[0] + lin + inter)

    def part_terms(self, rows: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-item sums of one feature part: linear (n, T), latent sum (n, T, k), squared norm (n, T)."""
        return self._part_sums(rows, vals)[:3]

    def _part_sums(self, rows: np.ndarray, vals: np.ndarray) -> tuple:
        """``part_terms`` and the part's own interaction ½(‖s‖² − q) (n, T)."""
        lin = (self._W.take(rows, axis=0) * vals[:, :, None]).sum(axis=1)
        xv = self._V.take(rows, axis=0) * vals[:, :, None, None]  # n, m, T, k
        s = xv.sum(axis=1)
        q = (xv * xv).sum(axis=(1, 3))
        return lin, s, q, 0.5 * ((s * s).sum(-1) - q)

    def _merged_terms(self, parts: Sequence[tuple[np.ndarray, np.ndarray]], limit: float = 64) -> list[tuple]:
        """Part terms, with neighbouring parts merged while their product is at most ``limit`` (e.g. the single
        job row into the placements, batch x concurrency): fewer, larger broadcasts are cheaper than many small
        ones."""
        T = self._n_targets
        merged: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for rows, vals in _job_prefixed(parts):
            lin, s, q = self.part_terms(rows, vals)
            if merged and merged[-1][0].shape[0] * rows.shape[0] <= limit:
                lin0, s0, q0 = merged[-1]
                merged[-1] = ((lin0[:, None] + lin[None]).reshape(-1, T),
                              (s0[:, None] + s[None]).reshape(-1, *s.shape[1:]),
                              (q0[:, None] + q[None]).reshape(-1, T))
            else:
                merged.append((lin, s, q))
        return merged

    @staticmethod
    def _accumulate(out: np.ndarray, groups: Sequence[tuple], offset: int, p: int) -> None:
        """Add unary terms of ``groups`` (axes offset..) and their mutual cross terms into ``out``."""
        T = out.shape[0]
        for j, (lin, s, q) in enumerate(groups):
            shape = [1] * p
            shape[offset + j] = lin.shape[0]
            out += (lin + 0.5 * ((s * s).sum(-1) - q)).T.reshape(T, *shape)
        for j in range(len(groups)):
            for m in range(j + 1, len(groups)):
                shape = [1] * p
                shape[offset + j], shape[offset + m] = groups[j][0].shape[0], groups[m][0].shape[0]
                out += _cross(groups[j][1], groups[m][1]).reshape(T, *shape)

    def raw_grid(self, parts: Sequence[tuple[np.ndarray, np.ndarray]], n_static: int = 0,
                 cache: dict | None = None, plus: Sequence[np.ndarray] = ()) -> np.ndarray:
        """Raw outputs over the outer product of disjoint parts: shape (n_targets, n_0, ..., n_{p-1}).

        Equal (to rounding) to ``predict_many`` on the concatenated features of every combination: with
        S = Σ_parts s_j (s_j = Σ_{i in part j} v_i x_i), ½(‖S‖² − Σ q_j) splits into per-part terms
        ½(‖s_j‖² − q_j) plus pairwise dot products ⟨s_j, s_l⟩ — small (n_j x n_l) matrices — so the full grid
        is only a sum of broadcasts, never an (n_candidates x n_features x k) gather.

        The last ``n_static`` parts (e.g. variants x batch sizes x concurrencies, the same for every request)
        have their terms and mutual block memoised in ``cache`` until the parameters change. The others (the
        tuner's job row and placements) are merged into one group, so every cell is the static block, the bias,
        that group's own term and its cross terms with the static groups. ``plus``: arrays with the grid's cells in
        its order (e.g. the prior's and the correction's grids), added to it.
        """
        if self._index is None:
            self._init_state()
        T = self._n_targets
        sizes = [rows.shape[0] for rows, _ in parts]
        n_dyn = len(parts) - n_static
        if cache is not None and cache.get("version") == self._version and n_static:
            sta, block = cache["terms"], cache["block"]
        else:
            sta = self._merged_terms(parts[n_dyn:]) if n_static else []
            block = np.zeros((T, *(g[0].shape[0] for g in sta)))
            self._accumulate(block, sta, 0, len(sta))
            if cache is not None and n_static:
                cache.update(version=self._version, terms=sta, block=block)
        dyn = self._merged_terms(parts[:n_dyn], limit=math.inf) if n_dyn else []  # at most one group
        D = dyn[0][0].shape[0] if dyn else 1
        out = np.empty((T, D, *block.shape[1:]))
        out[...] = (block + self._W[0].reshape(T, *[1] * len(sta)))[:, None]
        if dyn:
            lin, s, q = dyn[0]
            out += (lin + 0.5 * ((s * s).sum(-1) - q)).T.reshape(T, D, *[1] * len(sta))
            for m, g in enumerate(sta):  # the cross terms with each static group
                shape = [1] * len(sta)
                shape[m] = g[0].shape[0]
                out += _cross(s, g[1]).reshape(T, D, *shape)
        out = self._unscale(out.reshape(T, *sizes), axis=0)
        for a in plus:
            out = out + np.reshape(a, out.shape)
        return out

    def raw_sums(self, xa: Sequence[Mapping[str, float]], xd: Sequence[Mapping[str, float]]) -> np.ndarray:
        """Raw outputs (n_a, n_d, n_targets) for every feature-wise sum ``xa[i] + xd[j]`` (keys may overlap).

        Used to add a co-runner to many placed jobs at once: with a = xa[i], d = xd[j],
        y(a + d) = y(a) + w·d + ⟨Vᵀa, Vᵀd⟩ + ½(‖Vᵀd‖² − Σ‖v_f‖² d_f²) − Σ_f ‖v_f‖² a_f d_f.
        """
        return self.raw_sums_planned(self.sums_plan(xa, xd))

    def sums_plan(self, xa: Sequence[Mapping[str, float]], xd: Sequence[Mapping[str, float]],
                  newcomer: tuple | None = None) -> tuple:
        """The parameter-independent part of :meth:`raw_sums` (reusable until the vocabulary changes).
        ``newcomer``: ``index(xd)``, if the caller kept it (valid as long as the vocabulary)."""
        rows_a, vals_a = self.index(xa)
        rows_d, vals_d = newcomer if newcomer is not None else self.index(xd)
        return rows_a, vals_a, rows_d, vals_d, self.overlap(rows_a, vals_a, rows_d, vals_d)

    @staticmethod
    def overlap(rows_a: np.ndarray, vals_a: np.ndarray, rows_d: np.ndarray, vals_d: np.ndarray) -> np.ndarray | None:
        """``sums_plan``'s ``a_at`` (n_a, n_d, m_d) of indexed rows: a row's value of each key of an ``xd`` entry
        it also has (the overlap :meth:`raw_sums_of` corrects for); None if no key meets. Padding (value 0) meets
        nothing."""
        meets = ((rows_a[:, None, None, :] == rows_d[None, :, :, None]) & (vals_a != 0.0)[:, None, None, :]
                 & (vals_d != 0.0)[None, :, :, None])
        a_at = (meets * vals_a[:, None, None, :]).sum(axis=-1)
        return a_at if a_at.any() else None

    def raw_sums_planned(self, plan: tuple) -> np.ndarray:
        rows_a, vals_a, rows_d, vals_d, a_at = plan
        return self.raw_sums_of(self.row_terms(rows_a, vals_a), self.newcomer_terms(rows_d, vals_d), vals_d, a_at)

    def row_terms(self, rows: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What :meth:`raw_sums` reads of its ``xa`` rows: each row's own output (bias, linear and interaction
        terms) (n, T) and latent sum (n, T, k). Row by row (a row's terms are the same in any stack of rows, at
        any padding), so the terms of stacked rows are the stacked terms of their parts."""
        lin, s, _, inter = self._part_sums(rows, vals)
        return self._W[0] + lin + inter, s

    def row_terms_and_raw(self, rows: np.ndarray, vals: np.ndarray,
                          n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`row_terms` of the first ``n`` rows and the raw outputs (``predict_many``) of the others, in one
        pass (every value is computed row by row)."""
        y, s = self.row_terms(rows, vals)
        return y[:n], s[:n], self._unscale(y[n:])

    def newcomer_terms(self, rows_d: np.ndarray, vals_d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What :meth:`raw_sums` reads of its ``xd`` rows (``index(xd)``): their own output
        less the bias (n_d, T), latent sums (n_d, T, k) and each entry's squared latent norm (n_d, m_d, T)."""
        lin_d, s_d, _, inter_d = self._part_sums(rows_d, vals_d)
        return lin_d + inter_d, s_d, (self._V[rows_d] ** 2).sum(-1)

    def raw_sums_of(self, a_terms: tuple, d_terms: tuple, vals_d: np.ndarray, a_at: np.ndarray | None) -> np.ndarray:
        """:meth:`raw_sums_planned` from the rows' ``row_terms`` and the newcomers' ``newcomer_terms``."""
        y_a, s_a = a_terms
        y_d, s_d, norms = d_terms
        out = y_a[:, None, :] + y_d[None, :, :] + _cross(s_a, s_d).transpose(1, 2, 0)
        if a_at is not None:  # keys present in both a and d: their own interaction counted once
            out -= np.einsum("ijm,jm,jmt->ijt", a_at, vals_d, norms)
        return self._unscale(out)
