"""`serve` (compiled: ``oltunes.sim.serve_kernels``) is the plain per-batch loop, bit for bit: same batches, same
per-request results, same random draws, and the figures a measurement reports are those computed from its samples.

The reference below is the engine's serving loop as first written in Python (a list of executors scanned with
``min``, the per-request results always gathered by fancy indexing, interval figures as lists): the fast path must
agree with it on every float, over many intervals, with shedding, ties, several executors and intervals of more
batches than one chunk of noise draws."""

from __future__ import annotations

import copy
from bisect import bisect_left, bisect_right

import numpy as np
import pytest

from oltunes.percentile import mean, percentiles, total
from oltunes.sim.jobrun import JobRun, serve
from oltunes.sim.workload import SimJob
from oltunes.types import JobSpec


def reference_serve(r: JobRun, t1: float, factor: float, sigma: float, drop_after: float) -> None:
    arr, n, i = r.arr, len(r.arr), r.i
    if i >= n:
        return
    lat, free, B = r.lat, r.free, r.batch
    drop_s = drop_after * r.job.spec.slo_ms / 1000.0
    noise = r.rng.lognormal(0.0, sigma, 256).tolist()
    q = 0
    b_i, b_m, b_t, b_d, drops = [], [], [], [], []
    busy = 0.0
    while i < n:
        e = min(free)
        a = arr[i]
        t = e if e > a else a
        if t >= t1:
            break
        lim = t - drop_s
        if a < lim:
            j = bisect_left(arr, lim, i, n)
            drops.append((i, j))
            i = j
            continue
        m = bisect_right(arr, t, i, i + B if i + B < n else n)
        base = lat[m - i]
        if q == 256:
            noise = r.rng.lognormal(0.0, sigma, 256).tolist()
            q = 0
        s = base * factor * noise[q]
        q += 1
        free[free.index(e)] = t + s
        b_i.append(i)
        b_m.append(m)
        b_t.append(t)
        b_d.append(t + s)
        busy += base
        i = m
    r.i = i
    for a_, b_ in drops:
        r.dropped[a_:b_] = True
        r.interval_dropped += b_ - a_
    if b_i:
        counts = np.subtract(b_m, b_i)
        total = int(counts.sum())
        offs = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        idx = np.repeat(b_i, counts) + offs
        r.done[idx] = np.repeat(b_d, counts)
        r.start[idx] = np.repeat(b_t, counts)
        r.acc_per_req[idx] = r.accuracy
        arr_np = r.job.arrivals[idx]
        r.interval_req_ms.extend(((r.done[idx] - arr_np) * 1000.0).tolist())
        r.interval_wait_ms.extend(((r.start[idx] - arr_np) * 1000.0).tolist())
        r.interval_items += total
        r.batches = [b_t, b_d, counts.tolist()]
        lat_ms = (np.array(b_d) - np.array(b_t)) * 1000.0
        full = counts == B
        r.interval_lat_ms.extend((lat_ms[full] if full.sum() >= 3 else lat_ms).tolist())
    r.busy_iso += busy


def _run(rng: np.random.Generator, seed: int) -> JobRun:
    # clumpy arrivals with exact ties (a trace's simultaneous requests), rounded to the millisecond
    n = int(rng.integers(50, 3000))
    gaps = rng.exponential(1.0 / rng.uniform(5, 400), n) * (rng.random(n) < rng.uniform(0.3, 1.0))
    arrivals = np.round(np.cumsum(gaps), 3)
    spec = JobSpec(job_id="s0-x-0", kind="streaming", family="x", slo_ms=float(rng.uniform(5, 300)))
    r = JobRun(SimJob(spec, 0.0, arrivals), seed=seed)
    # a quarter of the runs: short batches of one, hundreds in an interval (the kernel resumes with more draws)
    r.batch = int(rng.integers(1, 17)) if seed % 4 else 1
    r.conc = int(rng.integers(1, 5))
    r.lat = np.cumsum(rng.uniform(0.0005, 0.02, r.batch + 1)) * (1.0 if seed % 4 else 0.1)
    r.accuracy = float(rng.uniform(0.5, 0.9))
    r.free = np.full(r.conc, float(rng.uniform(0, 0.5)))
    return r


def _as_plain(r: JobRun) -> JobRun:
    """A copy of ``r`` as the plain loop kept it: arrivals, latencies and executors as lists."""
    ref = copy.deepcopy(r)
    ref.arr, ref.lat, ref.free = r.arr.tolist(), r.lat.tolist(), r.free.tolist()
    return ref


def _interval(r: JobRun) -> None:
    r.interval_items, r.interval_dropped, r.busy_iso = 0, 0, 0.0
    r.interval_lat_ms, r.interval_req_ms, r.interval_wait_ms, r.batches = [], [], [], [[], [], []]


@pytest.mark.parametrize("seed", range(40))
def test_serve_equals_the_plain_loop_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    new = _run(rng, seed)
    ref = _as_plain(new)
    factor, sigma = float(rng.uniform(0.5, 3.0)), float(rng.uniform(0.01, 0.4))
    drop_after = float(rng.choice([1.0, 2.0, 5.0]))  # low: shedding between batches
    served = shed = 0
    for t1 in np.arange(1, 1 + 2 * float(new.job.arrivals[-1]), float(rng.uniform(0.3, 5.0))):
        new.begin_interval()
        _interval(ref)
        serve(new, float(t1), factor, sigma, drop_after)
        reference_serve(ref, float(t1), factor, sigma, drop_after)
        assert new.i == ref.i and new.busy_iso == ref.busy_iso and new.interval_items == ref.interval_items
        assert new.interval_dropped == ref.interval_dropped
        assert [b[: new.interval_batches].tolist() for b in new.batch_log] == ref.batches  # start, end, size
        assert sorted(new.free.tolist()) == sorted(ref.free)
        if ref.interval_req_ms:  # the figures a measurement reports, as it computed them from the plain lists
            shed_ms = drop_after * new.job.spec.slo_ms
            assert new.figures.tolist() == [
                *percentiles(ref.interval_lat_ms, (50, 95, 99)), total(ref.interval_lat_ms),
                percentiles(ref.interval_req_ms + [shed_ms] * ref.interval_dropped, (99,))[0],
                mean(ref.interval_wait_ms)]  # fmt: skip
        assert new.rng.bit_generator.state == ref.rng.bit_generator.state
        served += new.interval_items
        shed += new.interval_dropped
    for a in ("done", "start", "acc_per_req", "dropped"):
        assert np.array_equal(getattr(new, a), getattr(ref, a), equal_nan=True), a
    assert served + shed == new.i  # every request taken so far was served or shed


def test_the_cases_above_cover_shedding_between_batches_several_executors_and_long_intervals():
    """The equivalence above is only worth something if its runs shed inside a served span, run several executors
    (the heap) and serve more batches in one interval than one chunk of noise draws (the kernel resumed)."""
    between = multi = long = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        r = _run(rng, seed)
        multi += r.conc > 1
        factor, sigma = float(rng.uniform(0.5, 3.0)), float(rng.uniform(0.01, 0.4))
        drop_after = float(rng.choice([1.0, 2.0, 5.0]))
        for t1 in np.arange(1, 1 + 2 * float(r.job.arrivals[-1]), float(rng.uniform(0.3, 5.0))):
            r.begin_interval()
            i0 = r.i
            serve(r, float(t1), factor, sigma, drop_after)
            first = np.flatnonzero(~np.isnan(r.done[i0 : r.i]))
            if len(first) and r.dropped[i0 + first[0] : i0 + first[-1]].any():
                between += 1
            long += r.batch == 1 and r.interval_items > 256  # more batches than draws in a chunk
    assert between >= 10 and multi >= 10 and long >= 10
