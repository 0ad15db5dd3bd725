"""The compiled request waits (``wait_kernels.request_waits``) against the numpy expressions they replaced
(``candidates.fill_wait_ms`` and ``queue_wait_ms`` over the grid), bit for bit: on random grids (zero, infinite
and NaN throughputs included) and on every grid a simulated run scores."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.tuner import estimate
from oltunes.tuner.candidates import fill_wait_ms, queue_wait_ms
from oltunes.tuner.wait_kernels import request_waits


def numpy_waits(batch_lat, thr, batch_sizes, concurrencies, rate, burstiness):
    """The numpy reference: ``Estimator._request_latency``'s waits as they were written."""
    req = batch_lat + fill_wait_ms(np.array(batch_sizes, dtype=float), rate)[:, None]
    queue = 0.0
    if burstiness is not None:
        queue = queue_wait_ms(batch_lat, rate, thr, np.array(concurrencies, dtype=float), burstiness)
    return req, queue, req + queue


def compiled_waits(batch_lat, thr, batch_sizes, concurrencies, rate, burstiness):
    queueing = burstiness is not None
    req, queue, total = request_waits(
        batch_lat, thr, np.asarray(fill_wait_ms(np.array(batch_sizes, dtype=float), rate), dtype=float),
        np.array(concurrencies, dtype=float), float(rate), queueing, 1.0 + burstiness if queueing else 0.0,
        float(np.log(100.0)))
    return req, queue if queueing else 0.0, total


def _same(got, want) -> bool:
    return all(np.shape(g) == np.shape(w) and np.asarray(g).tobytes() == np.asarray(w).tobytes()
               for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("burstiness", [None, 0.0, 1.0, 3.7])
def test_the_compiled_waits_are_the_numpy_ones_on_random_grids(seed, burstiness):
    rng = np.random.default_rng(seed)
    batches, concs = (1, 2, 4, 8, 16)[: int(rng.integers(1, 6))], (1, 2, 3, 4)[: int(rng.integers(1, 5))]
    shape = (int(rng.integers(1, 6)), int(rng.integers(1, 4)), len(batches), len(concs))
    lat = rng.uniform(0.01, 300.0, shape) * 10.0 ** rng.integers(-2, 3, shape)
    thr = rng.uniform(0.1, 500.0, shape) * 10.0 ** rng.integers(-3, 3, shape)
    thr.flat[rng.integers(0, thr.size, 4)] = rng.choice([0.0, -0.0, np.inf, np.nan], 4)
    lat.flat[rng.integers(0, lat.size, 2)] = rng.choice([0.0, np.nan, np.inf], 2)
    for rate in (0.3, 12.0, 250.0, float(rng.uniform(0.1, 5e3))):
        with np.errstate(all="ignore"):
            want = numpy_waits(lat, thr, batches, concs, rate, burstiness)
        assert _same(compiled_waits(lat, thr, batches, concs, rate, burstiness), want)


def test_the_compiled_waits_are_the_numpy_ones_on_a_simulated_runs_grids(monkeypatch):
    """Every grid the tuner works out waits for in a simulated run (scenario ``bursty``), checked after the run
    against the numpy expressions with the tuner's own burstiness."""
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator

    calls = []

    def recorded(batch_lat, thr, fill, conc, rate, queueing, burst, ln100):
        got = request_waits(batch_lat, thr, fill, conc, rate, queueing, burst, ln100)
        calls.append((batch_lat, thr, rate, queueing, got))
        return got

    monkeypatch.setattr(estimate, "request_waits", recorded)
    prep = prepare(load_scenario("bursty"))
    sim = simulator(prep)
    policy = Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster))
    sim.run(policy)
    est = policy.tuner.estimator
    assert len(calls) > 20 and max(c[0].shape[0] for c in calls) > 1 and all(c[3] for c in calls)
    for batch_lat, thr, rate, _, (req, queue, total) in calls:
        want = numpy_waits(batch_lat, thr, est.batch_sizes, est.concurrencies, rate, est.burstiness)
        assert _same((req, queue, total), want)


def test_one_batchs_fill_wait_is_numpys_minimum():
    """``fill_wait_ms`` of one float batch size (its path without numpy) gives np.minimum's value bit for bit."""
    rng = np.random.default_rng(3)
    batches = [1.0, 2.0, 8.0, 64.0, 0.5, np.inf, np.nan, *rng.uniform(1.0, 64.0, 50)]
    rates = [1e-9, 0.2, 1.0, 199.0, 200.0, 1e6, np.inf, np.nan, *rng.uniform(0.01, 5000.0, 50)]
    for b in map(float, batches):
        for r in map(float, rates):
            for delay in (5.0, 0.0, -0.0, np.nan):
                got = fill_wait_ms(b, r, delay)
                want = 0.0 * b if r <= 0 else np.minimum(1000.0 * (b - 1.0) / r, delay)
                assert np.float64(got).tobytes() == np.float64(want).tobytes(), (b, r, delay)
