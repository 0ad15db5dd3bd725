"""`round-robin`: cycle over the pools, the family's default (most accurate) variant, a fixed batch size."""

from __future__ import annotations

from oltunes.policies.base import Policy, PolicyContext
from oltunes.sim.cluster import SimCluster
from oltunes.types import Decision, JobSpec


class RoundRobin(Policy, name="round-robin"):
    """Next pool in turn that has a free slot; its least-occupied device. No profile, no learning."""

    def __init__(self, ctx: PolicyContext, batch_size: int = 4) -> None:
        super().__init__(ctx)
        self.batch = min(ctx.batch_sizes, key=lambda b: abs(b - batch_size))
        self._next = 0

    def decide(self, job: JobSpec, cluster: SimCluster) -> Decision | None:
        variant = self.default_variant(job)
        if variant is None:
            return None
        n = len(cluster.pools)
        for k in range(n):
            pool = cluster.pools[(self._next + k) % n].name
            dev = cluster.least_loaded_device(pool)
            if dev is not None:
                self._next = (self._next + k + 1) % n
                return self.decision(job, cluster, pool, dev, variant, self.batch)
        return None
