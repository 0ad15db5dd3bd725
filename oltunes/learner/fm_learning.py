"""The dense factorization machine's learning step: one observation's gradient step (Huber-clipped, robustly
weighted, on standardised targets if asked), replay of recent observations, and the optimizer hand-off (FTML's
row path, or any river optimizer's keyed dict path). A mixin over :class:`~oltunes.learner.fm_state.FMState`'s
tables.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from river import optim

from oltunes.learner.ftml import FTML
from oltunes.learner.ftml_kernel import fm_step, fm_step_error


class FMLearning:
    """Learning methods of the dense FMs (needs :class:`~oltunes.learner.fm_state.FMState`)."""

    def _learn(self, x: Mapping[str, float], y: np.ndarray, mask: np.ndarray, w: float = 1.0) -> np.ndarray:
        """One observation: a step on targets ``y`` (n_targets,) where ``mask`` is True, then ``replay`` steps
        on observations drawn from the recent-observation buffer. Returns the pre-update prediction."""
        if self._index is None:
            self._init_state()
        keys = [k for k, v in x.items() if v != 0.0]
        known = list(map(self._index.get, keys))
        if None in known:  # new features get rows (and latent draws) in the order they appear
            known = list(map(self._row, keys))
        rows = np.array(known, dtype=np.intp)
        vals = np.array([v for v in x.values() if v != 0.0], dtype=float)
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
        self._new_version()
        return yhat

    def _sgd_step(self, rows: np.ndarray, vals: np.ndarray, y: np.ndarray, mask: np.ndarray, w: float,
                  fresh: bool) -> np.ndarray:
        W = self._W
        Wr = W.take(rows, axis=0)  # ``take``: fancy indexing's rows, with less overhead
        # the prediction, the error (standardised, robustly weighted) and the clipped gradient, and FTML's step of both
        # tables, in one compiled call (``ftml_kernel.fm_step``); the linear term's product stays numpy's (BLAS: its
        # order of additions is its own)
        robust = self.robust is not None
        error = (W, vals @ Wr, self._V, rows, vals, y, mask, float(w), float(self.clip_gradient), bool(self.standardize),
                 self._mu, self._sd, robust, float(self.robust) if robust else 0.0, self._scale, self._n_scale, fresh)
        update = self._kernel_update()
        if update is None:
            yhat, g, s = fm_step_error(*error)
        else:
            yhat, g, s, stepped = fm_step(*error, *update)
            if stepped:
                return yhat
            self._wopt.n_iterations -= 1  # declined: the step is ``_plain_step``'s, counted there
            self._vopt.n_iterations -= 1
        self._plain_step(rows, vals, Wr, s, g)
        return yhat

    def _kernel_update(self) -> tuple | None:
        """What the compiled parameter step reads (``ftml_kernel.fm_step_update``: the regularisation and each table's
        optimizer state and constants, each optimizer's step counted as ``step_rows`` counts it: one instance may serve
        both tables); None for other optimizers (their step is ``_plain_step``'s)."""
        wopt, vopt = self._wopt, self._vopt
        if type(wopt) is not FTML or type(vopt) is not FTML:
            return None
        w_args = wopt.rows_kernel_args(self._W)
        wopt.n_iterations += 1
        v_args = vopt.rows_kernel_args(self._V)
        vopt.n_iterations += 1
        return float(self.l2_weight), float(self.l2_latent), w_args, v_args

    def _plain_step(self, rows: np.ndarray, vals: np.ndarray, Wr: np.ndarray, s: np.ndarray, g: np.ndarray) -> None:
        """The gradient step through the optimizers' ``step_rows`` (or their keyed dict path)."""
        Vr = self._V.take(rows, axis=0)  # m, T, k
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
