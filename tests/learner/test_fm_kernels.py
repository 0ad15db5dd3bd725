"""The compiled per-row FM sums (``fm_kernels.part_sums``) against the numpy expressions they replaced, bit for
bit (signs of zeros included): on random tables and index arrays, and on every call a simulated run makes."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.learner import fm_kernels, fm_scoring
from oltunes.learner.fm_kernels import part_sums


def numpy_part_sums(W, V, rows, vals):
    """The numpy reference: ``part_terms`` and ``_raw_many``'s interaction as they were written."""
    lin = (W.take(rows, axis=0) * vals[:, :, None]).sum(axis=1)
    xv = V.take(rows, axis=0) * vals[:, :, None, None]  # n, m, T, k
    s = xv.sum(axis=1)
    q = (xv * xv).sum(axis=(1, 3))
    return lin, s, q, 0.5 * ((s * s).sum(-1) - q)


def _same(got, want) -> bool:
    return all(g.shape == w.shape and g.tobytes() == w.tobytes() for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("k", [1, 2, 5, 7, 8, 9, 16, 21, 64, 128])
@pytest.mark.parametrize("m", [1, 2, 7, 13])
def test_part_sums_is_the_numpy_expression_on_random_tables(k, m):
    rng = np.random.default_rng(1000 * k + m)
    F, T, n = 40, 3, 11
    # magnitudes over many decades (rounding shows in the order of additions), exact zeros and negative zeros
    W = rng.normal(size=(F, T)) * 10.0 ** rng.integers(-6, 6, size=(F, T))
    V = rng.normal(size=(F, T, k)) * 10.0 ** rng.integers(-6, 6, size=(F, T, k))
    W[1], V[1] = 0.0, -0.0
    rows = rng.integers(0, F, size=(n, m)).astype(np.intp)
    vals = rng.normal(size=(n, m)) * 10.0 ** rng.integers(-3, 3, size=(n, m))
    rows[:, m // 2 :] = np.where(rng.random((n, m - m // 2)) < 0.5, 0, rows[:, m // 2 :])  # padding: row 0, 0.0
    vals[rows == 0] = 0.0
    vals[0] = -0.0
    assert _same(part_sums(W, V, rows, vals), numpy_part_sums(W, V, rows, vals))


def test_part_sums_is_the_numpy_expression_on_a_simulated_runs_calls(monkeypatch):
    """Every (tables, index arrays) the tuner scores in a simulated run (scenario ``light``): the compiled sums
    equal numpy's, so its decisions are those the numpy scoring made."""
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator

    calls = []

    def checked(W, V, rows, vals):
        got = part_sums(W, V, rows, vals)
        assert _same(got, numpy_part_sums(W, V, rows, vals))
        calls.append(rows.shape)
        return got

    monkeypatch.setattr(fm_scoring, "part_sums", checked)
    prep = prepare(load_scenario("light"))
    sim = simulator(prep)
    sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    assert len(calls) > 100 and max(n for n, _ in calls) > 1 and max(m for _, m in calls) > 1


def test_factors_beyond_the_fixed_summation_pattern_are_refused():
    from oltunes.learner.fm import MultiFMRegressor

    fm = MultiFMRegressor(targets=("a",), n_factors=fm_kernels.MAX_FACTORS + 1, seed=0)
    rows, vals = fm.index([{"x": 1.0}])
    with pytest.raises(ValueError):
        fm.predict_many(rows, vals)
