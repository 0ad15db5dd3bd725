"""The simulated cluster: pools of devices (inventory format), slot occupancy and placements, with fast lookups.

Policies see only :meth:`SimCluster.state` (the shared ``ClusterState``) and a monitor's reading of each job's load;
the engine is the only one that changes the cluster, through :meth:`place` and :meth:`remove`, which enforce
capacity.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from oltunes.errors import ConfigError
from oltunes.placement_log import PlacementLog
from oltunes.trusted import trusted_model
from oltunes.types import ClusterState, CoRunner, Placement, Pool


class SimCluster:
    """Pools, per-device occupancy and the current placements (job id -> Placement)."""

    def __init__(self, pools: list[Pool]) -> None:
        if not pools:
            raise ConfigError("cluster: needs at least one pool")
        self._all = list(pools)
        self._online = {p.name: p.count for p in pools}  # devices 0..online-1 are up (a lose_devices event)
        self._view()
        self._occ = {p.name: np.zeros(p.count, dtype=np.int64) for p in pools}
        self._members: dict[tuple[str, int], list[str]] = {}
        self.placements: dict[str, Placement] = {}
        self._log = PlacementLog()  # every place/remove, so a policy's index of the placements syncs in O(changes)
        # ``placements.values()`` as a list, kept in step (what a snapshot copies: a list copies several times
        # faster than a dict's values, and every decision takes one), with each entry's place number, ascending,
        # so that a removal finds its entry by bisection; the last snapshot is handed out again until a change
        self._listed: list[Placement] = []
        self._numbers: list[int] = []
        self._number: dict[str, int] = {}  # job id -> its entry's place number
        self._placed_count = 0
        self._snapshot = None
        self.loads: dict[str, float] = {}  # job id -> busy fraction of its device it kept last interval
        self.now: float = 0.0  # simulated time of the current decision (set by the engine)
        # outside tenants (a co-runner burst): job id -> (variant index, until when); their loads are in `loads`
        self.tenants: dict[str, tuple[int, float]] = {}
        # job id -> (placement, load, its CoRunner): reused while neither changed (placements are immutable)
        self._co_runner: dict[str, tuple[Placement, float, CoRunner]] = {}

    def _view(self) -> None:
        """The pools as policies see them: lost devices gone, a pool with none left gone."""
        self.pools = [p if self._online[p.name] == p.count else p.model_copy(update={"count": self._online[p.name]})
                      for p in self._all if self._online[p.name] > 0]
        self._pool = {p.name: p for p in self.pools}

    # ------------------------------------------------------------------ queries
    def pool(self, name: str) -> Pool:
        try:
            return self._pool[name]
        except KeyError:
            raise ConfigError(f"unknown pool {name!r}; known: {', '.join(self._pool)}") from None

    def occupancy(self, pool: str) -> np.ndarray:
        """Jobs per device of a pool (read-only view)."""
        a = self._occ[pool].view()
        a.flags.writeable = False
        return a

    def free_slots(self, pool: str) -> int:
        p = self._pool.get(pool)
        return 0 if p is None else int(p.count * p.slots_per_device - self._occ[pool][: p.count].sum())

    def free_slots_total(self) -> int:
        return sum(self.free_slots(p.name) for p in self.pools)

    def _up(self, pool: str) -> np.ndarray:
        """Occupancy of the pool's devices that are up."""
        return self._occ[pool][: self._online[pool]]

    def empty_device(self, pool: str) -> int | None:
        idx = np.flatnonzero(self._up(pool) == 0)
        return int(idx[0]) if len(idx) else None

    def least_loaded_device(self, pool: str) -> int | None:
        """The device with the fewest jobs that still has a free slot (lowest index on ties)."""
        occ = self._up(pool)
        if not len(occ):
            return None
        d = int(np.argmin(occ))
        return d if occ[d] < self._pool[pool].slots_per_device else None

    def most_loaded_device(self, pool: str) -> int | None:
        """The fullest device that still has a free slot and is not empty (for packing), else None."""
        occ = self._up(pool)
        ok = np.flatnonzero((occ > 0) & (occ < self._pool[pool].slots_per_device))
        return int(ok[np.argmax(occ[ok])]) if len(ok) else None

    def has_slot(self, pool: str, device: int) -> bool:
        p = self._pool.get(pool)
        return p is not None and 0 <= device < p.count and self._occ[pool][device] < p.slots_per_device

    def members(self, pool: str, device: int) -> list[str]:
        return list(self._members.get((pool, device), ()))

    def co_runners(self, pool: str, device: int, exclude: str | None = None) -> tuple[CoRunner, ...]:
        members = self._members.get((pool, device), ())
        if len(members) == 1 and members[0] == exclude:  # alone on its device (most jobs)
            return ()
        out = []
        for jid in members:
            if jid == exclude:
                continue
            pl = self.placements[jid]
            load = float(min(1.0, max(0.0, self.loads.get(jid, 0.0))))
            seen = self._co_runner.get(jid)
            # every job on a device is the co-runner of every other one's measurement: build each once per load
            if seen is None or seen[0] is not pl or seen[1] != load:
                v = pl.candidate.variant
                seen = self._co_runner[jid] = (pl, load, trusted_model(CoRunner, {
                    "job_id": jid, "family": v.family, "variant": v.name, "size": v.size, "precision": v.precision,
                    "batch_size": pl.candidate.batch_size, "load": load}))  # fmt: skip
            out.append(seen[2])
        return tuple(out)

    def fragmentation(self) -> float:
        """Share of free slots stranded on partly used devices (FGD-style: usable only by co-location)."""
        free = stranded = 0
        for p in self.pools:
            occ = self._up(p.name)
            s = p.slots_per_device
            f = s - occ
            free += int(f.sum())
            stranded += int(f[occ > 0].sum())
        return stranded / free if free else 0.0

    def state(self) -> ClusterState:
        """The shared ``ClusterState`` (built without re-validation: the engine validated each placement); its
        placements are a snapshot of the cluster's placement log (see `oltunes.placement_log`), the same one
        until the placements change."""
        if self._snapshot is None:
            self._snapshot = self._log.snapshot(self._listed)
        # (what ``model_construct`` leaves, without its walk over fields and defaults: one per decision)
        return trusted_model(ClusterState, {"pools": self.pools, "placements": self._snapshot})

    # ------------------------------------------------------------------ changes (engine only)
    def place(self, pl: Placement) -> None:
        if pl.job_id in self.placements:
            raise ConfigError(f"job {pl.job_id} is already placed")
        if not self.has_slot(pl.pool, pl.device):
            raise ConfigError(f"pool {pl.pool} device {pl.device}: no free slot")
        self._occ[pl.pool][pl.device] += 1
        self._members.setdefault((pl.pool, pl.device), []).append(pl.job_id)
        self.placements[pl.job_id] = pl
        self._log.join(pl)
        self._listed.append(pl)
        self._numbers.append(self._placed_count)
        self._number[pl.job_id] = self._placed_count
        self._placed_count += 1
        self._snapshot = None

    def add_tenant(self, pl: Placement, variant: int, load: float, until: float) -> None:
        """An outside tenant takes a slot (visible to policies as a placement) until ``until``."""
        self.place(pl)
        self.loads[pl.job_id] = load
        self.tenants[pl.job_id] = (variant, until)

    def expire_tenants(self, now: float) -> None:
        for jid in [j for j, (_, until) in self.tenants.items() if until <= now]:
            self.remove(jid)

    def tenants_by_device(self) -> dict[tuple[str, int], list[tuple[int, float]]]:
        """(pool, device) -> the outside tenants there as (variant index, load)."""
        out: dict[tuple[str, int], list[tuple[int, float]]] = {}
        for jid, (vi, _) in self.tenants.items():
            pl = self.placements[jid]
            out.setdefault((pl.pool, pl.device), []).append((vi, self.loads.get(jid, 0.0)))
        return out

    def lose_devices(self, pool: str, count: int) -> list[str]:
        """The pool's last ``count`` devices that are up go down; returns the jobs that ran there (now unplaced)."""
        self.pool(pool)
        online = max(0, self._online[pool] - count)
        gone = [jid for d in range(online, self._online[pool]) for jid in self.members(pool, d)]
        for jid in gone:
            self.remove(jid)
        self._online[pool] = online
        self._view()
        return gone

    def remove(self, job_id: str, keep_load: bool = False) -> Placement | None:
        pl = self.placements.pop(job_id, None)
        if pl is None:
            return None
        self._log.leave(pl)
        i = bisect_left(self._numbers, self._number.pop(job_id))
        del self._listed[i], self._numbers[i]
        self._snapshot = None
        self.tenants.pop(job_id, None)
        self._co_runner.pop(job_id, None)
        self._occ[pl.pool][pl.device] -= 1
        self._members[(pl.pool, pl.device)].remove(job_id)
        if not keep_load:
            self.loads.pop(job_id, None)
        return pl
