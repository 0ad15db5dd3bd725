"""Who runs where, read from a ``ClusterState``: per-device job counts and members, the queries placement asks.

Built once per decision from the shared ``ClusterState`` (pools + placements), so the tuner and the baseline
policies read the same index against the simulator, a real cluster's state or a test's hand-made one. A placement
naming a pool or a device the cluster lacks is ignored. Members of a device come in the order of the cluster's list.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from oltunes.types import ClusterState, CoRunner, Placement, Pool

__all__ = ["Occupancy"]


class Occupancy:
    """Per-device job counts and members of every pool of a ``ClusterState``.

    ``exclude``: a job id whose placements are left out (a running job being re-tuned: its slot is its own).

    Examples
    --------
    >>> from oltunes.inventory import CATALOG
    >>> occ = Occupancy(ClusterState(pools=[Pool(name="t4", accelerator=CATALOG["t4"], count=3)]))
    >>> occ.empty_device("t4"), occ.free_slots("t4")
    (0, 12)
    """

    def __init__(self, state: ClusterState, load_of: Callable[[Placement], float] | None = None,
                 exclude: str | None = None) -> None:
        self.pools: list[Pool] = list(state.pools)
        self._pool = {p.name: p for p in self.pools}
        self._load_of = load_of or (lambda pl: 1.0)
        placed = state.placements
        if exclude is not None:
            placed = [pl for pl in placed if pl.job_id != exclude]
        self._placed = placed
        # every device of every pool numbered in one range: pool i's devices are start[i] .. start[i] + count - 1
        counts = np.array([p.count for p in self.pools], dtype=np.int64)
        self._start = dict(zip(self._pool, np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()))
        index = {name: i for i, name in enumerate(self._pool)}
        pool_of = np.fromiter((index.get(pl.pool, -1) for pl in placed), dtype=np.int64, count=len(placed))
        device = np.fromiter((pl.device for pl in placed), dtype=np.int64, count=len(placed))
        known = (pool_of >= 0) & (device < counts[pool_of] if len(counts) else False)  # (else: ignored)
        starts = np.array(list(self._start.values()), dtype=np.int64)
        self._slot = np.where(known, starts[pool_of] + device if len(counts) else -1, -1)  # each placement's device
        jobs = np.bincount(self._slot[known], minlength=int(counts.sum()))
        self._occ = {name: jobs[start:start + p.count] for (name, start), p in zip(self._start.items(), self.pools)}

    def pool(self, name: str) -> Pool:
        return self._pool[name]

    def occupancy(self, pool: str) -> np.ndarray:
        """Jobs on each device of the pool."""
        return self._occ[pool]

    def free_slots(self, pool: str) -> int:
        p = self._pool[pool]
        return int(p.count * p.slots_per_device - self._occ[pool].sum())

    def free_slots_total(self) -> int:
        return sum(self.free_slots(p.name) for p in self.pools)

    def empty_device(self, pool: str) -> int | None:
        """The lowest-numbered device with no job on it."""
        idx = np.flatnonzero(self._occ[pool] == 0)
        return int(idx[0]) if len(idx) else None

    def least_loaded_device(self, pool: str, *, with_free_slot: bool = True) -> int | None:
        """The device with the fewest jobs (lowest index on ties); with ``with_free_slot``, None if it is full."""
        occ = self._occ[pool]
        if not len(occ):
            return None
        d = int(np.argmin(occ))
        return d if not with_free_slot or occ[d] < self._pool[pool].slots_per_device else None

    def most_loaded_device(self, pool: str) -> int | None:
        """The fullest device that still has a free slot and is not empty (for packing; lowest index on ties)."""
        occ = self._occ[pool]
        ok = np.flatnonzero((occ > 0) & (occ < self._pool[pool].slots_per_device))
        return int(ok[np.argmax(occ[ok])]) if len(ok) else None

    def members(self, pool: str, device: int) -> list[Placement]:
        """The jobs on one device, in the order of the cluster's list."""
        occ = self._occ.get(pool)
        if occ is None or not 0 <= device < len(occ) or not occ[device]:
            return []
        return [self._placed[i] for i in np.flatnonzero(self._slot == self._start[pool] + device).tolist()]

    def co_runners(self, pool: str, device: int, exclude: str | None = None) -> tuple[CoRunner, ...]:
        """The jobs on a device as ``CoRunner`` (load: the monitor's reading, else 1 = assume it keeps it busy)."""
        return tuple(
            CoRunner(job_id=pl.job_id, family=pl.candidate.variant.family, variant=pl.candidate.variant.name,
                     size=pl.candidate.variant.size, precision=pl.candidate.variant.precision,
                     batch_size=pl.candidate.batch_size, load=min(1.0, max(0.0, self._load_of(pl))))
            for pl in self.members(pool, device) if pl.job_id != exclude
        )
