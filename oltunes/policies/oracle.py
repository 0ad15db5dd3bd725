"""`oracle`: knows the simulator's true performance model — the physical limit.

It is the only policy with full knowledge: it reads ``PolicyContext.truth`` (the public profile table perturbed per
(variant, accelerator) and slowed by the scenario's drift events as they happen), the real interference, the loads,
every accelerator, and the next re-tune interval's request arrivals. Every other policy reads at most the public,
unperturbed table.

For each pool it considers an empty device and the fullest device that still has a slot (packing), evaluates every
(variant >= floor, batch, concurrency) with the true model given the device's real co-runners and their loads, and
takes the lowest energy per item (a fresh device is charged its idle power) whose estimated p99 request latency
meets the SLO with margin — and that does not push a co-runner past its own SLO. Re-decided every re-tune interval
with the latest loads. It is a greedy per-job optimum, not a global one (the report says so).
"""

from __future__ import annotations

import numpy as np

from oltunes.policies.base import Policy, PolicyContext
from oltunes.occupancy import Occupancy
from oltunes.profiles import Profile
from oltunes.types import ClusterState, CoRunner, Decision, JobSpec, Placement


class Oracle(Policy, name="oracle"):
    needs_profile = True
    adaptive = True

    def __init__(self, ctx: PolicyContext, margin: float = 0.8, max_load: float = 0.85) -> None:
        super().__init__(ctx)
        self.margin = margin
        self.max_load = max_load

    @property
    def model(self) -> Profile:
        """The performance model it decides with: the truth."""
        return self.ctx.true_profile

    def _harms(self, cluster: Occupancy, pool: str, dev: int, job: JobSpec, me: CoRunner) -> bool:
        """Would adding this job push a co-runner's estimated p99 past its SLO?"""
        m = self.model
        acc = cluster.pool(pool).accelerator.name
        for pl in cluster.members(pool, dev):
            c = pl.candidate
            other = JobSpec.model_construct(
                job_id=pl.job_id,
                kind="streaming" if pl.arrival_rate_rps > 0 else "batch",
                family=c.variant.family,
                slo_ms=pl.slo_ms,
                arrival_rate_rps=pl.arrival_rate_rps,
            )
            co = (*cluster.co_runners(pool, dev, exclude=pl.job_id), me)
            g = m.grid(other, acc, [c.variant], (c.batch_size,), (c.concurrency,), co)
            if float(g.p99_request_ms[0, 0, 0]) > self.margin * pl.slo_ms:
                return True
        return False

    def _upcoming(self, job: JobSpec, now: float) -> np.ndarray | None:
        """Non-empty 20 ms bins of the next horizon's requests as (2, n) [end time, count] (clairvoyant), or None."""
        arr = self.ctx.arrivals.get(job.job_id) if job.kind == "streaming" else None
        if arr is None:
            return None
        lo, hi = np.searchsorted(arr, [now, now + self.ctx.horizon_s])
        if hi <= lo:
            return None
        bins = np.arange(now, now + self.ctx.horizon_s + _BIN_S, _BIN_S)
        counts = np.histogram(arr[lo:hi], bins)[0].astype(float)
        nz = np.flatnonzero(counts)
        return np.stack([(nz + 1) * _BIN_S, counts[nz]])

    def decide(self, job: JobSpec, state: ClusterState, current: Placement | None = None) -> Decision | None:
        variants = self.eligible(job)
        if not variants:
            return None
        m = self.model
        cluster = self.view(state)
        best = fallback = None
        counts = self._upcoming(job, self.ctx.clock())  # (2, n) events or None
        for p in cluster.pools:
            acc = p.accelerator.name
            options = {cluster.empty_device(p.name), cluster.most_loaded_device(p.name)} - {None}
            for dev in sorted(options):
                fresh = cluster.occupancy(p.name)[dev] == 0
                g = m.grid(job, acc, variants, self.ctx.batch_sizes, self.ctx.concurrencies,
                           cluster.co_runners(p.name, dev, exclude=job.job_id))
                est = g.p99_request_ms
                if counts is not None:  # burst-aware estimate when the arrivals are known
                    est = _burst_p99(counts, g.capacity_rps, g.p99_batch_ms, g.mean_batch_ms, g.rho)
                ok = est <= self.margin * job.slo_ms
                if job.kind == "streaming":
                    ok &= g.rho <= self.max_load
                    idle = p.accelerator.idle_w / max(job.arrival_rate_rps, 1e-3) if fresh else 0.0
                    cost = g.energy_j_per_item + idle
                else:
                    cost = g.energy_j_per_item + (p.accelerator.idle_w / g.capacity_rps if fresh else 0.0)
                ok = ok.copy()
                while True:
                    i = g.argbest(ok, cost)
                    if i is None:
                        break
                    load = float(g.rho[i]) if job.kind == "streaming" else 1.0
                    v = g.variants[i[0]]
                    me = CoRunner(job_id=job.job_id, family=v.family, variant=v.name, size=v.size,
                                  precision=v.precision, batch_size=int(g.batches[i[1]]), load=load)
                    if fresh or not self._harms(cluster, p.name, dev, job, me):
                        break
                    ok[i] = False
                if i is not None and (best is None or float(cost[i]) < best[0]):
                    best = (float(cost[i]), p.name, dev, g, i)
                if best is None:
                    j = tuple(int(x) for x in np.unravel_index(int(np.argmin(est)), est.shape))
                    if fallback is None or float(est[j]) < fallback[0]:
                        fallback = (float(est[j]), p.name, dev, g, j)
        pick = best or fallback
        if pick is None:
            return None
        _, pool, dev, g, (v, b, c) = pick
        return self.decision(job, cluster, pool, dev, g.variants[v], int(g.batches[b]), int(g.concurrencies[c]),
                             predicted=g.prediction((v, b, c)), note="" if best else "no feasible configuration")


_BIN_S = 0.02


def _burst_p99(events: np.ndarray, capacity_rps, p99_batch_ms, mean_batch_ms=0.0, rho=0.0) -> np.ndarray:
    """p99 request latency (ms) of a fluid queue fed the real upcoming arrivals, for arrays of configurations.

    ``events`` is (2, n): bin end times and request counts of the non-empty bins. Lindley's recursion in closed
    form, Q_j = X_j - min(0, min_{i<=j} X_i^-) with X = arrivals - capacity x time (its minima sit just before an
    arrival), so the horizon is one vectorised pass per configuration: the trace's clumps of simultaneous requests
    show up here, where a Poisson estimate would miss them. On top: the request's own batch (p99), and the batch
    already running when it arrives (mean batch time, with probability = the load)."""
    t, c = events
    cap = np.atleast_1d(np.asarray(capacity_rps, dtype=float)).ravel()[:, None]
    cum = np.cumsum(c)
    x = cum[None, :] - cap * t[None, :]
    before = (cum - c)[None, :] - cap * t[None, :]
    q = x - np.minimum(0.0, np.minimum.accumulate(before, axis=1))
    wait_ms = q / cap * 1000.0
    order = np.argsort(wait_ms, axis=1)
    w = np.cumsum(c[order], axis=1)
    k = np.minimum((w < 0.99 * w[:, -1:]).sum(axis=1), len(c) - 1)
    p99_wait = np.take_along_axis(wait_ms, np.take_along_axis(order, k[:, None], axis=1), axis=1)[:, 0]
    extra = np.asarray(p99_batch_ms, dtype=float) + np.asarray(mean_batch_ms, dtype=float) * np.minimum(1.0, rho)
    return p99_wait.reshape(np.shape(capacity_rps)) + extra
