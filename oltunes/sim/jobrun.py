"""One job's run in the simulator: its state (``JobRun``) and how it advances over one control interval.

* :func:`serve` — a streaming instance processes its own arrival array in one tight loop over *batches*: the
  earliest-free executor takes every request that has arrived (up to the batch size) as one batch; requests
  waiting longer than ``drop_after x SLO`` are shed; per-request results are filled in vectorised afterwards.
* :func:`advance_batch` — a batch job runs flat out; its batches' SLO misses are drawn from the lognormal.
* :func:`shed_unplaced` — a streaming job without a placement sheds what waited too long.

``factor`` (drift x interference x concurrency x time-slicing) and ``sigma`` come from the engine per interval.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from heapq import heapreplace

import numpy as np

from oltunes.sim.workload import SimJob
from oltunes.types import Candidate, Decision, Placement

_NONE = np.empty(0)  # no requests served this interval (shared: never written to)
_NONE.flags.writeable = False


@dataclass
class JobRun:
    """Runtime state and outputs of one job."""

    job: SimJob
    seed: int
    rng: np.random.Generator = field(init=False)
    streaming: bool = field(init=False)  # serves requests (else a batch job: items to work through)
    decision: Decision | None = None
    placement: Placement | None = None
    vi: int = -1
    accel: str = ""
    batch: int = 1
    conc: int = 1
    lat: list[float] = field(default_factory=list)  # isolated p50 seconds per actual batch size 0..batch
    power: float = 0.0  # busy W at the configured batch
    accuracy: float = 0.0
    sigma: float = 0.05
    kappa: float = 1.0
    # streaming
    arr: list[float] = field(default_factory=list)
    i: int = 0
    free: list[float] = field(default_factory=list)  # when each executor is free next: a heap (earliest first)
    done: np.ndarray | None = None
    start: np.ndarray | None = None
    acc_per_req: np.ndarray | None = None
    dropped: np.ndarray | None = None
    # batch
    remaining: int = 0
    started_s: float | None = None
    finished_s: float | None = None
    ready_s: float = 0.0
    # re-decision timing: measured = the policy has had a measurement of it; first_seen = it was re-decided since
    measured: bool = False
    first_seen: bool = False
    # the candidate its last measurement reported (the decided one with the co-runners seen), and the decided one
    measured_as: Candidate | None = None
    measured_for: Candidate | None = None
    items_done: int = 0
    batches_done: float = 0.0
    batches_violated: int = 0
    # per-interval
    busy_iso: float = 0.0
    energy_j: float = 0.0
    interval_items: int = 0
    interval_lat_ms: list[float] = field(default_factory=list)
    interval_req_ms: np.ndarray = field(default_factory=lambda: _NONE)  # end-to-end latency of requests served
    interval_wait_ms: np.ndarray = field(default_factory=lambda: _NONE)  # wait before the batch started
    interval_dropped: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.streaming = self.job.arrivals is not None
        if self.job.arrivals is not None:
            n = len(self.job.arrivals)
            self.arr = self.job.arrivals.tolist()
            self.done = np.full(n, np.nan)
            self.start = np.full(n, np.nan)
            self.acc_per_req = np.zeros(n)
            self.dropped = np.zeros(n, dtype=bool)
        else:
            self.remaining = self.job.spec.items

    def begin_interval(self) -> None:
        """Clear the per-interval outputs before the job is served or advanced over the next interval."""
        self.busy_iso = 0.0
        self.interval_items = 0
        self.interval_lat_ms = []
        self.interval_req_ms = self.interval_wait_ms = _NONE
        self.interval_dropped = 0


def serve(r: JobRun, t1: float, factor: float, sigma: float, drop_after: float) -> None:
    """Process one streaming instance's queue until no batch can start before ``t1``; sets this interval's
    per-request figures (``interval_req_ms``, ``interval_wait_ms``: arrays) and adds to its batch latencies."""
    arr, n, i = r.arr, len(r.arr), r.i
    if i >= n:
        return
    lat, free, B = r.lat, r.free, r.batch
    drop_s = drop_after * r.job.spec.slo_ms / 1000.0
    noise = r.rng.lognormal(0.0, sigma, 256).tolist()
    q = 0
    b_i, b_m, b_t, b_d = [], [], [], []
    add_i, add_m, add_t, add_d = b_i.append, b_m.append, b_t.append, b_d.append  # the loop runs per batch
    drops = []
    busy = 0.0
    while i < n:
        e = free[0]
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
        end = t + base * factor * noise[q]
        q += 1
        heapreplace(free, end)  # the executor free at e is busy until the batch ends
        add_i(i)
        add_m(m)
        add_t(t)
        add_d(end)
        busy += base
        i = m
    r.i = i
    for a_, b_ in drops:
        r.dropped[a_:b_] = True
        r.interval_dropped += b_ - a_
    if b_i:
        _record_batches(r, b_i, b_m, b_t, b_d)
    r.busy_iso += busy


def _record_batches(r: JobRun, b_i: list[int], b_m: list[int], b_t: list[float], b_d: list[float]) -> None:
    """Per-request results of the batches ``[b_i[k], b_m[k])`` that started at ``b_t[k]`` and ended at ``b_d[k]``
    (few numpy calls: a served interval is a few dozen requests, so each call's overhead is what costs)."""
    counts = np.subtract(b_m, b_i)
    times = np.array((b_t, b_d))  # start and end of every batch
    per_req = times.repeat(counts, axis=1)  # ... of every served request
    total = per_req.shape[1]
    lo, hi = b_i[0], b_m[-1]
    if total == hi - lo:  # the batches tile [lo, hi): a slice (no request shed between them)
        idx = slice(lo, hi)
    else:  # request indices of every batch (shed ranges sit between batches)
        offs = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        idx = np.repeat(b_i, counts) + offs
    r.start[idx], r.done[idx] = per_req
    r.acc_per_req[idx] = r.accuracy
    r.interval_wait_ms, r.interval_req_ms = (per_req - r.job.arrivals[idx]) * 1000.0
    r.interval_items += total
    lat_ms = (times[1] - times[0]) * 1000.0
    full = counts == r.batch
    # "p99 latency of one batch" means a batch of the configured size: report full batches when there
    # are enough of them (partial batches run faster and would flatter a large batch size)
    r.interval_lat_ms.extend((lat_ms[full] if np.count_nonzero(full) >= 3 else lat_ms).tolist())


def shed_unplaced(r: JobRun, t1: float, drop_after: float) -> None:
    """A job without a placement: its requests older than the drop window are shed."""
    lim = t1 - drop_after * r.job.spec.slo_ms / 1000.0
    j = bisect_left(r.arr, lim, r.i, len(r.arr))
    if j > r.i:
        r.dropped[r.i : j] = True
        r.i = j

def advance_batch(r: JobRun, t0: float, t1: float, factor: float, sigma: float) -> None:
    """Run a batch job flat out from ``t0`` (or when it is ready) to ``t1``; its SLO misses are drawn per batch."""
    start = max(t0, r.ready_s)
    if start >= t1 or r.remaining <= 0:
        return
    b = r.batch
    s_mean = r.lat[b] * factor * math.exp(sigma**2 / 2)
    rate = r.conc * b / s_mean
    items = min(r.remaining, int(rate * (t1 - start)))
    if items >= r.remaining:
        items = r.remaining
        r.finished_s = start + items / rate
    r.remaining -= items
    r.items_done += items
    nb = items / b
    r.batches_done += nb
    slo_s = r.job.spec.slo_ms / 1000.0
    med = r.lat[b] * factor
    p_viol = 0.5 * math.erfc(math.log(slo_s / med) / (sigma * math.sqrt(2))) if med > 0 else 0.0
    r.batches_violated += int(r.rng.binomial(max(0, int(round(nb))), min(1.0, max(0.0, p_viol))))
    r.busy_iso += nb * r.lat[b]
    r.interval_items += items
    k = min(64, max(1, int(nb)))
    r.interval_lat_ms.extend((med * 1000.0 * r.rng.lognormal(0.0, sigma, k)).tolist())
