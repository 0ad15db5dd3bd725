"""FTML optimizer: the three update paths agree, it converges, and it tracks an abrupt change faster."""

from __future__ import annotations

import numpy as np
from river import optim

from oltunes.learner.ftml import FTML
from tests.quality import over_seeds


def test_dict_vector_and_row_paths_agree():
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=6)
    grads = rng.normal(size=(50, 6))
    d_opt, v_opt, r_opt = FTML(lr=0.05), FTML(lr=0.05), FTML(lr=0.05)
    w_dict = dict(enumerate(w0))
    w_vec = w0.copy()
    table = w0.reshape(3, 2).copy()  # same numbers as a (features x factors) table, every row active
    for g in grads:
        w_dict = d_opt.step(w_dict, dict(enumerate(g)))
        w_vec = v_opt.step(w_vec, g.copy())
        r_opt.step_rows(table, np.arange(3), g.reshape(3, 2))
    np.testing.assert_allclose(np.array([w_dict[i] for i in range(6)]), w_vec, rtol=0, atol=1e-12)
    np.testing.assert_allclose(table.ravel(), w_vec, rtol=0, atol=1e-12)


def test_state_is_per_feature_for_vector_values():
    # Latent vectors passed as {feature: vector}: a feature first updated late gets t=1 bias correction,
    # exactly as if it had its own optimizer (river's FM keys by latent index and would mix them).
    rng = np.random.default_rng(1)
    shared = FTML(lr=0.05)
    alone = FTML(lr=0.05)
    w = {"a": rng.normal(size=4), "b": rng.normal(size=4)}
    wb = {"b": w["b"].copy()}
    for _ in range(30):
        w = shared.step(w, {"a": rng.normal(size=4)})
    g = rng.normal(size=4)
    w = shared.step(w, {"b": g})
    wb = alone.step(wb, {"b": g})
    np.testing.assert_allclose(w["b"], wb["b"], atol=1e-12)


def test_sparse_rows_leave_other_rows_untouched():
    table = np.ones((4, 3))
    opt = FTML(lr=0.1)
    opt.step_rows(table, np.array([1, 3]), np.full((2, 3), 0.5))
    np.testing.assert_array_equal(table[[0, 2]], 1.0)
    assert (table[[1, 3]] < 1.0).all()


def _stream(seed: int, n: int, d: int = 8, spread: float = 1.0):
    """Linear target with features on very different scales; the weights jump at n // 2."""
    rng = np.random.default_rng(seed)
    s = np.logspace(-spread, spread, d)
    w1, w2 = rng.normal(size=d) / s, rng.normal(size=d) / s
    for t in range(n):
        z = rng.normal(size=d) * s
        yield dict(enumerate(z)), float((w1 if t < n // 2 else w2) @ z + 0.1 * rng.normal())


def _abs_errors(opt, seed: int, n: int, spread: float = 1.0) -> np.ndarray:
    w: dict[int, float] = {i: 0.0 for i in range(8)}
    errs = []
    for x, y in _stream(seed, n, spread=spread):
        p = sum(w[i] * xi for i, xi in x.items())
        if not abs(p) < 1e6:  # a diverging step size in the grid: count the rest at the error cap
            errs.extend([1e3] * (n - len(errs)))
            break
        errs.append(min(abs(p - y), 1e3))
        w = opt.step(w, {i: (p - y) * xi for i, xi in x.items()})
    return np.array(errs)


def test_converges_on_stationary_stream():
    # Unit-scale features; first half of the stream (before the shift). Noise |e| ~ 0.08.
    tails = []

    def tail_vs_head(seed):
        errs = _abs_errors(FTML(lr=0.03), seed=seed, n=4000, spread=0.0)[:2000]
        tails.append(errs[-300:].mean())
        return errs[-300:].mean() / errs[:50].mean()

    med, spread = over_seeds(tail_vs_head, seeds=(3, 4, 5, 6, 7))
    assert med < 0.1, spread
    assert np.median(tails) < 0.15, tails


MAKERS = {
    "ftml": lambda lr: FTML(lr=lr),
    "ftrl": lambda lr: optim.FTRLProximal(alpha=lr, l2=0.0),
    "sgd": lambda lr: optim.SGD(lr),
}


def test_recovers_from_abrupt_change_faster_than_ftrl_and_sgd():
    # Fair protocol: each optimizer gets the step size (from one grid) that is best on the stationary
    # first half of a tuning stream; then the area under |error| over the 500 steps after the shift is
    # summed over unseen seeds.
    n, grid, eval_seeds = 2000, (0.001, 0.01, 0.03, 0.1, 0.3, 1.0), (10, 11, 12, 20, 21, 22)
    best_lr = {name: min(grid, key=lambda lr: _abs_errors(mk(lr), 0, n)[: n // 2].mean())
               for name, mk in MAKERS.items()}
    area = {name: sum(_abs_errors(MAKERS[name](best_lr[name]), s, n)[n // 2: n // 2 + 500].sum() for s in eval_seeds)
            for name in MAKERS}
    # Deterministic (seeded); measured ratios are ~0.89 (FTRL) and ~0.7 (SGD).
    assert area["ftml"] < 0.95 * area["ftrl"], (best_lr, area)
    assert area["ftml"] < 0.95 * area["sgd"], (best_lr, area)


def test_json_state_round_trip():
    opt = FTML(lr=0.05)
    table = np.zeros((3, 2))
    opt.step_rows(table, np.array([0, 2]), np.ones((2, 2)))
    again = FTML.from_state_dict(opt.state_dict())
    t1, t2 = table.copy(), table.copy()
    opt.step_rows(t1, np.array([0, 1]), np.full((2, 2), -0.3))
    again.step_rows(t2, np.array([0, 1]), np.full((2, 2), -0.3))
    np.testing.assert_array_equal(t1, t2)
