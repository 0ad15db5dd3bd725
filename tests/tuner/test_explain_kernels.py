"""The compiled runner-up scans (``explain_kernels.pair_minima`` behind ``explain.runner_ups``) against the numpy
calls they replaced: the pairs' minima and the best infeasible cell on random grids (ties, NaN and infinite
objectives), and every decision's runner-ups in a simulated run, against ``runner_ups`` as it was."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.tuner import explain
from oltunes.tuner.explain_kernels import pair_minima
from oltunes.types import Alternative


def numpy_pair_minima(feasible, obj):
    P, V = obj.shape[:2]
    o = np.where(feasible, obj, np.inf).reshape(P, V, -1)
    per_pair = np.ascontiguousarray(o.reshape(P * V, -1).T).min(axis=0).reshape(P, V)
    cell = np.array([[int(o[p, v].argmin()) for v in range(V)] for p in range(P)]).reshape(P, V)
    return per_pair, cell, int(np.argmin(np.where(feasible, np.inf, obj)))


def numpy_runner_ups(est, verdict, objective, obj, idx, near_equal, k=4):
    """The numpy reference: ``runner_ups`` as it was written."""
    out = []
    best = obj[idx]
    P, V = obj.shape[:2]
    o = np.where(verdict.feasible, obj, np.inf).reshape(P, V, -1)
    per_pair = np.ascontiguousarray(o.reshape(P * V, -1).T).min(axis=0).reshape(P, V)
    per_pair[idx[0], idx[1]] = np.inf
    for flat in np.argsort(per_pair, axis=None)[: k - 1]:
        p, v = divmod(int(flat), V)
        if not np.isfinite(per_pair[p, v]):
            break
        j = (p, v, *divmod(int(o[p, v].argmin()), obj.shape[3]))
        rel = (obj[j] / best - 1.0) * 100 if best > 0 else 0.0
        reason = f"{objective.worse} (+{rel:.1f}%)" if rel > near_equal * 100 else "near-equal, leaves more fragmentation"
        out.append(Alternative(candidate_key=est.key(j), prediction=est.prediction(j), reason=reason))
    inf = np.where(verdict.feasible, np.inf, obj)
    flat = int(np.argmin(inf))
    if np.isfinite(inf.flat[flat]):
        j = tuple(int(i) for i in np.unravel_index(flat, inf.shape))
        if j != idx:
            out.append(Alternative(candidate_key=est.key(j), prediction=est.prediction(j), reason=verdict.why(j)))
    return out


@pytest.mark.parametrize("seed", range(60))
def test_the_compiled_scans_are_the_numpy_ones_on_random_grids(seed):
    """Positive objectives (as every objective is), coarse so that cells tie, with NaN and infinite ones."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(rng.integers(1, n)) for n in (7, 5, 5, 4))
    obj = rng.choice([1.0, 2.0, 3.5, np.inf, np.nan], size=shape, p=[.35, .3, .25, .05, .05])
    feasible = rng.random(shape) < float(rng.choice([0.0, 0.3, 0.9, 1.0]))
    got, want = pair_minima(feasible, obj), numpy_pair_minima(feasible, obj)
    assert got[0].tobytes() == want[0].tobytes() and got[2] == want[2]
    finite = np.isfinite(want[0])  # (a pair's cell is read only when its minimum is a number)
    assert np.array_equal(got[1][finite], want[1][finite])


def test_runner_ups_are_the_numpy_ones_in_a_simulated_run(monkeypatch):
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator

    compiled_runner_ups = explain.runner_ups
    n = [0, 0]

    def checked(est, verdict, objective, obj, idx, near_equal, k=4):
        got = compiled_runner_ups(est, verdict, objective, obj, idx, near_equal, k)
        assert got == numpy_runner_ups(est, verdict, objective, obj, idx, near_equal, k)
        n[0] += 1
        n[1] += len(got)
        return got

    monkeypatch.setattr(explain, "runner_ups", checked)
    prep = prepare(load_scenario("bursty"))
    sim = simulator(prep)
    sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    assert n[0] > 50 and n[1] > 2 * n[0]
