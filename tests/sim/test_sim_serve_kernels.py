"""The serving kernels' pieces against what they replace, bit for bit: the executors' heap against ``heapq`` (the same
order, not only the same minimum), a batch's noise against ``Generator.lognormal``, and a measurement's figures against ``oltunes.percentile`` (the plain code, itself
numpy's) and numpy, on samples of every size a measurement sees, with ties."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from oltunes.percentile import mean, percentiles, total
from oltunes.sim.serve_kernels import _batch_figures, _heapreplace, _noise, interval_figures


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


@pytest.mark.parametrize("sigma", [0.0, 1e-3, 0.05, 0.23, 0.4, 1.0, 3.0])
def test_noise_is_the_lognormal_draw_of_the_same_normal(sigma):
    """``lognormal(0, sigma, n)`` and ``standard_normal(n)`` from one generator state: the same draws, and the
    kernel's exponential of each normal is numpy's lognormal value bit for bit (the generators end equal too)."""
    for seed in range(40):
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        want = a.lognormal(0.0, sigma, 4096)
        z = b.standard_normal(4096)
        got = np.array([_noise(float(x), sigma) for x in z])
        assert got.view(np.int64).tolist() == want.view(np.int64).tolist()
        assert a.bit_generator.state == b.bit_generator.state


def _sample(rng: np.random.Generator) -> np.ndarray:
    n = int(rng.integers(1, 5000)) if rng.random() < 0.1 else int(rng.integers(1, 300))
    x = rng.lognormal(0.0, 1.0, n) * rng.choice([1e-3, 1.0, 1e3])
    return np.round(x, 1) if rng.random() < 0.3 else x  # ties, as latencies rounded or repeated


@pytest.mark.parametrize("seed", range(4))
def test_batch_figures_are_the_plain_percentiles_and_sum(seed):
    """Samples of every size (sorted by insertion up to 64, by numba beyond; numpy's own quantile beyond 2048)."""
    rng = np.random.default_rng([seed, 5])
    for _ in range(300):
        lat, got = _sample(rng), np.full(4, np.nan)
        _batch_figures(lat, got)
        assert got.tolist() == [*percentiles(lat.tolist(), (50, 95, 99)), total(lat.tolist())]
        assert got[:3].tolist() == np.percentile(lat, (50, 95, 99)).tolist() and got[3] == float(np.sum(lat))


def _interval(rng: np.random.Generator) -> tuple:
    """An interval's batch records and per-request results as the serving loop leaves them: batches of 1..batch
    requests back to back, with shed requests (never started) between some of them."""
    batch, i0 = int(rng.integers(1, 9)), int(rng.integers(0, 50))
    nb = int(rng.integers(1, 2000)) if rng.random() < 0.1 else int(rng.integers(1, 40))
    sizes = np.where(rng.random(nb) < rng.uniform(0, 1), batch, rng.integers(1, batch + 1, nb))
    shed_before = np.where(rng.random(nb) < 0.2, rng.integers(1, 30, nb), 0)
    n = i0 + int(sizes.sum() + shed_before.sum()) + int(rng.integers(0, 5))
    arr = np.sort(rng.uniform(0, 100, n))
    start, done, dropped = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=bool)
    b_start, b_end = np.sort(rng.uniform(0, 100, nb)), np.empty(nb)
    b_end[:] = b_start + np.round(rng.lognormal(-4, 1, nb), 3)  # (ties in latency)
    i = i0
    for k in range(nb):
        dropped[i : i + shed_before[k]] = True
        i += shed_before[k]
        start[i : i + sizes[k]], done[i : i + sizes[k]] = b_start[k], b_end[k]
        i += sizes[k]
    return b_start, b_end, sizes.astype(np.int64), nb, batch, arr, start, done, dropped, i0, i


@pytest.mark.parametrize("seed", range(4))
def test_interval_figures_are_the_plain_figures_of_the_samples(seed):
    """The figures as the measurement computed them (``oltunes.percentile``) from the samples the plain loop
    gathered, with shed requests counted at the threshold in the p99; large samples included (numpy's own path)."""
    rng = np.random.default_rng([seed, 6])
    for _ in range(200):
        b_start, b_end, sizes, nb, batch, arr, start, done, dropped, i0, i1 = _interval(rng)
        shed_ms, n_shed = float(rng.uniform(10, 2000)), int(rng.choice([0, int(dropped.sum()), 3000]))
        figures = np.full(6, np.nan)
        interval_figures(b_start, b_end, sizes, nb, batch, arr, start, done, dropped, i0, i1, shed_ms, n_shed, figures)
        full = sizes == batch
        lat_ms = ((b_end - b_start) * 1000.0)[full if full.sum() >= 3 else slice(None)].tolist()
        served = np.flatnonzero(~dropped[i0:i1]) + i0
        req_ms = ((done[served] - arr[served]) * 1000.0).tolist()
        wait_ms = ((start[served] - arr[served]) * 1000.0).tolist()
        want = [*percentiles(lat_ms, (50, 95, 99)), total(lat_ms), percentiles(req_ms + [shed_ms] * n_shed, (99,))[0],
                mean(wait_ms)]
        assert figures.tolist() == want
