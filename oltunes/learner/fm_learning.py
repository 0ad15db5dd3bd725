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

ROBUST_WARMUP = 20  # observations per target before robust down-weighting starts
ROBUST_RATE = 0.05  # decay of the running |residual| scale afterwards


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
        """One gradient step on one observation (pre-update prediction returned): the error on (standardised)
        targets, robustly weighted, clipped, masked; then the optimizers' step of the weights and latents."""
        W, V = self._W, self._V
        Wr, Vr = W.take(rows, axis=0), V.take(rows, axis=0)  # m, T and m, T, k
        xv = Vr * vals[:, None, None]
        s = xv.sum(axis=0)
        yhat = W[0] + vals @ Wr + 0.5 * ((s * s).sum(-1) - (xv * xv).sum(axis=(0, 2)))
        if self.standardize:
            err = yhat - (y - self._mu) / self._sd
            yhat = yhat * self._sd + self._mu
        else:
            err = yhat - y
        if self.robust is not None:
            err = err * self._robust_weight(err, mask, update=fresh)
        g = np.where(mask, np.clip(w * err, -self.clip_gradient, self.clip_gradient), 0.0)
        # linear weights (bias row 0 included, not regularised)
        gW = np.outer(np.concatenate(([1.0], vals)), g)
        gW[1:] += self.l2_weight * Wr
        self._step(self._wopt, W, np.concatenate(([0], rows)), gW)
        # latent vectors: d/dv_i = g * x_i * (s - v_i x_i)
        gV = g[None, :, None] * (vals[:, None, None] * s[None] - Vr * (vals * vals)[:, None, None]) + self.l2_latent * Vr
        self._step(self._vopt, V, rows, gV)
        return yhat

    def _robust_weight(self, err: np.ndarray, mask: np.ndarray, update: bool) -> np.ndarray:
        """Down-weight residuals beyond ``robust`` x the running mean |residual| (per target): ``(c s / |r|)^2``.

        Adaptive optimizers (FTML, Adam) normalise the gradient's size away, so clipping it (Huber) does not stop one
        failed measurement (e.g. a run that swapped: 400x its neighbours) from pulling the model as hard as a good
        one, and a replay buffer would pull again and again; this weight makes such a point's pull fade like a
        redescending M-estimator. The scale ``s`` follows the fresh (``update``) residuals: a plain mean over the
        first ``ROBUST_WARMUP`` (no weighting yet: a cold model is wrong everywhere), then an exponential average of
        ``min(|r|, 4 s)``, so that a real level shift raises ``s`` within tens of observations and is learned."""
        a = np.abs(err)
        ready = self._n_scale >= ROBUST_WARMUP
        lim = self.robust * self._scale
        wt = np.where(ready & (a > lim), (lim / np.maximum(a, 1e-12)) ** 2, 1.0)
        if update:
            n = self._n_scale = self._n_scale + mask
            rate = np.where(ready, ROBUST_RATE, 1.0 / np.maximum(n, 1))
            capped = np.where(ready, np.minimum(a, 4.0 * self._scale), a)
            self._scale = np.where(mask, self._scale + rate * (capped - self._scale), self._scale)
        return wt

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
        if isinstance(opt, FTML):
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
