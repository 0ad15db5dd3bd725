"""`least-loaded`: the pool with the largest share of free slots, its least-occupied device."""

from __future__ import annotations

from oltunes.policies.base import Policy, PolicyContext
from oltunes.sim.cluster import SimCluster
from oltunes.types import Decision, JobSpec


class LeastLoaded(Policy, name="least-loaded"):
    """Spread jobs evenly; the family's default (most accurate) variant at a fixed batch size."""

    def __init__(self, ctx: PolicyContext, batch_size: int = 4) -> None:
        super().__init__(ctx)
        self.batch = min(ctx.batch_sizes, key=lambda b: abs(b - batch_size))

    def decide(self, job: JobSpec, cluster: SimCluster) -> Decision | None:
        variant = self.default_variant(job)
        if variant is None:
            return None
        best, share = None, -1.0
        for p in cluster.pools:
            free = cluster.free_slots(p.name) / (p.count * p.slots_per_device)
            if free > share and cluster.least_loaded_device(p.name) is not None:
                best, share = p.name, free
        if best is None:
            return None
        return self.decision(job, cluster, best, cluster.least_loaded_device(best), variant, self.batch)
