"""The compiled least-violating fallback (``selection_kernels.graded_violation`` behind
``Selector.least_violating``) against the numpy code it replaced, bit for bit: the chosen cell and the graded
grid, on random grids (NaN, infinite and zero figures, ties) and on every fallback a simulated run makes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from oltunes.tuner import selection
from oltunes.tuner.selection import Selector, lexsort_first


def numpy_least_violating(sel: Selector, est, verdict, obj):
    """The numpy reference: ``least_violating`` as it was written."""
    job = est.job
    shape = obj.shape
    cap_fail = np.broadcast_to(~verdict.masks["memory"], shape)
    co_fail = np.broadcast_to(~verdict.masks["co-runners"], shape)
    shortfall = np.broadcast_to(np.array([max(0.0, job.accuracy_floor - v.accuracy) for v in est.variants])
                                [None, :, None, None], shape)
    crowd = np.array([len(o.members) for o in est.options], dtype=float)[:, None, None, None]
    over = np.maximum(0.0, est.req_lat / job.slo_ms - 1.0)
    if job.kind == "streaming":
        over = np.maximum(over, job.arrival_rate_rps * sel.throughput_headroom / est.pess_thr - 1.0)
    graded = over + sel.crowding * crowd + co_fail * 1.0
    graded = np.broadcast_to(graded, shape)
    first = lexsort_first((obj.ravel(), graded.ravel(), shortfall.ravel(), cap_fail.ravel()))
    graded = np.where(cap_fail | (shortfall > 0), np.inf, graded)
    return tuple(int(i) for i in np.unravel_index(first, shape)), graded


def _case(rng):
    P, V, B, C = (int(rng.integers(1, n)) for n in (7, 5, 5, 4))
    shape = (P, V, B, C)
    job = SimpleNamespace(kind=str(rng.choice(["streaming", "batch"])), slo_ms=float(rng.choice([50.0, 200.0, 0.0])),
                          arrival_rate_rps=float(rng.choice([0.0, 5.0, 80.0])), accuracy_floor=float(rng.uniform(0.6, 0.9)))
    # coarse values, so that cells tie on every key; some NaN, infinite and zero figures
    req_lat = rng.choice([10.0, 50.0, 120.0, 400.0, 0.0, np.inf, np.nan], size=shape, p=[.3, .2, .2, .2, .04, .03, .03])
    pess_thr = rng.choice([1.0, 40.0, 100.0, 0.0, -0.0, np.inf, np.nan], size=shape, p=[.3, .3, .3, .03, .02, .03, .02])
    obj = rng.choice([1.0, 2.0, 3.0, -0.0, 0.0, np.nan], size=shape, p=[.3, .3, .3, .04, .03, .03])
    est = SimpleNamespace(job=job, req_lat=req_lat, pess_thr=pess_thr,
                          variants=[SimpleNamespace(accuracy=float(a)) for a in rng.uniform(0.5, 0.95, V)],
                          options=[SimpleNamespace(members=[0] * int(rng.integers(0, 3))) for _ in range(P)])
    masks = {"memory": rng.random((P, V, 1, C)) < 0.8, "co-runners": rng.random((P, 1, 1, 1)) < 0.6}
    return est, SimpleNamespace(masks=masks), obj


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_fallback_is_the_numpy_one_on_random_grids(seed):
    rng = np.random.default_rng(seed)
    sel = Selector(crowding=float(rng.choice([0.0, 0.25, 1.0])), throughput_headroom=float(rng.choice([1.0, 1.2])))
    est, verdict, obj = _case(rng)
    with np.errstate(all="ignore"):
        want_idx, want_graded = numpy_least_violating(sel, est, verdict, obj)
        got_idx, got_graded = sel.least_violating(est, verdict, obj)
    assert got_idx == want_idx and got_graded.tobytes() == want_graded.tobytes()


def test_the_compiled_fallback_is_the_numpy_one_on_a_simulated_runs_fallbacks(monkeypatch):
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator

    compiled_fallback = Selector.least_violating
    n = [0]

    def checked(self, est, verdict, obj):
        got = compiled_fallback(self, est, verdict, obj)
        want = numpy_least_violating(self, est, verdict, obj)
        assert got[0] == want[0] and got[1].tobytes() == want[1].tobytes()
        n[0] += 1
        return got

    monkeypatch.setattr(selection.Selector, "least_violating", checked)
    prep = prepare(load_scenario("bursty"))
    sim = simulator(prep)
    sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    assert n[0] > 5


def _float_key(rng: np.random.Generator, n: int) -> np.ndarray:
    """Few distinct values (ties), signed zeros, infinities and NaN, or a key NaN everywhere."""
    pool = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 0.25])
    v = pool[rng.integers(len(pool), size=n)] if rng.random() < 0.7 else rng.normal(size=n).round(1)
    if rng.random() < 0.1:
        v[:] = np.nan
    return v


@pytest.mark.parametrize("seed", range(200))
def test_the_compiled_tie_breaks_are_lexsorts_first(seed):
    from oltunes.tuner.selection_kernels import lexsort_first5

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    keys = tuple(_float_key(rng, n) for _ in range(5))
    assert lexsort_first5(*keys) == int(np.lexsort(keys)[0]) == lexsort_first(keys)
