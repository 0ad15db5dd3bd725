"""`random`: a random device with a free slot (uniform over slots), the default variant, a fixed batch size."""

from __future__ import annotations

import numpy as np

from oltunes.policies.base import FixedConfigPolicy
from oltunes.occupancy import Occupancy
from oltunes.types import JobSpec


class RandomPolicy(FixedConfigPolicy, name="random"):
    """Seeded uniform choice over free slots, so bigger pools get proportionally more jobs."""

    def place(self, job: JobSpec, cluster: Occupancy) -> tuple[str, int] | None:
        pools = [p for p in cluster.pools if cluster.free_slots(p.name) > 0]
        if not pools:
            return None
        weights = np.array([cluster.free_slots(p.name) for p in pools], dtype=float)
        pool = pools[int(self.rng.choice(len(pools), p=weights / weights.sum()))]
        free = np.flatnonzero(cluster.occupancy(pool.name) < pool.slots_per_device)
        return pool.name, int(self.rng.choice(free))
