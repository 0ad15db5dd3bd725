"""Compiled kernels of the simulator's serving (``oltunes.sim.jobrun.serve``) and of what a measurement reports of an
interval (``interval_figures``).

Why compiled: a streaming instance's interval is a few dozen requests in a handful of batches, and at cluster scale
(``benchmarks.sim_speed``: 22,500 job-intervals per million requests) the Python loop over batches and the numpy calls
that filled in the per-request results cost more than anything they computed.

What they must equal: the plain Python loop and the figures ``oltunes.percentile`` computed from the samples it
gathered, bit for bit (the loop is kept as the reference in ``tests/sim/test_sim_jobrun.py``; the pieces are tested in
``tests/sim/test_sim_serve_kernels.py``). Element-wise ``+ - * /``
and comparisons are the same IEEE operations (no ``fastmath``); the executors' heap is CPython's ``heapq`` algorithm
(so the heap's order is the same too); bisection is ``bisect``'s; sums are numpy's pairwise summation
(``oltunes.kernel_math.pairwise_sum``); percentiles are numpy's "linear" method on the sorted sample.

Random draws stay with the caller: the serving loop takes one lognormal noise factor per batch from chunks of 256
that ``serve`` draws exactly when the loop needs them (so the job's generator moves as it always did); the kernel
returns when its chunk runs out and is called again, to resume, with the next chunk appended. The caller draws the
chunk's standard normals (``Generator.standard_normal``: the same draws from the same generator states as
``Generator.lognormal``) and the kernel takes the exponential only of those a batch uses (``_noise``: numpy's
``exp(loc + scale * normal)``, the C library's ``exp`` in both): a chunk's 256 exponentials were a tenth of the
engine's time, and an interval uses a handful.

Compiled lazily and cached on disk (``oltunes.jit.compiled``; a kernel calls only kernels of its own module and of
``oltunes.kernel_math``).
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.jit import compiled
from oltunes.kernel_math import pairwise_sum

__all__ = ["interval_figures", "serve_batches", "serve_interval"]


@compiled
def _heapreplace(heap: np.ndarray, item: float) -> None:
    """``heapq.heapreplace(heap, item)``: the root replaced, sifted to a leaf along the smaller children, then up."""
    n = len(heap)
    pos = 0
    child = 1
    while child < n:
        right = child + 1
        if right < n and not heap[child] < heap[right]:
            child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    while pos > 0:
        parent = (pos - 1) >> 1
        if item < heap[parent]:
            heap[pos] = heap[parent]
            pos = parent
            continue
        break
    heap[pos] = item


@compiled
def _bisect_left(a: np.ndarray, x: float, lo: int, hi: int) -> int:
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@compiled
def _bisect_right(a: np.ndarray, x: float, lo: int, hi: int) -> int:
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@compiled
def _noise(z: float, sigma: float) -> float:
    """The lognormal draw ``Generator.lognormal(0.0, sigma)`` makes from the standard normal draw ``z``."""
    return math.exp(0.0 + sigma * z)


@compiled
def serve_batches(arr: np.ndarray, i: int, t1: float, free: np.ndarray, lat: np.ndarray, batch: int, drop_s: float,
                  factor: float, sigma: float, z: np.ndarray, q: int, b_start: np.ndarray, b_end: np.ndarray,
                  b_size: np.ndarray, start: np.ndarray, done: np.ndarray, acc: np.ndarray, accuracy: float,
                  dropped: np.ndarray, busy: float, shed: int) -> tuple[int, int, float, int, bool]:
    """Serve requests ``arr[i:]`` until no batch can start before ``t1``: the earliest-free executor (``free``, a heap,
    updated in place) takes every request that has arrived, up to ``batch``, as one batch lasting
    ``lat[size] * factor * noise`` (the q-th batch's noise: the lognormal of standard normal draw ``z[q]`` with
    ``sigma``); requests that waited ``drop_s`` or more by then are shed (``dropped``).
    Each request's batch start and end and ``accuracy`` go to ``start``, ``done``, ``acc``; batch ``q`` is recorded
    as ``b_start[q]``, ``b_end[q]``, ``b_size[q]``.

    Returns (next request, batches so far, ``busy`` plus the batches' isolated seconds, ``shed`` plus the requests
    shed, whether it is done): not done when a batch needs ``z[q]`` past the end of ``z`` (the caller appends
    a chunk and calls again from the returned state; ``b_*`` must be as long as ``z``)."""
    n = len(arr)
    while i < n:
        e = free[0]
        a = arr[i]
        t = e if e > a else a
        if t >= t1:
            break
        lim = t - drop_s
        if a < lim:
            j = _bisect_left(arr, lim, i, n)
            dropped[i:j] = True
            shed += j - i
            i = j
            continue
        m = _bisect_right(arr, t, i, i + batch if i + batch < n else n)
        if q == len(z):
            return i, q, busy, shed, False
        base = lat[m - i]
        end = t + base * factor * _noise(z[q], sigma)
        _heapreplace(free, end)  # the executor free at e is busy until the batch ends
        b_start[q], b_end[q], b_size[q] = t, end, m - i
        q += 1
        for k in range(i, m):
            start[k], done[k], acc[k] = t, end, accuracy
        busy += base
        i = m
    return i, q, busy, shed, True


@compiled
def _sort(a: np.ndarray) -> None:
    """``a.sort()``: by insertion up to 64 values (numba's sort costs microseconds even for a few: a measurement
    sorts two samples of a few dozen), else numba's. The sorted values are the same whichever sort (no NaN)."""
    n = len(a)
    if n > 64:
        a.sort()
        return
    for i in range(1, n):
        x = a[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@compiled
def _quantile(s: np.ndarray, q: float) -> float:
    """``np.quantile`` (method "linear") of the sorted, finite, non-empty ``s`` at ``q``: numpy's virtual index and
    its ``_lerp`` (from the upper value when the fraction is at least one half)."""
    n = len(s)
    virtual = (n - 1) * q
    if virtual >= n - 1:
        return s[n - 1]
    lo = int(np.floor(virtual))
    gamma = virtual - lo
    a, b = s[lo], s[lo + 1]
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


@compiled
def _batch_figures(lat_ms: np.ndarray, out: np.ndarray) -> None:
    """``out[:4]``: the p50, p95, p99 and sum of an interval's batch latencies (non-empty), as
    ``oltunes.percentile`` computes them."""
    s = lat_ms.copy()
    _sort(s)
    out[0], out[1], out[2] = _quantile(s, 0.5), _quantile(s, 0.95), _quantile(s, 0.99)
    out[3] = 0.0 + pairwise_sum(lat_ms, 0, len(lat_ms))  # numpy's add.reduce starts from 0.0


@compiled
def interval_figures(b_start: np.ndarray, b_end: np.ndarray, b_size: np.ndarray, nb: int, batch: int,
                     arr: np.ndarray, start: np.ndarray, done: np.ndarray, dropped: np.ndarray, i0: int, i1: int,
                     shed_ms: float, n_shed: int, figures: np.ndarray) -> None:
    """What a measurement says of an interval's serving of requests ``i0:i1`` in ``nb`` (> 0) batches, as
    ``oltunes.percentile`` computes it from the samples the plain loop gathered: ``figures[:4]`` the p50, p95, p99
    and sum of the batches' latencies (ms; of the full ones, ``batch`` requests, when there are at least 3 of them:
    partial batches run faster and would flatter a large batch size); ``figures[4]`` the p99 of the served requests'
    end-to-end latencies (ms) with each of ``n_shed`` shed requests counted at ``shed_ms`` (a p99 that hid them
    would flatter overload); ``figures[5]`` the served requests' mean wait before their batch (ms), summed in
    request order."""
    full = 0
    for k in range(nb):
        full += b_size[k] == batch
    lat_ms = np.empty(full if full >= 3 else nb)
    o = 0
    for k in range(nb):
        if full < 3 or b_size[k] == batch:
            lat_ms[o] = (b_end[k] - b_start[k]) * 1000.0
            o += 1
    _batch_figures(lat_ms, figures)
    served = 0
    for k in range(nb):
        served += b_size[k]
    wait_ms = np.empty(served)
    every = np.empty(served + n_shed)  # the served requests' latencies and the shed ones
    o = 0
    for k in range(i0, i1):
        if not dropped[k]:
            every[o] = (done[k] - arr[k]) * 1000.0
            wait_ms[o] = (start[k] - arr[k]) * 1000.0
            o += 1
    every[served:] = shed_ms
    _sort(every)
    figures[4] = _quantile(every, 0.99)
    figures[5] = (0.0 + pairwise_sum(wait_ms, 0, served)) / served


@compiled
def serve_interval(arr: np.ndarray, i: int, t1: float, free: np.ndarray, lat: np.ndarray, batch: int, drop_s: float,
                   factor: float, sigma: float, z: np.ndarray, q: int, b_start: np.ndarray, b_end: np.ndarray,
                   b_size: np.ndarray, start: np.ndarray, done: np.ndarray, acc: np.ndarray, accuracy: float,
                   dropped: np.ndarray, busy: float, shed: int, i0: int, shed_ms: float, n_shed: int,
                   figures: np.ndarray) -> tuple[int, int, float, int, bool]:
    """`serve_batches`, and once it is done having served any batch, `interval_figures` of the interval's requests
    ``i0:`` (``n_shed``: those shed before this call sequence; ``shed`` adds this one's): one call where the
    interval's draws suffice (nearly always), not two (each call of a kernel costs more than its work here)."""
    i, q, busy, shed, finished = serve_batches(arr, i, t1, free, lat, batch, drop_s, factor, sigma, z, q, b_start,
                                               b_end, b_size, start, done, acc, accuracy, dropped, busy, shed)
    if finished and q:
        interval_figures(b_start, b_end, b_size, q, batch, arr, start, done, dropped, i0, i, shed_ms, n_shed + shed,
                         figures)
    return i, q, busy, shed, finished
