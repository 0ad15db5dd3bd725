"""The compiled effective-batch energy (``objective_kernels.effective_batch_cells``) against the numpy expression
it replaced, bit for bit: on random grids (NaN and infinite latencies included) and on every grid a simulated run
charges."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from oltunes.tuner import objectives


def numpy_effective_batch_energy(est, rate: float) -> np.ndarray:
    """The numpy reference, as ``objectives._effective_batch_energy`` was written."""
    b = np.array(est.batch_sizes, dtype=float)
    c = np.array(est.concurrencies, dtype=float)
    b_eff = 1.0 + rate * est.lat[:, :, :1, :] / 1000.0 / c  # P, V, 1, C
    at = np.minimum(np.searchsorted(b, b_eff, side="right") - 1, np.arange(len(b))[:, None])  # P, V, B, C
    np.maximum(at, 0, out=at)
    P, V, B, C = est.energy.shape
    cell = (np.arange(P * V) * (B * C)).reshape(P, V, 1, 1) + np.arange(C)
    return est.energy.reshape(-1)[cell + at * C]


@pytest.mark.parametrize("seed", range(12))
def test_the_compiled_cells_are_the_numpy_ones_on_random_grids(seed):
    rng = np.random.default_rng(seed)
    batches = tuple(sorted({int(x) for x in rng.choice([1, 2, 3, 4, 8, 16, 32], size=int(rng.integers(1, 6)))}))
    concs = tuple(range(1, int(rng.integers(2, 5))))
    shape = (int(rng.integers(1, 7)), int(rng.integers(1, 5)), len(batches), len(concs))
    lat = rng.uniform(0.01, 200.0, shape) * 10.0 ** rng.integers(-2, 3, shape)
    lat.flat[rng.integers(0, lat.size, 3)] = rng.choice([np.nan, np.inf, 0.0], 3)
    est = SimpleNamespace(batch_sizes=batches, concurrencies=concs, lat=lat, energy=rng.uniform(0.1, 5.0, shape))
    for rate in (0.5, 7.0, 20.0, 300.0, 5000.0, float(rng.uniform(0.1, 1e4))):
        got, want = objectives._effective_batch_energy(est, rate), numpy_effective_batch_energy(est, rate)
        assert got.shape == want.shape and got.tobytes() == want.tobytes()


def test_the_compiled_cells_are_the_numpy_ones_on_a_simulated_runs_grids(monkeypatch):
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator

    plain = objectives._effective_batch_energy
    seen = []

    def checked(est, rate):
        got, want = plain(est, rate), numpy_effective_batch_energy(est, rate)
        assert got.tobytes() == want.tobytes()
        seen.append(est.energy.shape)
        return got

    monkeypatch.setattr(objectives, "_effective_batch_energy", checked)
    prep = prepare(load_scenario("bursty"))
    sim = simulator(prep)
    sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    assert len(seen) > 20 and max(s[0] for s in seen) > 1
