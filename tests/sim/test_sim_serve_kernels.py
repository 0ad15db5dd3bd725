"""The serving kernels' pieces against what they replace, bit for bit: the executors' heap against ``heapq`` (the same
order, not only the same minimum), and a measurement's figures against ``oltunes.percentile`` (the plain code, itself
numpy's) and numpy, on samples of every size a measurement sees, with ties."""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest

from oltunes.percentile import mean, percentiles, total
from oltunes.sim.serve_kernels import _heapreplace, _pairwise, batch_figures, request_figures


def test_heapreplace_is_heapqs_in_every_position():
    """Executors' free times with ties (several free at once, as after a re-configuration)."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(1, 12))
        heap = np.round(rng.uniform(0, 1, n), 1).tolist()
        heapq.heapify(heap)
        fast = np.array(heap)
        for _ in range(int(rng.integers(1, 20))):
            item = float(np.round(rng.uniform(0, 1.5), 1))
            heapq.heapreplace(heap, item)
            _heapreplace(fast, item)
            assert fast.tolist() == heap


def _sample(rng: np.random.Generator) -> np.ndarray:
    n = int(rng.integers(1, 5000)) if rng.random() < 0.1 else int(rng.integers(1, 300))
    x = rng.lognormal(0.0, 1.0, n) * rng.choice([1e-3, 1.0, 1e3])
    return np.round(x, 1) if rng.random() < 0.3 else x  # ties, as latencies rounded or repeated


@pytest.mark.parametrize("seed", range(4))
def test_batch_figures_are_the_plain_percentiles_and_sum(seed):
    rng = np.random.default_rng([seed, 5])
    for _ in range(300):
        lat = _sample(rng)
        got = batch_figures(lat)
        want = (*percentiles(lat.tolist(), (50, 95, 99)), total(lat.tolist()))
        assert got == want and all(type(v) is float for v in got)
        assert list(got[:3]) == np.percentile(lat, (50, 95, 99)).tolist() and got[3] == float(np.sum(lat))


@pytest.mark.parametrize("seed", range(4))
def test_request_figures_are_the_plain_p99_with_shed_requests_and_mean_wait(seed):
    rng = np.random.default_rng([seed, 6])
    for _ in range(300):
        req = _sample(rng)
        wait = req * rng.uniform(0, 1, len(req))
        shed_ms, n_shed = float(rng.uniform(10, 2000)), int(rng.choice([0, 0, 1, int(rng.integers(1, 3000))]))
        got = request_figures(req, wait, shed_ms, n_shed)
        assert got == (percentiles(req.tolist() + [shed_ms] * n_shed, (99,))[0], mean(wait))
        assert got[0] == float(np.percentile(np.concatenate([req, np.full(n_shed, shed_ms)]), 99))
        assert got[1] == float(np.mean(wait))


def test_pairwise_is_numpys_sum_across_its_blocks():
    """Sizes across numpy's blocks (8 accumulators up to 128, halving above), magnitudes spread wide."""
    rng = np.random.default_rng(3)
    for n in [*range(1, 140), 255, 256, 257, 1000, 1031, 4100, 8193, 20011]:
        a = rng.standard_normal(n) * np.exp(rng.standard_normal(n) * 6)
        assert 0.0 + _pairwise(a, 0, n) == float(np.add.reduce(a))
    assert math.copysign(1.0, 0.0 + _pairwise(np.array([-0.0]), 0, 1)) == math.copysign(1.0, np.sum([-0.0]))
