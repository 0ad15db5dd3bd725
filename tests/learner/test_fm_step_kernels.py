"""The FM's compiled learning step (``ftml_kernel.fm_step_error``, ``fm_step_update``, ``fm_step``) against the
numpy formulas it replaced, bit for bit (signs of zeros included), and a long stream learnt through it against the
same stream learnt through the optimizers' ``step_rows`` (a shared optimizer with a schedule, and rows stepped past
the powers' tables, where the kernel declines)."""

from __future__ import annotations

import numpy as np
import pytest
from river import optim

from oltunes.learner.fm import MultiFMRegressor
from oltunes.learner.ftml import FTML
from oltunes.learner.ftml_kernel import fm_step_error, fm_step_update
from tests.learner.test_fm_step_equivalence import PlainFM, PlainFTML, _stream


def _values(rng, shape):
    """Magnitudes over many decades, exact and negative zeros."""
    x = rng.normal(size=shape) * 10.0 ** rng.integers(-6, 6, size=shape)
    x[rng.random(shape) < 0.1] = 0.0
    x[rng.random(shape) < 0.1] = -0.0
    return x


def _same(a, b) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("k", [1, 3, 8, 9, 16, 21])
@pytest.mark.parametrize("m", [0, 1, 2, 7, 13])
@pytest.mark.parametrize("settings", [{}, {"standardize": True}, {"robust": 2.0}, {"robust": 0.0, "standardize": True}])
def test_step_error_is_the_numpy_step(k, m, settings):
    """Prediction, gradient, latent sums and the robust scales as ``PlainFM``'s numpy step makes them, over fresh and
    replayed steps (the scales move on fresh ones only), past the robust warm-up, with masked targets."""
    rng = np.random.default_rng(100 * k + m)
    T = 3
    plain = PlainFM(targets=("a", "b", "c"), n_factors=k, **settings)
    plain._init_state()
    scale, n_scale = np.abs(_values(rng, T)), rng.integers(0, 40, T).astype(np.int64)
    mu, sd = _values(rng, T), np.abs(_values(rng, T)) + 0.5
    V, W = _values(rng, (30, T, k)), _values(rng, (30, T))
    for step in range(8):
        rows = rng.choice(np.arange(1, 30), size=m, replace=False).astype(np.intp)
        vals = _values(rng, m)  # (finite: the tuner refuses non-finite features, and a NaN's sign bit is the CPU's)
        y, mask = _values(rng, T) * 10.0 ** rng.integers(-2, 3), rng.random(T) > 0.2
        w, fresh = (0.5 if step % 3 else 1.0), step % 2 == 0
        plain._W, plain._V, plain._mu, plain._sd = W, V, mu, sd
        plain._scale, plain._n_scale = scale.copy(), n_scale.copy()
        Wr = W.take(rows, axis=0)
        xv = V.take(rows, axis=0) * vals[:, None, None]
        s = xv.sum(axis=0)
        want = _plain_error(plain, W, Wr, vals, s, xv, y, mask, w, fresh)
        robust = plain.robust is not None
        got = fm_step_error(W, vals @ Wr, V, rows, vals, y, mask, w, plain.clip_gradient, plain.standardize, mu, sd,
                            robust, float(plain.robust) if robust else 0.0, scale, n_scale, fresh)
        assert all(_same(a, b) for a, b in zip(got, (*want, s)))
        assert _same(scale, plain._scale) and _same(n_scale, plain._n_scale)


def _plain_error(fm, W, Wr, vals, s, xv, y, mask, w, fresh):
    """``PlainFM._sgd_step`` up to its gradient (its numpy formulas)."""
    yhat = W[0] + vals @ Wr + 0.5 * ((s * s).sum(-1) - (xv * xv).sum(axis=(0, 2)))
    if fm.standardize:
        err = yhat - (y - fm._mu) / fm._sd
        yhat = yhat * fm._sd + fm._mu
    else:
        err = yhat - y
    if fm.robust is not None:
        err = err * fm._robust_weight(err, mask, update=fresh)
    return yhat, np.where(mask, np.clip(w * err, -fm.clip_gradient, fm.clip_gradient), 0.0)


@pytest.mark.parametrize("seed", range(6))
def test_step_update_is_the_numpy_gradients_and_ftml_rows(seed):
    rng = np.random.default_rng(seed)
    T, k, n, m = 3, 8, 25, int(rng.integers(0, 9))
    W, V = _values(rng, (n, T)), _values(rng, (n, T, k))
    rows = rng.choice(np.arange(1, n), size=m, replace=False).astype(np.intp)
    vals, s, g = _values(rng, m), _values(rng, (T, k)), _values(rng, T)
    l2w, l2l = (0.0, 1e-2) if seed % 2 else (1e-3, 0.0)
    fast_w, fast_v = FTML(0.03), FTML(0.05, beta_1=0.5)
    plain_w, plain_v = PlainFTML(0.03), PlainFTML(0.05, beta_1=0.5)
    W2, V2 = W.copy(), V.copy()
    for _ in range(3):  # states that have moved
        Wr, Vr = W2.take(rows, axis=0), V2.take(rows, axis=0)
        wrows = np.concatenate(([0], rows)).astype(np.intp)
        gW = np.concatenate(([1.0], vals))[:, None] * g[None, :]
        gW[1:] += l2w * Wr
        gV = g[None, :, None] * (vals[:, None, None] * s[None] - Vr * (vals * vals)[:, None, None]) + l2l * Vr
        plain_w.step_rows(W2, wrows, gW)
        plain_v.step_rows(V2, rows, gV)
        assert fm_step_update(W, V, rows, vals, s, g, l2w, l2l, fast_w.rows_kernel_args(W),
                              fast_v.rows_kernel_args(V))
        assert _same(W, W2) and _same(V, V2)
        for fast, plain in ((fast_w, plain_w), (fast_v, plain_v)):
            st, ref = next(iter(fast._rows.values())), plain._rows["plain"]
            assert all(_same(st[key], ref[key]) for key in ("t", "v", "d", "z"))


def test_step_update_declines_past_the_powers_tables_and_changes_nothing():
    W, V = np.ones((4, 3)), np.ones((4, 3, 2))
    opt = FTML(0.03)
    args = opt.rows_kernel_args(W)
    args[0][2] = len(args[4]) - 1  # row 2's next step is beyond the tables
    before = [a.copy() for a in args[:4]]
    assert not fm_step_update(W, V, np.array([1, 2], dtype=np.intp), np.ones(2), np.ones((3, 2)), np.ones(3), 0.0,
                              0.0, args, FTML(0.03).rows_kernel_args(V))
    assert (W == 1.0).all() and (V == 1.0).all() and all(_same(a, b) for a, b in zip(args[:4], before))


class StepRowsFM(MultiFMRegressor):
    """Learns through the optimizers' ``step_rows`` only (the path other optimizers and declined steps take)."""

    def _kernel_update(self):
        return None


@pytest.mark.parametrize("shared", [False, True])
def test_a_long_stream_learns_the_same_through_the_kernel_and_through_step_rows(shared):
    def make(cls):
        w = FTML(lr=optim.schedulers.InverseScaling(0.05, power=0.3))
        v = w if shared else FTML(0.03)
        return cls(targets=("a", "b", "c"), seed=5, weight_optimizer=w, latent_optimizer=v, l2_weight=1e-3,
                   replay=1, robust=2.0, standardize=True)

    fast, plain = make(MultiFMRegressor), make(StepRowsFM)
    for x, y in _stream(11, 1300):  # the bias row steps past the first powers' tables (1,024 entries)
        assert _same(fast.learn_predict_one(x, y), plain.learn_predict_one(x, y))
    n = len(fast._index)
    assert _same(fast._W[:n], plain._W[:n]) and _same(fast._V[:n], plain._V[:n])
    assert fast._wopt.n_iterations == plain._wopt.n_iterations == (2 if shared else 1) * 2 * 1300
    assert len(fast._wopt._pow_tables[1]) > 1024  # the kernel declined once, and step_rows grew the tables
    assert fast.state_dict() == plain.state_dict()


def test_kernel_args_follow_the_optimizers_state():
    """``FTML.rows_kernel_args`` hands out the table's current state: kept between calls, renewed when the state grows
    with a larger table, is restored, or the powers' tables grow; a pickle leaves the kept arrays out."""
    import pickle

    opt = FTML(0.03)
    W = np.zeros((4, 3))
    first = opt.rows_kernel_args(W)
    assert first[0] is opt.rows_kernel_args(W)[0] is next(iter(opt._rows.values()))["t"]
    W2 = np.zeros((40, 3))
    grown = opt.rows_kernel_args(W2)
    assert grown[0] is not first[0] and grown[0].shape == (40,) and grown[0] is next(iter(opt._rows.values()))["t"]
    opt.load_state_dict(opt.state_dict())
    assert opt.rows_kernel_args(W2)[0] is next(iter(opt._rows.values()))["t"] is not grown[0]
    opt._power_tables(5000)
    assert len(opt.rows_kernel_args(W2)[4]) > 5000
    assert pickle.loads(pickle.dumps(opt))._kernel_args is None


@pytest.mark.parametrize("decline", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_fm_step_is_the_error_then_the_update(seed, decline):
    """``fm_step`` (one call) makes what ``fm_step_error`` then ``fm_step_update`` make, bit for bit: prediction,
    gradient, latent sums, both tables, the optimizers' states and the robust scales; where the update declines,
    neither table moves, in both."""
    from oltunes.learner.ftml_kernel import fm_step

    rng = np.random.default_rng(seed)
    T, k, n, m = 3, 4, 20, int(rng.integers(0, 7))
    W, V = _values(rng, (n, T)), _values(rng, (n, T, k))
    rows = rng.choice(np.arange(1, n), size=m, replace=False).astype(np.intp)
    vals, y, mask = _values(rng, m), _values(rng, T), rng.random(T) > 0.2
    mu, sd = _values(rng, T), np.abs(_values(rng, T)) + 0.5
    scale, n_scale = np.abs(_values(rng, T)), rng.integers(0, 40, T).astype(np.int64)
    runs = []
    for fused in (True, False):
        Wc, Vc, sc, nc = W.copy(), V.copy(), scale.copy(), n_scale.copy()
        w_opt, v_opt = FTML(0.03).rows_kernel_args(Wc), FTML(0.05, beta_1=0.5).rows_kernel_args(Vc)
        if decline:
            w_opt[0][0] = len(w_opt[4]) - 1  # the bias row's next step is beyond the tables
        error = (Wc, vals @ Wc.take(rows, axis=0), Vc, rows, vals, y, mask, 0.5, 3.0, bool(seed % 2), mu, sd, True, 2.0,
                 sc, nc, True)
        if fused:
            yhat, g, s, stepped = fm_step(*error, 1e-3, 1e-2, w_opt, v_opt)
        else:
            yhat, g, s = fm_step_error(*error)
            stepped = fm_step_update(Wc, Vc, rows, vals, s, g, 1e-3, 1e-2, w_opt, v_opt)
        runs.append((stepped, yhat, g, s, Wc, Vc, sc, nc, *w_opt[:4], *v_opt[:4]))
    assert runs[0][0] is runs[1][0] is (not decline)
    assert all(_same(a, b) for a, b in zip(runs[0][1:], runs[1][1:]))
