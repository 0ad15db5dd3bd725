"""Factorization machines with dense parameter tables: river's estimator interface, numpy speed.

river's ``facto.FMRegressor`` keeps its parameters in dicts and costs ~1 ms per ``learn_one`` and ~0.25 ms
per ``predict_one`` here; the tuner must score thousands of candidates per request and learn thousands of
measurements per second. These models keep the same equation and interface, but store weights and latent
vectors in numpy tables (one row per feature, a vocabulary maps feature names to rows), so that

* ``learn_one`` gathers the active rows once and hands the optimizer one block (``step_rows``, with state
  kept per feature — see :class:`~oltunes.learner.ftml.FTML`);
* ``predict_many`` scores many encoded rows in one pass with the O(nk) identity
  :math:`\\sum_{i<j}\\langle v_i,v_j\\rangle x_i x_j = \\tfrac12(\\lVert\\sum_i v_i x_i\\rVert^2 - \\sum_i\\lVert v_i x_i\\rVert^2)`;
* ``predict_grid`` scores an outer product of disjoint feature *parts* (placement × variant × batch ×
  concurrency) by combining per-part sums — no per-candidate gather at all.

Any river optimizer works; those without ``step_rows`` are driven through their keyed dict path with one
key per (feature, target[, factor]) so that their state is per parameter too.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from river import base, facto, optim

from oltunes.jsonstate import rng_state, set_rng_state
from oltunes.learner.ftml import FTML

__all__ = ["ONLINE_SETTINGS", "FMRegressor", "MultiFMRegressor", "RiverFMRegressor"]

DEFAULT_LR = 0.03  # FTML step size picked by benchmarks/learner_accuracy.py (progressive error, lr grid)
# The measured online-learning settings: learn each observation as it arrives, replay 16 recent ones while
# the stream is short (tapering after 256), down-weight outliers, standardise targets. benchmarks/
# learner_accuracy.py: held-out MAPE after 200 observations about 4x lower than a plain single pass; the
# tuner's observe rate with them ~3,600/s at 500-3,500 observations (~7,000/s without), on this machine.
# Opt-in — the classes default to a plain single pass — as ``MultiFMRegressor(..., **ONLINE_SETTINGS)``.
ONLINE_SETTINGS: dict[str, Any] = {"replay": 16, "replay_window": 256, "replay_horizon": 256, "robust": 2.0,
                                   "standardize": True}
_BIAS = "__bias__"
_ROBUST_WARMUP = 20  # observations per target before robust down-weighting starts
_ROBUST_RATE = 0.05  # decay of the running |residual| scale afterwards
_VERSIONS = itertools.count(1)  # process-wide, so a memo can never match another model's parameters  # row 0: the intercept; its latent row stays zero and is never updated


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise dot products of latent sums: (i, T, k) x (j, T, k) -> (T, i, j) (matmul: cheaper than einsum)."""
    return np.matmul(a.transpose(1, 0, 2), b.transpose(1, 2, 0))


class _FMBase(base.Base):
    def __init__(self, n_factors: int = 8, weight_optimizer: optim.base.Optimizer | None = None,
                 latent_optimizer: optim.base.Optimizer | None = None, l2_weight: float = 0.0,
                 l2_latent: float = 1e-4, init_std: float = 0.01, clip_gradient: float = 1.0,
                 seed: int | None = None, replay: int = 0, replay_window: int = 256,
                 robust: float | None = None, replay_horizon: int | None = None, standardize: bool = False) -> None:
        self.n_factors = n_factors
        self.weight_optimizer = weight_optimizer
        self.latent_optimizer = latent_optimizer
        self.l2_weight = l2_weight
        self.l2_latent = l2_latent
        self.init_std = init_std
        self.clip_gradient = clip_gradient
        self.seed = seed
        self.replay = replay
        self.replay_window = replay_window
        self.robust = robust
        self.replay_horizon = replay_horizon
        self.standardize = standardize
        self._index: dict[str, int] | None = None  # lazy state

    def _unit_test_skips(self) -> set[str]:
        # Latent vectors are drawn from the seeded generator when a feature is first seen, so the order features
        # arrive in changes which feature gets which draw: a reshuffled sample yields a different, equally valid
        # model. River's own FM declares the same skip for the same reason.
        return {"check_shuffle_features_no_impact"}

    # -- state ---------------------------------------------------------------------------------------------
    @property
    def _n_targets(self) -> int:
        return len(self._target_names())

    def _target_names(self) -> tuple[str, ...]:
        raise NotImplementedError

    def _init_state(self) -> None:
        self._index = {_BIAS: 0}
        self._W = np.zeros((16, self._n_targets))
        self._V = np.zeros((16, self._n_targets, self.n_factors))
        self._rng = np.random.default_rng(self.seed)
        self._wopt = self.weight_optimizer if self.weight_optimizer is not None else FTML(lr=DEFAULT_LR)
        self._vopt = self.latent_optimizer if self.latent_optimizer is not None else FTML(lr=DEFAULT_LR)
        self.n_learned = 0
        self._version = next(_VERSIONS)  # new on every parameter change (memoised grid blocks check it)
        # Replay buffer of recent observations (x, y, mask); its own generator so that replay does not shift
        # the latent initialisation of later features.
        self._buffer: deque = deque(maxlen=max(int(self.replay_window), 1))
        self._replay_rng = np.random.default_rng(None if self.seed is None else self.seed + 1)
        self._scale = np.zeros(self._n_targets)  # running |residual| per target (robust weighting)
        self._n_scale = np.zeros(self._n_targets, dtype=np.int64)
        # Running mean / variance of each target (Welford), used when ``standardize``.
        self._y_n = np.zeros(self._n_targets, dtype=np.int64)
        self._y_mean = np.zeros(self._n_targets)
        self._y_m2 = np.zeros(self._n_targets)
        self._mu = np.zeros(self._n_targets)
        self._sd = np.ones(self._n_targets)

    @property
    def parameters_version(self) -> int:
        """Changes whenever any parameter changes (process-wide unique: safe as a memo key)."""
        return 0 if self._index is None else self._version

    @property
    def vocabulary_version(self) -> int:
        """Changes whenever a new feature gets a row (callers caching index arrays invalidate on it)."""
        return 0 if self._index is None else len(self._index)

    def _row(self, name: str) -> int:
        r = self._index.get(name)
        if r is None:
            r = len(self._index)
            if r >= self._W.shape[0]:
                cap = 2 * self._W.shape[0]
                self._W = np.concatenate([self._W, np.zeros_like(self._W)])[:cap]
                self._V = np.concatenate([self._V, np.zeros_like(self._V)])[:cap]
            self._V[r] = self._rng.normal(0.0, self.init_std, size=self._V.shape[1:])
            self._index[name] = r
            self._version = next(_VERSIONS)
        return r

    def index(self, xs: Sequence[Mapping[str, float]]) -> tuple[np.ndarray, np.ndarray]:
        """Encode feature dicts as padded (rows, values) arrays of shape (len(xs), max features).

        Unknown and zero-valued features map to row 0 with value 0 (they contribute nothing).
        """
        if self._index is None:
            self._init_state()
        idx = self._index
        m = max((len(x) for x in xs), default=0) or 1
        rows = np.zeros((len(xs), m), dtype=np.intp)
        vals = np.zeros((len(xs), m))
        for i, x in enumerate(xs):
            j = 0
            for name, v in x.items():
                r = idx.get(name)
                if r is not None and v != 0.0:
                    rows[i, j] = r
                    vals[i, j] = v
                    j += 1
        return rows, vals

    # -- target standardisation ----------------------------------------------------------------------------
    def _unscale(self, out: np.ndarray, axis: int = -1) -> np.ndarray:
        """FM outputs (standardised units) -> target units: ``mu + sd * out`` along the target axis."""
        if not self.standardize:
            return out
        shape = [1] * out.ndim
        shape[axis] = -1
        return out * self._sd.reshape(shape) + self._mu.reshape(shape)

    def _update_target_stats(self, y: np.ndarray, mask: np.ndarray) -> None:
        # Welford's update per target, in Python floats (a handful of targets: numpy calls would cost more)
        ns, means, m2s = self._y_n.tolist(), self._y_mean.tolist(), self._y_m2.tolist()
        sds = []
        for t, (yt, m) in enumerate(zip(y.tolist(), mask.tolist())):
            n = ns[t] = ns[t] + m
            if m:
                d = yt - means[t]
                means[t] = means[t] + d / max(n, 1)
                m2s[t] = m2s[t] + d * (yt - means[t])
            var = m2s[t] / max(n, 1) if n > 1 else 0.0
            sds.append(math.sqrt(var) if var > 1e-12 else 1.0)
        self._y_n, self._y_mean, self._y_m2 = np.array(ns, dtype=np.int64), np.array(means), np.array(m2s)
        self._mu, self._sd = self._y_mean.copy(), np.array(sds)

    # -- prediction ----------------------------------------------------------------------------------------
    def _raw_many(self, rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Raw outputs (n, n_targets) for padded index arrays."""
        W, V = self._W, self._V
        lin = (W.take(rows, axis=0) * vals[:, :, None]).sum(axis=1)
        xv = V.take(rows, axis=0) * vals[:, :, None, None]  # n, m, T, k
        s = xv.sum(axis=1)
        inter = 0.5 * ((s * s).sum(-1) - (xv * xv).sum(axis=(1, 3)))
        return self._unscale(W[0] + lin + inter)

    def part_terms(self, rows: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-item sums of one feature part: linear (n, T), latent sum (n, T, k), squared norm (n, T)."""
        lin = (self._W.take(rows, axis=0) * vals[:, :, None]).sum(axis=1)
        xv = self._V.take(rows, axis=0) * vals[:, :, None, None]
        return lin, xv.sum(axis=1), (xv * xv).sum(axis=(1, 3))

    def _merged_terms(self, parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple]:
        """Part terms, with neighbouring parts merged while their product is small (e.g. the single job row
        into the placements, batch x concurrency): fewer, larger broadcasts are cheaper than many small ones."""
        T = self._n_targets
        merged: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        parts = list(parts)
        if len(parts) > 1 and parts[0][0].shape[0] == 1:  # a single-row part (the job): append its features
            (r0, v0), (r1, v1) = parts[0], parts[1]
            n = r1.shape[0]
            parts[:2] = [(np.hstack([np.repeat(r0, n, 0), r1]), np.hstack([np.repeat(v0, n, 0), v1]))]
        for rows, vals in parts:
            lin, s, q = self.part_terms(rows, vals)
            if merged and merged[-1][0].shape[0] * rows.shape[0] <= 64:
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
                 cache: dict | None = None) -> np.ndarray:
        """Raw outputs over the outer product of disjoint parts: shape (n_targets, n_0, ..., n_{p-1}).

        Equal (to rounding) to ``predict_many`` on the concatenated features of every combination: with
        S = Σ_parts s_j (s_j = Σ_{i in part j} v_i x_i), ½(‖S‖² − Σ q_j) splits into per-part terms
        ½(‖s_j‖² − q_j) plus pairwise dot products ⟨s_j, s_l⟩ — small (n_j x n_l) matrices — so the full grid
        is only a sum of broadcasts, never an (n_candidates x n_features x k) gather.

        The last ``n_static`` parts (e.g. variants x batch sizes x concurrencies, the same for every request)
        have their terms and mutual block memoised in ``cache`` until the parameters change.
        """
        if self._index is None:
            self._init_state()
        T = self._n_targets
        sizes = [rows.shape[0] for rows, _ in parts]
        n_dyn = len(parts) - n_static
        dyn = self._merged_terms(parts[:n_dyn])
        if cache is not None and cache.get("version") == self._version and n_static:
            sta, block = cache["terms"], cache["block"]
        else:
            sta = self._merged_terms(parts[n_dyn:]) if n_static else []
            block = np.zeros((T, *(g[0].shape[0] for g in sta)))
            self._accumulate(block, sta, 0, len(sta))
            if cache is not None and n_static:
                cache.update(version=self._version, terms=sta, block=block)
        p = len(dyn) + len(sta)
        out = np.empty((T, *(g[0].shape[0] for g in dyn), *(g[0].shape[0] for g in sta)))
        out[...] = block.reshape(T, *([1] * len(dyn)), *block.shape[1:])
        out += self._W[0].reshape(T, *([1] * p))
        self._accumulate(out, dyn, 0, p)
        for j, gd in enumerate(dyn):
            for m, gs in enumerate(sta):
                shape = [1] * p
                shape[j], shape[len(dyn) + m] = gd[0].shape[0], gs[0].shape[0]
                out += _cross(gd[1], gs[1]).reshape(T, *shape)
        return self._unscale(out.reshape(T, *sizes), axis=0)

    def raw_sums(self, xa: Sequence[Mapping[str, float]], xd: Sequence[Mapping[str, float]]) -> np.ndarray:
        """Raw outputs (n_a, n_d, n_targets) for every feature-wise sum ``xa[i] + xd[j]`` (keys may overlap).

        Used to add a co-runner to many placed jobs at once: with a = xa[i], d = xd[j],
        y(a + d) = y(a) + w·d + ⟨Vᵀa, Vᵀd⟩ + ½(‖Vᵀd‖² − Σ‖v_f‖² d_f²) − Σ_f ‖v_f‖² a_f d_f.
        """
        return self.raw_sums_planned(self.sums_plan(xa, xd))

    def sums_plan(self, xa: Sequence[Mapping[str, float]], xd: Sequence[Mapping[str, float]],
                  newcomer: tuple | None = None) -> tuple:
        """The parameter-independent part of :meth:`raw_sums` (reusable until the vocabulary changes).
        ``newcomer``: ``newcomer_plan(xd)``, if the caller kept it (valid as long as the vocabulary)."""
        rows_a, vals_a = self.index(xa)
        rows_d, vals_d, at = newcomer if newcomer is not None else self.newcomer_plan(xd)
        a_at = np.zeros((len(xa), len(xd), rows_d.shape[1]))
        for i, x in enumerate(xa):
            for k, (js, ms) in at.items():
                v = x.get(k)
                if v is not None:
                    a_at[i, js, ms] = v
        return rows_a, vals_a, rows_d, vals_d, (a_at if a_at.any() else None)

    def newcomer_plan(self, xd: Sequence[Mapping[str, float]]) -> tuple:
        """``index(xd)`` and where each of xd's keys sits in it (``sums_plan``'s part that depends on ``xd``
        alone): few distinct keys, many positions."""
        rows_d, vals_d = self.index(xd)
        idx = self._index
        at: dict[str, tuple[list[int], list[int]]] = {}
        for j, x in enumerate(xd):
            for m, k in enumerate(k for k, v in x.items() if v != 0.0 and k in idx):
                js, ms = at.setdefault(k, ([], []))
                js.append(j)
                ms.append(m)
        return rows_d, vals_d, {k: (np.array(js, dtype=np.intp), np.array(ms, dtype=np.intp))
                                for k, (js, ms) in at.items()}

    def raw_sums_planned(self, plan: tuple) -> np.ndarray:
        rows_a, vals_a, rows_d, vals_d, a_at = plan
        lin_a, s_a, q_a = self.part_terms(rows_a, vals_a)
        lin_d, s_d, q_d = self.part_terms(rows_d, vals_d)
        y_a = self._W[0] + lin_a + 0.5 * ((s_a * s_a).sum(-1) - q_a)  # n_a, T
        y_d = lin_d + 0.5 * ((s_d * s_d).sum(-1) - q_d)  # n_d, T
        out = y_a[:, None, :] + y_d[None, :, :] + _cross(s_a, s_d).transpose(1, 2, 0)
        if a_at is not None:  # overlap correction for keys present in both a and d
            norms = (self._V[rows_d] ** 2).sum(-1)  # n_d, m_d, T
            out -= np.einsum("ijm,jm,jmt->ijt", a_at, vals_d, norms)
        return self._unscale(out)

    # -- learning ------------------------------------------------------------------------------------------
    def _learn(self, x: Mapping[str, float], y: np.ndarray, mask: np.ndarray, w: float = 1.0) -> np.ndarray:
        """One observation: a step on targets ``y`` (n_targets,) where ``mask`` is True, then ``replay`` steps
        on observations drawn from the recent-observation buffer. Returns the pre-update prediction."""
        if self._index is None:
            self._init_state()
        items = [(k, v) for k, v in x.items() if v != 0.0]
        idx = self._index
        known = [idx.get(k) for k, _ in items]
        if None in known:  # new features get rows (and latent draws) in the order they appear
            known = [self._row(k) for k, _ in items]
        rows = np.array(known, dtype=np.intp)
        vals = np.array([v for _, v in items], dtype=float)
        if self.standardize:
            self._update_target_stats(y, mask)
        yhat = self._sgd_step(rows, vals, y, mask, w, fresh=True)
        if self.replay > 0:
            # Row numbers are stable (the vocabulary only grows), so the buffer keeps index arrays, not dicts.
            buf = self._buffer
            buf.append((rows, vals, y.copy(), mask.copy(), w))
            picks = self._replay_rng.integers(len(buf), size=self._n_replays())
            for i in picks:
                self._sgd_step(*buf[i], fresh=False)
        self.n_learned += 1
        self._version = next(_VERSIONS)
        return yhat

    def _sgd_step(self, rows: np.ndarray, vals: np.ndarray, y: np.ndarray, mask: np.ndarray, w: float,
                  fresh: bool) -> np.ndarray:
        W, V = self._W, self._V
        Wr = W.take(rows, axis=0)  # ``take``: fancy indexing's rows, with less overhead
        Vr = V.take(rows, axis=0)  # m, T, k
        xv = Vr * vals[:, None, None]
        s = xv.sum(axis=0)  # T, k
        yhat = W[0] + vals @ Wr + 0.5 * ((s * s).sum(-1) - (xv * xv).sum(axis=(0, 2)))
        # The per-target arithmetic (a handful of targets) in Python floats: the same IEEE operations, in the
        # same order, as numpy's element-wise ones, without a numpy call's overhead per operation.
        yh, ys, ms = yhat.tolist(), y.tolist(), mask.tolist()
        if self.standardize:  # the buffer holds raw targets: scaled with today's statistics, all alike
            mu, sd = self._mu.tolist(), self._sd.tolist()
            err = [a - (b - m) / d for a, b, m, d in zip(yh, ys, mu, sd)]
            yhat = np.array([a * d + m for a, m, d in zip(yh, mu, sd)])
        else:
            err = [a - b for a, b in zip(yh, ys)]
        if self.robust is not None:
            err = [e * r for e, r in zip(err, self._robust_weight(err, ms, update=fresh))]
        c = self.clip_gradient
        g = np.array([min(max(w * e, -c), c) if m else 0.0 for e, m in zip(err, ms)])
        # Linear weights (bias row 0 included, not regularised).
        m = len(rows)
        wrows, x1 = np.zeros(m + 1, dtype=np.intp), np.ones(m + 1)  # the bias row (0, value 1) and the active rows
        wrows[1:], x1[1:] = rows, vals
        gW = x1[:, None] * g[None, :]  # np.outer's own arithmetic, without its wrapper
        gW[1:] += self.l2_weight * Wr
        self._step(self._wopt, self._W, wrows, gW)
        # Latent vectors: d/dv_i = g * x_i * (s - v_i x_i)
        gV = g[None, :, None] * (vals[:, None, None] * s[None] - Vr * (vals * vals)[:, None, None]) + self.l2_latent * Vr
        self._step(self._vopt, self._V, rows, gV)
        return yhat

    def _n_replays(self) -> int:
        """Replay steps for this observation: ``replay`` for the first ``replay_horizon`` (H) observations, then
        ``replay x (H / n)^2`` (stochastically rounded). Replay buys sample efficiency while the stream is
        short; the squared taper bounds the total replay work after H to about ``replay x H`` steps, so a
        long-running tuner soon pays for single steps only, and FTML alone tracks drift."""
        n = self.n_learned + 1
        if self.replay_horizon is None or n <= self.replay_horizon:
            return int(self.replay)
        r = self.replay * (self.replay_horizon / n) ** 2
        return int(r) + int(self._replay_rng.random() < r - int(r))

    def _robust_weight(self, err: list[float], mask: list[bool], update: bool) -> list[float]:
        """Down-weight residuals beyond ``robust`` x the running mean |residual| (per target).

        Adaptive optimizers (FTML, Adam) normalise the gradient's size away, so clipping it (Huber) does not
        stop one failed measurement (e.g. a run that swapped: 400x its neighbours) from pulling the model as
        hard as a good one — and a replay buffer would pull again and again. Weight ``(c s / |r|)^2`` beyond
        ``c s`` makes such a point's pull fade like a redescending M-estimator. The scale ``s`` follows the
        fresh (pre-update) residuals: a plain mean over the first ``_ROBUST_WARMUP`` (no weighting yet: a
        cold model is wrong everywhere), then an exponential average of ``min(|r|, 4 s)``, so that a real
        level shift raises ``s`` within tens of observations and is learned, not rejected.
        """
        scale, n_scale = self._scale.tolist(), self._n_scale.tolist()
        c = self.robust
        wt = []
        for e, s, n in zip(err, scale, n_scale):
            a, lim = abs(e), c * s
            if n >= _ROBUST_WARMUP and a > lim:
                r = lim / max(a, 1e-12)
                wt.append(r * r)
            else:
                wt.append(1.0)
        if update:
            for t, (e, s, n, m) in enumerate(zip(err, scale, n_scale, mask)):
                ready, n = n >= _ROBUST_WARMUP, n + m
                n_scale[t] = n
                if m:
                    a = abs(e)
                    rate = _ROBUST_RATE if ready else 1.0 / max(n, 1)
                    capped = min(a, 4.0 * s) if ready else a
                    scale[t] = s + rate * (capped - s)
            self._scale = np.array(scale)
            self._n_scale = np.array(n_scale, dtype=np.int64)
        return wt

    @staticmethod
    def _step(opt: optim.base.Optimizer, table: np.ndarray, rows: np.ndarray, g: np.ndarray) -> None:
        if hasattr(opt, "step_rows"):
            opt.step_rows(table, rows, g)
            return
        # Generic river optimizer: keyed dict path, one scalar key per parameter (feature, target[, factor]).
        w = {}
        gd = {}
        for i, r in enumerate(rows):
            for pos in np.ndindex(table.shape[1:]):
                key = (int(r), *pos)
                w[key] = float(table[(r, *pos)])
                gd[key] = float(g[(i, *pos)])
        w = opt.step(w, gd)
        for key, val in w.items():
            table[key] = val

    # -- JSON state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self._index is None:
            self._init_state()
        n = len(self._index)
        out: dict[str, Any] = {
            "params": {"n_factors": self.n_factors, "l2_weight": self.l2_weight, "l2_latent": self.l2_latent,
                       "init_std": self.init_std, "clip_gradient": self.clip_gradient, "seed": self.seed,
                       "replay": self.replay, "replay_window": self.replay_window, "robust": self.robust,
                       "replay_horizon": self.replay_horizon, "standardize": self.standardize},
            "features": list(self._index),
            "W": self._W[:n].tolist(),
            "V": self._V[:n].tolist(),
            "rng": rng_state(self._rng),
            "n_learned": self.n_learned,
            "replay_rng": rng_state(self._replay_rng),
            "buffer": [[r.tolist(), v.tolist(), y.tolist(), m.tolist(), w] for r, v, y, m, w in self._buffer],
            "residual_scale": self._scale.tolist(),
            "residual_scale_n": self._n_scale.tolist(),
            "target_stats": [self._y_n.tolist(), self._y_mean.tolist(), self._y_m2.tolist()],
        }
        for name, opt in (("weight_optimizer", self._wopt), ("latent_optimizer", self._vopt)):
            if not isinstance(opt, FTML):
                raise TypeError(f"state_dict supports FTML optimizers only, {name} is {type(opt).__name__}")
            out[name] = opt.state_dict()
        return out

    def load_state_dict(self, d: dict[str, Any]) -> _FMBase:
        self._init_state()
        feats = d["features"]
        self._index = {f: i for i, f in enumerate(feats)}
        cap = max(16, 1 << math.ceil(math.log2(max(len(feats), 1))))
        self._W = np.zeros((cap, self._n_targets))
        self._V = np.zeros((cap, self._n_targets, self.n_factors))
        self._W[: len(feats)] = np.asarray(d["W"], dtype=float).reshape(len(feats), self._n_targets)
        self._V[: len(feats)] = np.asarray(d["V"], dtype=float).reshape(len(feats), self._n_targets, self.n_factors)
        set_rng_state(self._rng, d["rng"])
        self.n_learned = int(d["n_learned"])
        # Keys added with replay / robust weighting: absent in older state files (then: empty, cold).
        if "replay_rng" in d:
            set_rng_state(self._replay_rng, d["replay_rng"])
        for r, v, y, m, w in d.get("buffer", []):
            self._buffer.append((np.asarray(r, dtype=np.intp), np.asarray(v, dtype=float), np.asarray(y, dtype=float),
                                 np.asarray(m, dtype=bool), float(w)))
        if "residual_scale" in d:
            self._scale = np.asarray(d["residual_scale"], dtype=float)
            self._n_scale = np.asarray(d["residual_scale_n"], dtype=np.int64)
        if "target_stats" in d:
            n, mean, m2 = d["target_stats"]
            self._y_n = np.asarray(n, dtype=np.int64)
            self._y_mean = np.asarray(mean, dtype=float)
            self._y_m2 = np.asarray(m2, dtype=float)
            self._update_target_stats(np.zeros(self._n_targets), np.zeros(self._n_targets, dtype=bool))
        self._version = next(_VERSIONS)
        self._wopt = FTML.from_state_dict(d["weight_optimizer"])
        self._vopt = FTML.from_state_dict(d["latent_optimizer"])
        return self


class FMRegressor(_FMBase, base.Regressor):
    """Factorization machine regressor (squared loss), dense tables, FTML by default.

    Parameters
    ----------
    n_factors
        Dimension of the latent vectors.
    weight_optimizer, latent_optimizer
        river optimizers for the linear weights (incl. intercept) and the latent vectors. Default
        ``FTML(lr=0.03)`` each (``DEFAULT_LR``). Optimizers with ``step_rows`` (FTML) take the fast path.
    l2_weight, l2_latent
        L2 penalties.
    init_std
        Std of the normal initialisation of a new feature's latent vector (small, so that untrained
        interactions add little noise).
    clip_gradient
        Bound on the loss gradient (squared loss inside, absolute loss outside: a Huber loss). On log
        targets 1.0 means errors beyond e^1 stop growing the step; without it one wild measurement can
        throw the latent vectors into a divergent oscillation.
    seed
        Seed of the latent initialisation (and, + 1, of the replay draws).
    replay
        Extra steps per observation on observations drawn uniformly from the last ``replay_window`` (a
        bounded replay buffer; 0 = each observation is learned once, the default). Each call still learns
        one observation (``n_learned``); the model just gets more out of a short stream. It costs ``replay + 1``
        gradient steps per observation (~0.12 ms each for the tuner's 3-target model here): use
        ``replay_horizon`` in a long-running service. See ``ONLINE_SETTINGS`` for measured values.
    replay_window
        Size of the replay buffer (older observations drop out: replay still follows drift).
    standardize
        Learn on standardised targets ``(y - mean) / std`` (running, per target) and map outputs back, so that
        the intercept is not walked up from zero at a small step size and the replay buffer (which keeps raw
        targets) is always scaled with the current statistics. False (the default) = raw targets.
    replay_horizon
        If set (H), replay tapers after H observations to ``replay x (H / n)^2`` per observation
        (stochastically rounded): replay matters while the stream is short; later the stream supplies the
        passes, the per-observation cost falls back to one step, and drift is tracked by FTML alone.
        None = always ``replay``.
    robust
        If set (e.g. 2.0), residuals beyond ``robust`` x the running mean |residual| are down-weighted by
        ``(robust s / |r|)^2``: one failed measurement cannot drag the model (see ``_robust_weight``). None =
        off (the default).

    Examples
    --------
    >>> from oltunes.learner import FMRegressor
    >>> fm = FMRegressor(seed=0)
    >>> data = [({"acc=gpu": 1, "fam=bert": 1}, 1.0), ({"acc=cpu": 1, "fam=bert": 1}, 3.0),
    ...         ({"acc=gpu": 1, "fam=cnn": 1}, 0.5), ({"acc=cpu": 1, "fam=cnn": 1}, 1.5)]
    >>> for _ in range(300):
    ...     for x, y in data:
    ...         fm.learn_one(x, y)
    >>> round(fm.predict_one({"acc=cpu": 1, "fam=bert": 1}), 1)
    3.0
    """

    def _target_names(self) -> tuple[str, ...]:
        return ("y",)

    def learn_one(self, x: dict, y: float, w: float = 1.0) -> None:
        self._learn(x, np.array([float(y)]), np.array([True]), w)

    def predict_one(self, x: dict) -> float:
        rows, vals = self.index([x])
        return float(self._raw_many(rows, vals)[0, 0])

    def predict_many(self, rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Vectorised predictions for index arrays from :meth:`index`."""
        return self._raw_many(rows, vals)[:, 0]

    @classmethod
    def _unit_test_params(cls):
        yield {"seed": 42}


class MultiFMRegressor(_FMBase, base.MultiTargetRegressor):
    """One factorization machine per target, sharing one feature vocabulary and one gather.

    Learning a measurement updates every target present in ``y``; absent (or ``None``) targets are skipped.
    Used by the tuner for log p99 latency, log energy per item and log throughput.

    Parameters
    ----------
    targets
        Target names, in output order.
    n_factors, weight_optimizer, latent_optimizer, l2_weight, l2_latent, init_std, clip_gradient, seed, replay,
    replay_window, robust, replay_horizon, standardize
        As :class:`FMRegressor` (the replay buffer keeps each observation's target mask; robust scales are
        per target).

    Examples
    --------
    >>> from oltunes.learner import MultiFMRegressor
    >>> fm = MultiFMRegressor(targets=("lat", "energy"), seed=0)
    >>> for _ in range(300):
    ...     fm.learn_one({"acc=gpu": 1}, {"lat": 1.0, "energy": 2.0})
    ...     fm.learn_one({"acc=cpu": 1}, {"lat": 3.0})
    >>> round(fm.predict_one({"acc=cpu": 1})["lat"], 1)
    3.0
    """

    def __init__(self, targets: Sequence[str] = ("y",), n_factors: int = 8,
                 weight_optimizer: optim.base.Optimizer | None = None,
                 latent_optimizer: optim.base.Optimizer | None = None, l2_weight: float = 0.0,
                 l2_latent: float = 1e-4, init_std: float = 0.01, clip_gradient: float = 1.0,
                 seed: int | None = None, replay: int = 0, replay_window: int = 256,
                 robust: float | None = None, replay_horizon: int | None = None, standardize: bool = False) -> None:
        super().__init__(n_factors, weight_optimizer, latent_optimizer, l2_weight, l2_latent, init_std,
                         clip_gradient, seed, replay, replay_window, robust, replay_horizon, standardize)
        self.targets = tuple(targets)

    def _target_names(self) -> tuple[str, ...]:
        return self.targets

    def learn_one(self, x: dict, y: dict, w: float = 1.0) -> None:
        self.learn_predict_one(x, y, w)

    def learn_predict_one(self, x: dict, y: dict, w: float = 1.0) -> np.ndarray:
        """Learn the targets in ``y``; return the raw predictions made just before the update (progressive
        validation without a second gather)."""
        yv = np.array([float(y[t]) if y.get(t) is not None else 0.0 for t in self.targets])
        mask = np.array([y.get(t) is not None for t in self.targets])
        return self._learn(x, yv, mask, w)

    def predict_one(self, x: dict) -> dict[str, float]:
        rows, vals = self.index([x])
        out = self._raw_many(rows, vals)[0]
        return {t: float(v) for t, v in zip(self.targets, out)}

    def predict_many(self, rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Vectorised predictions (n, n_targets) for index arrays from :meth:`index`."""
        return self._raw_many(rows, vals)


class RiverFMRegressor(facto.FMRegressor):
    """river's own ``facto.FMRegressor``, with latent updates keyed per feature.

    river hands each feature's latent vector to the shared latent optimizer as ``dict(enumerate(vector))``,
    so a stateful optimizer (Adam, FTML, FTRL) keeps its moments per latent *index*, mixing every feature's
    history. This subclass passes ``{feature: vector}`` instead (FTML's keyed path accepts vector values), so
    the state is per feature. It is the reference implementation for tests; the tuner uses the dense
    :class:`MultiFMRegressor` (same equation, vectorised).

    Examples
    --------
    >>> from oltunes.learner.fm import RiverFMRegressor
    >>> from oltunes.jsonstate import rng_state, set_rng_state
from oltunes.learner.ftml import FTML
    >>> fm = RiverFMRegressor(n_factors=2, weight_optimizer=FTML(0.05), latent_optimizer=FTML(0.05),
    ...                       intercept_lr=0.05, seed=0)
    >>> for _ in range(300):
    ...     fm.learn_one({"a": 1.0}, 2.0)
    >>> round(fm.predict_one({"a": 1.0}), 1)
    2.0
    """

    def _update_latents(self, x, g_loss):
        v, l1, l2 = self.latents, self.l1_latent, self.l2_latent
        precomputed_sum = sum(v[j] * xj for j, xj in x.items())
        grads = {j: g_loss * (xj * precomputed_sum - v[j] * xj**2) + l1 * np.sign(v[j]) + l2 * v[j]
                 for j, xj in x.items()}
        current = {j: v[j] for j in x}
        updated = self.latent_optimizer.step(w=current, g=grads)
        for j in x:
            self.latents[j] = np.asarray(updated[j], dtype=float)
