"""`least-loaded`: the pool with the largest share of free slots, its least-occupied device."""

from __future__ import annotations

from oltunes.policies.base import FixedConfigPolicy
from oltunes.occupancy import Occupancy
from oltunes.types import JobSpec


class LeastLoaded(FixedConfigPolicy, name="least-loaded"):
    """Spread jobs evenly; the family's default (most accurate) variant at a fixed batch size."""

    def place(self, job: JobSpec, cluster: Occupancy) -> tuple[str, int] | None:
        best, share = None, -1.0
        for p in cluster.pools:
            free = cluster.free_slots(p.name) / (p.count * p.slots_per_device)
            if free > share and cluster.least_loaded_device(p.name) is not None:
                best, share = p.name, free
        return None if best is None else (best, cluster.least_loaded_device(best))
