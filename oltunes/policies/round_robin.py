"""`round-robin`: cycle over the pools, the family's default (most accurate) variant, a fixed batch size."""

from __future__ import annotations

from oltunes.policies.base import FixedConfigPolicy, PolicyContext
from oltunes.occupancy import Occupancy
from oltunes.types import JobSpec


class RoundRobin(FixedConfigPolicy, name="round-robin"):
    """Next pool in turn that has a free slot; its least-occupied device. No profile, no learning."""

    def __init__(self, ctx: PolicyContext, batch_size: int = 4) -> None:
        super().__init__(ctx, batch_size)
        self._next = 0

    def place(self, job: JobSpec, cluster: Occupancy) -> tuple[str, int] | None:
        n = len(cluster.pools)
        for k in range(n):
            pool = cluster.pools[(self._next + k) % n].name
            dev = cluster.least_loaded_device(pool)
            if dev is not None:
                self._next = (self._next + k + 1) % n
                return pool, dev
        return None
