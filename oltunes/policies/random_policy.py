"""`random`: a random device with a free slot (uniform over slots), the default variant, a fixed batch size."""

from __future__ import annotations

import numpy as np

from oltunes.policies.base import Policy, PolicyContext
from oltunes.sim.cluster import SimCluster
from oltunes.types import Decision, JobSpec


class RandomPolicy(Policy, name="random"):
    """Seeded uniform choice over free slots, so bigger pools get proportionally more jobs."""

    def __init__(self, ctx: PolicyContext, batch_size: int = 4) -> None:
        super().__init__(ctx)
        self.batch = min(ctx.batch_sizes, key=lambda b: abs(b - batch_size))

    def decide(self, job: JobSpec, cluster: SimCluster) -> Decision | None:
        variant = self.default_variant(job)
        if variant is None:
            return None
        pools = [p for p in cluster.pools if cluster.free_slots(p.name) > 0]
        if not pools:
            return None
        weights = np.array([cluster.free_slots(p.name) for p in pools], dtype=float)
        pool = pools[int(self.rng.choice(len(pools), p=weights / weights.sum()))]
        free = np.flatnonzero(cluster.occupancy(pool.name) < pool.slots_per_device)
        dev = int(self.rng.choice(free))
        return self.decision(job, cluster, pool.name, dev, variant, self.batch)
