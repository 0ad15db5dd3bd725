"""One job's run in the simulator: its state (``JobRun``), how it advances over one control interval, and what a
whole (scenario, policy) run leaves for the metrics and the report (``RunResult``).

* :func:`serve` — a streaming instance processes its own arrival array in one tight loop over *batches*: the
  earliest-free executor takes every request that has arrived (up to the batch size) as one batch; requests
  waiting longer than ``drop_after x SLO`` are shed.
* :func:`advance_batch` — a batch job runs flat out; its batches' SLO misses are drawn from the lognormal.
* :func:`shed_unplaced` — a streaming job without a placement sheds what waited too long.

``factor`` (drift x interference x concurrency x time-slicing) and ``sigma`` come from the engine per interval.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

import numpy as np

from oltunes.percentile import mean, percentiles, total
from oltunes.sim.workload import SimJob
from oltunes.types import Candidate, Decision, Placement

_NONE = np.empty(0)  # (shared: never written to)
_NONE.flags.writeable = False
_CHUNK = 256  # noise draws per call of a job's generator while serving


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
    lat: np.ndarray = field(default_factory=lambda: _NONE)  # isolated p50 seconds per actual batch size 0..batch
    power: float = 0.0  # busy W at the configured batch
    accuracy: float = 0.0
    sigma: float = 0.05
    kappa: float = 1.0
    # streaming
    arr: np.ndarray = field(default_factory=lambda: _NONE)  # arrival times (s), sorted, contiguous float64
    i: int = 0
    free: np.ndarray = field(default_factory=lambda: _NONE)  # when each executor is free next: a heap (earliest first)
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
    interval_lat_ms: list[float] = field(default_factory=list)  # batch jobs: the batch latencies to report
    interval_dropped: int = 0
    interval_batches: int = 0  # streaming: batches served
    # streaming: what a measurement reports of the last interval that served requests (set as it is served):
    # batch latency p50, p95, p99 and sum, request latency p99 (shed requests at the threshold), mean wait (ms)
    figures: np.ndarray = field(default_factory=lambda: _NONE)
    busy_j: float = 0.0  # energy drawn while busy last interval (what a shadow's measurement reports per item)
    # exploration (:mod:`oltunes.sim.exploration`): what the run is for, and the job it tries a candidate for
    purpose: str = "serve"  # serve | shadow | probe
    of: JobRun | None = None
    until_s: float = math.inf  # a trial ends by then
    mirrored: int = 0  # a shadow: the job's next request not yet considered for mirroring
    queued: int = 0  # a shadow: mirrored requests waiting for a full batch
    shadow: JobRun | None = None  # a stream's running shadow
    probes_open: int = 0  # a batch job's probe shards still running
    shadow_lat_ms: list[float] = field(default_factory=list)  # a shadow: its batches' latencies so far
    shadow_busy: list[float] = field(default_factory=lambda: [0.0, 0.0])  # a shadow: drawn above idle (J), items

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.streaming = self.job.arrivals is not None
        if self.job.arrivals is not None:
            n = len(self.job.arrivals)
            self.arr = np.ascontiguousarray(self.job.arrivals, dtype=float)
            self.figures = np.full(6, np.nan)
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
        self.interval_dropped = self.interval_batches = 0


@dataclass
class RunResult:
    """Everything metrics and the report need from one (scenario, policy) run."""

    policy: str
    duration_s: float
    interval_s: float
    runs: list[JobRun]
    best_accuracy: dict[str, float]
    # per control interval
    t: list[float] = field(default_factory=list)
    util: list[float] = field(default_factory=list)
    energy_j: list[float] = field(default_factory=list)
    active_devices: list[int] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)
    capacity_violations: int = 0
    floor_violations: int = 0
    invalid_decisions: int = 0
    decisions: int = 0
    wall_s: float = 0.0
    # exploration (``Decision.trials``, :mod:`oltunes.sim.exploration`): energy of the shadows' and probe shards'
    # runs, and how many of each were started
    exploration_energy_j: float = 0.0
    shadows: int = 0
    probes: int = 0


def serve(r: JobRun, t1: float, factor: float, sigma: float, drop_after: float) -> None:
    """Process one streaming instance's queue until no batch can start before ``t1``: the earliest-free executor
    takes every request that has arrived (up to the batch size) as one batch lasting ``lat[size] x factor x
    lognormal noise``; requests that waited ``drop_after x SLO`` by then are shed. Sets this interval's counts and,
    when it served any batch, its ``figures``."""
    i0, arr = r.i, r.arr
    n = len(arr)
    if i0 >= n:
        return
    shed_ms = drop_after * r.job.spec.slo_ms
    drop_s = shed_ms / 1000.0
    free = r.free.tolist()  # when each executor is free next (a heap: ``r.free`` is kept as one)
    z = r.rng.standard_normal(_CHUNK)  # the batches' noise, drawn a chunk at a time
    i, shed, busy = i0, 0, 0.0
    batches: list[tuple[float, float, int]] = []  # (start, end, size)
    while i < n:
        a = arr[i]
        t = max(free[0], a)
        if t >= t1:
            break
        if a < t - drop_s:  # waited too long: shed everything that arrived before the drop window
            j = bisect_left(arr, t - drop_s, i, n)
            r.dropped[i:j] = True
            shed += j - i
            i = j
            continue
        m = bisect_right(arr, t, i, min(i + r.batch, n))  # everything arrived by t, up to the batch size
        if len(batches) == len(z):
            z = np.concatenate((z, r.rng.standard_normal(_CHUNK)))
        base = r.lat[m - i]
        end = t + base * factor * math.exp(sigma * z[len(batches)])
        heapq.heapreplace(free, end)
        batches.append((t, end, m - i))
        busy += base
        i = m
    r.free = np.array(free)
    r.i = i
    r.interval_dropped += shed
    r.interval_batches = len(batches)
    r.busy_iso += float(busy)
    if batches:
        # each served request's batch start and end (the requests taken and not shed, in order)
        starts, ends, sizes = zip(*batches)
        served = i0 + np.flatnonzero(~r.dropped[i0:i])
        r.start[served] = np.repeat(starts, sizes)
        r.done[served] = np.repeat(ends, sizes)
        r.acc_per_req[served] = r.accuracy
        r.interval_items += i - i0 - shed
        r.figures[:] = _figures(r, batches, i0, i, shed_ms)


def _figures(r: JobRun, batches: list[tuple[float, float, int]], i0: int, i1: int, shed_ms: float) -> list[float]:
    """What a measurement says of the interval's serving of requests ``i0:i1``: the p50, p95, p99 and sum of the
    batches' latencies (ms; of the full ones when there are at least 3: partial batches run faster and would flatter
    a large batch size), the p99 of the requests' end-to-end latencies with each shed request counted at
    ``shed_ms`` (a p99 that hid them would flatter overload), and the served requests' mean wait (ms)."""
    full = [(end - start) * 1000.0 for start, end, size in batches if size == r.batch]
    lat_ms = full if len(full) >= 3 else [(end - start) * 1000.0 for start, end, _ in batches]
    served = ~r.dropped[i0:i1]
    arrived = r.arr[i0:i1][served]
    every = ((r.done[i0:i1][served] - arrived) * 1000.0).tolist() + [shed_ms] * r.interval_dropped
    wait_ms = (r.start[i0:i1][served] - arrived) * 1000.0
    return [*percentiles(lat_ms, (50, 95, 99)), total(lat_ms), percentiles(every, (99,))[0], mean(wait_ms)]


def shed_unplaced(r: JobRun, t1: float, drop_after: float) -> None:
    """A job without a placement: its requests older than the drop window are shed."""
    lim = t1 - drop_after * r.job.spec.slo_ms / 1000.0
    j = int(np.searchsorted(r.arr, lim))
    if j > r.i:
        r.dropped[r.i : j] = True
        r.i = j

def advance_batch(r: JobRun, t0: float, t1: float, factor: float, sigma: float) -> None:
    """Run a batch job flat out from ``t0`` (or when it is ready) to ``t1``; its SLO misses are drawn per batch."""
    start = max(t0, r.ready_s)
    if start >= t1 or r.remaining <= 0:
        return
    b = r.batch
    lat_b = float(r.lat[b])
    s_mean = lat_b * factor * math.exp(sigma**2 / 2)
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
    med = lat_b * factor
    p_viol = 0.5 * math.erfc(math.log(slo_s / med) / (sigma * math.sqrt(2))) if med > 0 else 0.0
    r.batches_violated += int(r.rng.binomial(max(0, int(round(nb))), min(1.0, max(0.0, p_viol))))
    r.busy_iso += nb * lat_b
    r.interval_items += items
    k = min(64, max(1, int(nb)))
    r.interval_lat_ms.extend((med * 1000.0 * r.rng.lognormal(0.0, sigma, k)).tolist())
