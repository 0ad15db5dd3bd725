"""Who runs where, read from a ``ClusterState``: per-device occupancy and co-runners, the queries policies ask.

Built once per decision from the shared ``ClusterState`` (pools + placements), so policies run the same against the
simulator, the in-process tuner's view of a real cluster, or a test's hand-made state.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from oltunes.types import ClusterState, CoRunner, Placement, Pool


class Occupancy:
    """Per-device job counts and members of every pool of a ``ClusterState``."""

    def __init__(self, state: ClusterState, load_of: Callable[[Placement], float] | None = None) -> None:
        self.pools: list[Pool] = list(state.pools)
        self._pool = {p.name: p for p in self.pools}
        self._occ = {p.name: np.zeros(p.count, dtype=np.int64) for p in self.pools}
        self._members: dict[tuple[str, int], list[Placement]] = {}
        self.placements = {pl.job_id: pl for pl in state.placements}
        self._load_of = load_of or (lambda pl: 1.0)
        for pl in state.placements:
            occ = self._occ.get(pl.pool)
            if occ is not None and 0 <= pl.device < len(occ):
                occ[pl.device] += 1
                self._members.setdefault((pl.pool, pl.device), []).append(pl)

    def pool(self, name: str) -> Pool:
        return self._pool[name]

    def occupancy(self, pool: str) -> np.ndarray:
        return self._occ[pool]

    def free_slots(self, pool: str) -> int:
        p = self._pool[pool]
        return int(p.count * p.slots_per_device - self._occ[pool].sum())

    def free_slots_total(self) -> int:
        return sum(self.free_slots(p.name) for p in self.pools)

    def empty_device(self, pool: str) -> int | None:
        idx = np.flatnonzero(self._occ[pool] == 0)
        return int(idx[0]) if len(idx) else None

    def least_loaded_device(self, pool: str) -> int | None:
        """The device with the fewest jobs that still has a free slot (lowest index on ties)."""
        occ = self._occ[pool]
        d = int(np.argmin(occ))
        return d if occ[d] < self._pool[pool].slots_per_device else None

    def most_loaded_device(self, pool: str) -> int | None:
        """The fullest device that still has a free slot and is not empty (for packing), else None."""
        occ = self._occ[pool]
        ok = np.flatnonzero((occ > 0) & (occ < self._pool[pool].slots_per_device))
        return int(ok[np.argmax(occ[ok])]) if len(ok) else None

    def members(self, pool: str, device: int) -> list[Placement]:
        return list(self._members.get((pool, device), ()))

    def co_runners(self, pool: str, device: int, exclude: str | None = None) -> tuple[CoRunner, ...]:
        """The jobs on a device as ``CoRunner`` (load: the monitor's reading, else 1 = assume it keeps it busy)."""
        return tuple(
            CoRunner(job_id=pl.job_id, family=pl.candidate.variant.family, variant=pl.candidate.variant.name,
                     size=pl.candidate.variant.size, precision=pl.candidate.variant.precision,
                     batch_size=pl.candidate.batch_size, load=min(1.0, max(0.0, self._load_of(pl))))
            for pl in self._members.get((pool, device), ()) if pl.job_id != exclude
        )
