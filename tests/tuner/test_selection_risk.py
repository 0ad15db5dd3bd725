"""Decisions under an estimate that cannot tell candidates apart: energy only where the rate fills a batch, and
near-equal ties resolved by the error the estimate may make (``objectives.effective_batch_energy``,
``selection.tolerated_slowdown``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.tuner.decide.objectives import effective_batch_energy
from oltunes.tuner.decide.selection import tolerated_slowdown
from oltunes.types import ClusterState, JobSpec, Pool, Variant

# No parameter count: the heuristic prior gives every variant the same figures (as in the simulator's zoo).
UNSIZED = [Variant(family="net", name=f"net-{a}", size=str(a), accuracy=a) for a in (0.90, 0.85, 0.80, 0.70)]
CLUSTER = ClusterState(pools=[Pool(name="t4", accelerator=CATALOG["t4"], count=2)])
BATCHES = (1, 2, 4, 8, 16)


def _grid_estimate(job: JobSpec, lat1_ms: float) -> SimpleNamespace:
    """A one-option, one-variant estimate: batch latency ~ b^0.75, energy per item ~ b^-0.25 (the prior's shape)."""
    b = np.array(BATCHES, dtype=float)[None, None, :, None]
    c = np.array([1.0, 2.0])[None, None, None, :]
    lat = lat1_ms * b**0.75 * (1 + 0.5 * (c - 1))
    return SimpleNamespace(job=job, batch_sizes=BATCHES, concurrencies=(1, 2), lat=lat,
                           energy=np.broadcast_to(b**-0.25, lat.shape).copy(), req_lat=lat,
                           pess_thr=1000.0 * b * c / lat)


def test_streaming_energy_counts_a_batch_only_where_the_rate_fills_it():
    # 10 ms batch-1 latency at 100 req/s: ~2 requests queue per batch at one executor, ~1.75 at two (slower)
    job = JobSpec(family="net", kind="streaming", slo_ms=300, arrival_rate_rps=100.0)
    est = _grid_estimate(job, 10.0)
    e = effective_batch_energy(est)[0, 0]
    np.testing.assert_allclose(e[:, 0], [1.0, 2**-0.25, 2**-0.25, 2**-0.25, 2**-0.25])  # c=1: b_eff = 2
    np.testing.assert_allclose(e[:, 1], [1.0, 1.0, 1.0, 1.0, 1.0])  # c=2: b_eff = 1 + 100 x 15 ms / 2 = 1.75
    # a rate that fills every batch: the configured batch's own energy
    busy = _grid_estimate(job.model_copy(update={"arrival_rate_rps": 1e5}), 10.0)
    np.testing.assert_array_equal(effective_batch_energy(busy), busy.energy)
    # batch jobs run full batches
    batch = _grid_estimate(JobSpec(family="net", slo_ms=300, items=100), 10.0)
    np.testing.assert_array_equal(effective_batch_energy(batch), batch.energy)


def test_tolerated_slowdown_is_the_maximin_of_latency_slack_and_spare_capacity():
    job = JobSpec(family="net", kind="streaming", slo_ms=100, arrival_rate_rps=100.0)
    est = _grid_estimate(job, 10.0)
    k = tolerated_slowdown(est, 1.2)
    np.testing.assert_allclose(k, np.minimum(100.0 / est.lat, est.pess_thr / 120.0))
    # b1 c1 (100 items/s) cannot carry the rate x headroom; b16 c2 (120 ms) breaks the SLO; the most robust
    # setting lies between the two extremes
    assert k[0, 0, 0, 0] < 1.0 and k[0, 0, 4, 1] < 1.0
    best = np.unravel_index(int(np.argmax(k)), k.shape)
    assert best[2:] not in ((0, 0), (4, 1)) and k[best] > 1.0
    batch = _grid_estimate(JobSpec(family="net", slo_ms=300, items=100), 10.0)
    np.testing.assert_allclose(tolerated_slowdown(batch, 1.2), 300.0 / batch.req_lat)


@pytest.mark.parametrize("rate", [1.0, 200.0])
def test_a_cold_start_takes_the_smallest_good_enough_variant_and_a_batch_its_rate_fills(rate):
    tuner = Tuner(UNSIZED, seed=0, explore_rate=0.0)
    job = JobSpec(family="net", kind="streaming", slo_ms=300, accuracy_floor=0.75, arrival_rate_rps=rate)
    d = tuner.decide(job, CLUSTER)
    assert d.feasible
    # the prior cannot tell the variants apart: the least accurate one above the floor, not the largest
    assert d.candidate.variant.name == "net-0.8"
    if rate == 1.0:  # one request at a time: no batch or concurrency to gain from, only latency to lose
        assert (d.candidate.batch_size, d.candidate.concurrency) == (1, 1)
    else:  # a rate that fills batches: a larger batch, still not the largest setting
        assert 1 < d.candidate.batch_size * d.candidate.concurrency < max(BATCHES) * 4


@pytest.mark.parametrize("seed", range(6))
def test_the_tolerated_slowdown_of_some_cells_and_broadcast_counts_equal_the_whole_grid_ones(seed):
    from oltunes.tuner.decide.constraints import at, count_broadcast, count_false_broadcast

    rng = np.random.default_rng(seed)
    streaming = bool(seed % 2)
    job = JobSpec(family="net", kind="streaming" if streaming else "batch", slo_ms=float(rng.uniform(5, 300)),
                  arrival_rate_rps=float(rng.uniform(1, 500)) if streaming else 0.0, items=100)
    shape = (3, 2, 5, 4)
    est = SimpleNamespace(job=job, shape=shape, req_lat=rng.uniform(1, 400, shape),
                          pess_thr=rng.uniform(1, 900, shape))
    flat = np.sort(rng.choice(np.prod(shape), size=17, replace=False))
    np.testing.assert_array_equal(tolerated_slowdown(est, 1.2, flat), tolerated_slowdown(est, 1.2).ravel()[flat])
    for mshape in [(1, 1, 1, 1), (3, 2, 1, 4), (1, 2, 1, 1), (2, 5, 4), (3, 2, 5, 4), (5, 1)]:
        for mask in (rng.random(mshape) < 0.5, np.ones(mshape, dtype=bool), np.zeros(mshape, dtype=bool)):
            assert count_broadcast(mask, shape) == int(np.broadcast_to(mask, shape).sum())
            assert count_false_broadcast(mask, shape) == int((~np.broadcast_to(mask, shape)).sum())
            for idx in np.ndindex(shape) if mask.ndim == len(shape) else ():  # (at reads a grid-rank mask)
                got = at(mask, idx)
                assert type(got) is bool and got == bool(np.broadcast_to(mask, shape)[idx])


@pytest.mark.parametrize("seed", range(6))
def test_the_masks_conjunction_equals_and_ing_every_mask_over_the_grid(seed):
    from oltunes.tuner.decide.constraints import conjunction

    rng = np.random.default_rng(seed)
    shape = (4, 3, 5, 2)
    shapes = [(1, 3, 1, 1), shape, (1, 1, 1, 1), (4, 3, 1, 2), (4, 3, 1, 1), shape][: int(rng.integers(1, 7))]
    masks = [rng.random(shapes[i]) < 0.8 for i in rng.permutation(len(shapes))]
    want = np.ones(shape, dtype=bool)
    for m in masks:
        want &= m
    got = conjunction(masks, shape)
    assert got.shape == shape and got.flags.writeable and np.array_equal(got, want)
    assert not any(np.shares_memory(got, m) for m in masks)


def test_unravel_is_numpys_unravel_index_as_ints():
    from oltunes.tuner.decide.selection import unravel
    rng = np.random.default_rng(3)
    for _ in range(200):
        shape = tuple(int(n) for n in rng.integers(1, 7, size=4))
        flat = int(rng.integers(0, int(np.prod(shape))))
        got = unravel(flat, shape)
        assert got == tuple(int(i) for i in np.unravel_index(flat, shape)) and all(type(i) is int for i in got)
