"""The FM's learning step (per-target arithmetic in Python floats, FTML's update in place) against the plain
vectorised numpy step it replaced: every parameter and every prediction bit for bit the same."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.learner.fm import ONLINE_SETTINGS, MultiFMRegressor
from oltunes.learner.ftml_kernel import ROBUST_RATE as _ROBUST_RATE
from oltunes.learner.ftml_kernel import ROBUST_WARMUP as _ROBUST_WARMUP
from oltunes.learner.ftml import FTML


class PlainFTML(FTML):
    """The row path and the rule in numpy (the compiled ``ftml_kernel`` must equal them)."""

    def _update(self, theta, g, t, v, d_prev, z, lr):
        b1, b2 = self.beta_1, self.beta_2
        v = b2 * v + (1.0 - b2) * g * g
        d = (1.0 - b1**t) / lr * (np.sqrt(v / (1.0 - b2**t)) + self.eps)
        sigma = d - b1 * d_prev
        z = b1 * z + (1.0 - b1) * g - sigma * theta
        return -z / d, v, d, z

    def step_rows(self, table, rows, g, key=None):
        st = self._grow("plain", table.shape) if self._rows is None else self._rows["plain"]
        if st["v"].shape[0] < table.shape[0]:
            st = self._grow("plain", table.shape)
        t = st["t"][rows] + 1
        st["t"][rows] = t
        t = t.reshape((-1,) + (1,) * (table.ndim - 1))
        new, st["v"][rows], st["d"][rows], st["z"][rows] = self._update(
            table[rows], g, t, st["v"][rows], st["d"][rows], st["z"][rows], self.learning_rate)
        table[rows] = new
        return table


class PlainFM(MultiFMRegressor):
    """The numpy step as it was: one array operation per step of the formulas."""

    def _update_target_stats(self, y, mask):
        n = self._y_n = self._y_n + mask
        d = np.where(mask, y - self._y_mean, 0.0)
        self._y_mean = self._y_mean + d / np.maximum(n, 1)
        self._y_m2 = self._y_m2 + d * np.where(mask, y - self._y_mean, 0.0)
        self._mu = self._y_mean.copy()
        var = np.where(n > 1, self._y_m2 / np.maximum(n, 1), 0.0)
        self._sd = np.where(var > 1e-12, np.sqrt(var), 1.0)

    def _robust_weight(self, err, mask, update):
        a = np.abs(err)
        ready = self._n_scale >= _ROBUST_WARMUP
        lim = self.robust * self._scale
        wt = np.where(ready & (a > lim), (lim / np.maximum(a, 1e-12)) ** 2, 1.0)
        if update:
            n = self._n_scale = self._n_scale + mask
            rate = np.where(ready, _ROBUST_RATE, 1.0 / np.maximum(n, 1))
            capped = np.where(ready, np.minimum(a, 4.0 * self._scale), a)
            self._scale = np.where(mask, self._scale + rate * (capped - self._scale), self._scale)
        return wt

    def _sgd_step(self, rows, vals, y, mask, w, fresh):
        W, V = self._W, self._V
        Wr, Vr = W[rows], V[rows]
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
        gW = np.outer(np.concatenate(([1.0], vals)), g)
        gW[1:] += self.l2_weight * Wr
        self._step(self._wopt, self._W, np.concatenate(([0], rows)), gW)
        gV = g[None, :, None] * (vals[:, None, None] * s[None] - Vr * (vals * vals)[:, None, None]) + self.l2_latent * Vr
        self._step(self._vopt, self._V, rows, gV)
        return yhat


def _stream(seed: int, n: int):
    rng = np.random.default_rng(seed)
    names = [f"f{i}" for i in range(60)]
    for _ in range(n):
        ks = rng.choice(60, size=int(rng.integers(1, 25)), replace=False)
        x = {names[k]: float(rng.choice([1.0, 0.0, rng.normal(scale=3.0)])) for k in ks}
        y = {"a": float(rng.normal(scale=2.0)), "b": None if rng.random() < 0.3 else float(rng.normal() * 50),
             "c": float(rng.standard_cauchy())}  # heavy tails: the robust weights and the clip both act
        yield x, y


@pytest.mark.parametrize("settings", [ONLINE_SETTINGS, {}, {"robust": 1.0, "replay": 3, "l2_weight": 1e-3}])
def test_the_learning_step_is_the_plain_vectorised_step_bit_for_bit(settings):
    fast = MultiFMRegressor(targets=("a", "b", "c"), seed=3, **settings)
    plain = PlainFM(targets=("a", "b", "c"), seed=3, weight_optimizer=PlainFTML(0.03),
                    latent_optimizer=PlainFTML(0.03), **settings)
    for i, (x, y) in enumerate(_stream(7, 600)):
        w = 0.5 if i % 7 == 0 else 1.0
        assert np.array_equal(fast.learn_predict_one(x, y, w), plain.learn_predict_one(x, y, w))
    n = len(fast._index)
    assert np.array_equal(fast._W[:n], plain._W[:n]) and np.array_equal(fast._V[:n], plain._V[:n])
    assert np.array_equal(fast._scale, plain._scale) and np.array_equal(fast._mu, plain._mu)
    assert np.array_equal(fast._sd, plain._sd) and np.array_equal(fast._y_m2, plain._y_m2)
