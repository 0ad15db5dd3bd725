"""`static-profile` (INFaaS-like): an offline profile table, the cheapest hardware that meets SLO and accuracy.

The profile is what a profiling run ahead of time measures: isolated (no co-runner), noiseless, one executor. The
policy never learns from what happens at run time and never co-locates: it needs an empty device.
"""

from __future__ import annotations

import numpy as np

from oltunes.policies.base import Policy, PolicyContext
from oltunes.types import ClusterState, Decision, JobSpec, Placement


class StaticProfile(Policy, name="static-profile"):
    """Minimise the accelerator's hourly cost, then energy, subject to profiled p99 <= headroom x SLO."""

    needs_profile = True

    def __init__(self, ctx: PolicyContext, headroom: float = 0.5, max_load: float = 0.8) -> None:
        super().__init__(ctx)
        self.headroom = headroom  # profiled batch p99 must leave room for queueing
        self.max_load = max_load  # never plan above this share of the profiled throughput

    def decide(self, job: JobSpec, state: ClusterState, current: Placement | None = None) -> Decision | None:
        variants = self.eligible(job)
        if not variants:
            return None
        cluster = self.view(state)
        best = None
        grids = []  # (pool, empty device, grid): the fallback below reuses them
        for p in cluster.pools:
            dev = cluster.empty_device(p.name)
            if dev is None:
                continue
            g = self.ctx.profile.grid(job, p.accelerator.name, variants, self.ctx.batch_sizes, (1,))
            grids.append((p.name, dev, g))
            ok = g.p99_batch_ms <= self.headroom * job.slo_ms
            if job.kind == "streaming":
                ok &= g.rho <= self.max_load
            cost = p.accelerator.cost_per_hour + 1e-6 * g.energy_j_per_item
            i = g.argbest(ok, cost)
            if i is None:
                continue
            key = float(cost[i])
            if best is None or key < best[0]:
                best = (key, p.name, dev, g, i)
        if best is None:  # nothing meets the SLO in the profile: the largest profiled capacity on an empty device
            for pool, dev, g in grids:
                i = tuple(int(x) for x in np.unravel_index(int(np.argmax(g.capacity_rps)), g.capacity_rps.shape))
                key = -float(g.capacity_rps[i])
                if best is None or key < best[0]:
                    best = (key, pool, dev, g, i)
        if best is None:
            return None
        _, pool, dev, g, i = best
        return self.decision(job, cluster, pool, dev, g.variants[i[0]], int(g.batches[i[1]]), 1,
                             predicted=g.prediction(i))
