"""`serve`, a streaming instance's queue over one interval: every request is served once or shed, no batch is
larger than the batch size, no more batches run at once than executors, a served request never waited past the drop
window, and the figures a measurement reports are those of the requests served and shed."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.percentile import percentiles
from oltunes.sim.jobrun import JobRun, serve
from oltunes.sim.workload import SimJob
from oltunes.types import JobSpec


def _run(rng: np.random.Generator, seed: int) -> JobRun:
    # clumpy arrivals with exact ties (a trace's simultaneous requests), rounded to the millisecond
    n = int(rng.integers(50, 3000))
    gaps = rng.exponential(1.0 / rng.uniform(5, 400), n) * (rng.random(n) < rng.uniform(0.3, 1.0))
    arrivals = np.round(np.cumsum(gaps), 3)
    spec = JobSpec(job_id="s0-x-0", kind="streaming", family="x", slo_ms=float(rng.uniform(5, 300)))
    r = JobRun(SimJob(spec, 0.0, arrivals), seed=seed)
    # a quarter of the runs: short batches of one, hundreds in an interval (more than a chunk of noise draws)
    r.batch = int(rng.integers(1, 17)) if seed % 4 else 1
    r.conc = int(rng.integers(1, 5))
    r.lat = np.cumsum(rng.uniform(0.0005, 0.02, r.batch + 1)) * (1.0 if seed % 4 else 0.1)
    r.accuracy = float(rng.uniform(0.5, 0.9))
    r.free = np.full(r.conc, float(rng.uniform(0, 0.5)))
    return r




def _max_overlap(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals [start, end) running at one time."""
    events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("seed", range(24))
def test_serve_serves_or_sheds_every_request_within_the_executors_and_the_batch_size(seed):
    rng = np.random.default_rng(seed)
    r = _run(rng, seed)
    factor, sigma = float(rng.uniform(0.5, 3.0)), float(rng.uniform(0.01, 0.4))
    drop_after = float(rng.choice([1.0, 2.0, 5.0]))  # low: shedding between batches
    drop_s = drop_after * r.job.spec.slo_ms / 1000.0
    served = shed = 0
    for t1 in np.arange(1, 1 + 2 * float(r.job.arrivals[-1]), float(rng.uniform(0.3, 5.0))):
        r.begin_interval()
        i0 = r.i
        serve(r, float(t1), factor, sigma, drop_after)
        served += r.interval_items
        shed += r.interval_dropped
        took = slice(i0, r.i)
        ok = ~r.dropped[took]
        assert r.interval_items == int(ok.sum()) and r.interval_dropped == int((~ok).sum())
        if r.interval_items:
            arr, start, done = r.arr[took][ok], r.start[took][ok], r.done[took][ok]
            assert (start >= arr).all() and (done > start).all() and (start - arr <= drop_s + 1e-12).all()
            assert (start < t1).all()
            p50, p95, p99, lat_sum, req_p99, wait = r.figures.tolist()
            assert 0 < p50 <= p95 <= p99 and lat_sum >= p99
            every = ((done - arr) * 1000.0).tolist() + [drop_after * r.job.spec.slo_ms] * r.interval_dropped
            assert req_p99 == percentiles(every, (99,))[0]
            assert wait == pytest.approx(float(np.mean((start - arr) * 1000.0)))
    assert served + shed == r.i  # every request taken so far was served or shed
    assert np.isnan(r.done[r.i:]).all()
    served_all = ~r.dropped[: r.i]
    starts, ends = r.start[: r.i][served_all], r.done[: r.i][served_all]
    batches = sorted(set(zip(starts.tolist(), ends.tolist())))
    sizes = [int(((starts == s) & (ends == e)).sum()) for s, e in batches]
    assert max(sizes, default=0) <= r.batch
    assert _max_overlap(np.array([s for s, _ in batches]), np.array([e for _, e in batches])) <= r.conc


def test_a_slower_device_sheds_more():
    shed = []
    for factor in (0.5, 8.0):
        r = _run(np.random.default_rng(3), 3)
        for t1 in np.arange(1, 1 + 2 * float(r.job.arrivals[-1]), 1.0):
            r.begin_interval()
            serve(r, float(t1), factor, 0.05, 2.0)
        shed.append(int(r.dropped.sum()))
    assert shed[0] < shed[1]
