"""Who runs where: placements indexed by pool and device, kept up to date by what changed between decisions.

Every decision needs, per pool, the jobs on each occupied device, how many slots are used, the fullest device with
a free slot and the first empty one. Grouping every placement of the cluster per decision made its cost grow with
the cluster (a quarter of a decision at 1,000 devices). A tuner sees the same cluster again and again, changed by a
job or two: placements are frozen, so one that is the same object as last time is the same placement, and
:meth:`Occupancy.sync` applies only the placements that appeared or left (a pass over object ids in C, no Python
work per placement; none at all when the list holds the same objects as last time). The commonest change — a few
placements out of the list and new ones at its end, which is how a simulator or a lease book moves a job — is found
by walking the old and the new list side by side with ``is`` in C, without building id sets over the whole cluster
(at 10,000 devices those sets were half of a decision's time). Cheaper still, a list that is a snapshot of a
placement log (:mod:`oltunes.placement_log`, what the simulator's cluster hands out) says what changed since the
snapshot synced last: those changes are applied and the list is not walked at all. A caller that sends fresh objects
every time (the HTTP service) regroups everything in one pass, as every decision did before.

Members of a device are returned in the order of the cluster's list, so options (and the decisions built on them)
are exactly what a fresh grouping gives. One pool's part of the index is :mod:`oltunes.tuner.pool_occupancy`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import compress, islice
from itertools import count as _count
from operator import attrgetter, is_, is_not
from typing import Any

from oltunes.placement_log import PlacementLog, Snapshot
from oltunes.tuner.pool_occupancy import PoolOccupancy, new_version
from oltunes.types import Placement

__all__ = ["Occupancy"]

MAX_MEMO = 4096
_MAX_FAST_REMOVALS = 8  # more removals between two syncs than this: the general path (id sets) is as cheap
_POOL_DEVICE = attrgetter("pool", "device")


class Occupancy:
    """Placements by pool and device, synced from successive cluster states (see the module docstring).

    Examples
    --------
    >>> occ = Occupancy()
    >>> occ.sync([])
    >>> occ.used("t4", 8), occ.first_empty("t4", 8)
    (0, 0)
    """

    def __init__(self) -> None:
        self._pools: dict[str, PoolOccupancy] = {}
        self._placed: dict[Hashable, Placement] = {}  # key -> placement; holds them, so an id is never reused
        self._by_job: dict[str, set[Hashable]] | None = None  # built on the first exclusion, then kept
        # object id -> position in the synced list (when needed); positions only need to keep the list's relative
        # order, so placements appended since it was built get ever larger ones (``_next_pos``)
        self._order: dict[Hashable, int] | None = None
        self._next_pos = 0
        self._excluded: dict[Hashable, Placement] = {}  # the excluded job's placements, out of the index
        self._listed: Sequence[Placement] = ()
        self._exclude: str | None = None
        self._stamp: tuple[PlacementLog, int] | None = None  # (log, version) when the synced list was a snapshot
        self._by_position = False  # an object listed twice: keys are list positions, nothing is kept across syncs
        self.generation = 0  # moves on every sync that is not the very same list as last time
        # moves on every sync that may have reordered the placements it kept (the general path): appending and
        # removing keep the others' order, so derived values that read the order hold while this does
        self.reordered = 0
        # Values derived from one pool's placements (its placement options), valid while ``version(pool)`` holds.
        self.memo: dict[Hashable, Any] = {}

    @classmethod
    def of(cls, placements: Sequence[Placement], exclude: str | None = None) -> Occupancy:
        """A fresh index of ``placements``."""
        occ = cls()
        occ.sync(placements, exclude)
        return occ

    # ------------------------------------------------------------------------------------------------ update
    def sync(self, placements: Sequence[Placement], exclude: str | None = None) -> None:
        """Make the index show ``placements`` (less those of job ``exclude``), changing only what differs."""
        stamp = (placements.log, placements.version) if isinstance(placements, Snapshot) else None
        same_log = stamp is not None and self._stamp is not None and stamp[0] is self._stamp[0]
        if exclude == self._exclude and (
                stamp[1] == self._stamp[1] if same_log  # two snapshots of one log: the same version, the same list
                else len(placements) == len(self._listed) and all(map(is_, placements, self._listed))):
            return  # the very same objects in the same order: nothing to do
        self.generation += 1
        touched: set[str] = set()
        order: dict[Hashable, int] | None = None  # positions, built only when an incremental change needs them
        if self._sync_logged(placements, exclude, touched) or self._sync_appended(placements, exclude, touched):
            order = self._order
        elif self._by_position or not self._placed or self._placed.keys().isdisjoint(map(id, placements)):
            self._rebuild(placements)  # nothing in common (e.g. a fresh request): group in one pass, in list order
        else:
            self.reordered += 1
            self._excluded = {}  # what of them is still listed comes back below, with the other new keys
            order = dict(zip(map(id, placements), range(len(placements))))
            if len(order) < len(placements):  # an object listed twice
                self._rebuild(placements)
                order = None
            else:
                gone = self._placed.keys() - order.keys()
                for key in gone:
                    touched.add(self._remove(key))
                if len(order) > len(self._placed):  # what is left is a subset of ``order``: equal sizes, equal sets
                    for key in order.keys() - self._placed.keys():
                        touched.add(self._add(key, placements[order[key]]))
        if exclude is not None:
            if self._by_job is None:
                self._by_job = {}
                for key, p in self._placed.items():
                    self._by_job.setdefault(p.job_id, set()).add(key)
            for key in list(self._by_job.get(exclude, ())):
                self._excluded[key] = self._placed[key]
                touched.add(self._remove(key))
        for name in touched:  # a pool that changed gets a new version (its derived values are rebuilt)
            if name in self._pools:
                self._pools[name].version = new_version()
        if order is not self._order:
            self._next_pos = len(placements)
        # a snapshot is never changed once handed out; any other list is copied (lists are mutable)
        self._listed = placements if stamp is not None else list(placements)
        self._order, self._exclude, self._stamp = order, exclude, stamp

    def _sync_logged(self, placements: Sequence[Placement], exclude: str | None, touched: set[str]) -> bool:
        """A snapshot of the log the last synced list came from: apply the log's changes since then, in O(changes)
        (the log says what joined, at the list's end, and what left). Returns False when that cannot be done or
        the changes do not add up to the list (the general path then repairs the index from the list itself)."""
        if self._stamp is None or self._by_position or not isinstance(placements, Snapshot):
            return False
        log, since = self._stamp
        if placements.log is not log:
            return False
        changes = log.between(since, placements.version)
        if changes is None:
            return False
        self._positions()
        for p, joined in changes:  # each step leaves the index consistent, so a bail-out midway is safe
            key = id(p)
            if joined:
                if key in self._placed or key in self._excluded:
                    return False
                self._append(key, p, touched)
            elif not self._leave(key, touched):
                return False
        if len(self._placed) + len(self._excluded) != len(placements):  # the list does not match its log
            return False
        self._restore_excluded(exclude, touched)
        return True

    def _sync_appended(self, placements: Sequence[Placement], exclude: str | None, touched: set[str]) -> bool:
        """The common change between two decisions in O(changed) ``is`` checks in C instead of id sets over the
        whole list: the last list less a few placements, plus new ones at its end (a simulator or a lease book moving
        a job: out of the list, back in at the end). Returns False, changing nothing, for any other change (the
        general path then handles it)."""
        old, new = self._listed, placements
        if self._by_position or not old or not self._placed:
            return False
        gone: list[int] = []
        i = j = 0
        n_old, n_new = len(old), len(new)
        while True:  # walk both lists: equal runs in C, each mismatch taken as a removal from the old list
            k = next(compress(_count(), map(is_not, islice(old, i, None), islice(new, j, None))),
                     min(n_old - i, n_new - j))
            i, j = i + k, j + k
            if i == n_old:
                break
            if j == n_new or len(gone) == _MAX_FAST_REMOVALS:
                return False
            gone.append(i)
            i += 1
        order = self._positions()
        added = [(id(p), p) for p in islice(new, j, None)]
        if any(key in order for key, _ in added) or len({key for key, _ in added}) < len(added):
            return False  # a placement listed before (moved to the end, or listed twice): the general path
        for g in gone:
            self._leave(id(old[g]), touched)
        for key, p in added:
            self._append(key, p, touched)
        self._restore_excluded(exclude, touched)
        return True

    def _positions(self) -> dict[Hashable, int]:
        """Positions of the synced list's objects (built on first need, then kept up to date)."""
        if self._order is None:
            self._order = dict(zip(map(id, self._listed), range(len(self._listed))))
            self._next_pos = len(self._listed)
        return self._order

    def _append(self, key: Hashable, p: Placement, touched: set[str]) -> None:
        """``p`` joined the list at its end."""
        self._order[key] = self._next_pos
        self._next_pos += 1
        touched.add(self._add(key, p))

    def _leave(self, key: Hashable, touched: set[str]) -> bool:
        """The placement ``key`` left the list; False if the index does not hold it."""
        if key in self._excluded:
            del self._excluded[key]
        elif key in self._placed:
            touched.add(self._remove(key))
        else:
            return False
        del self._order[key]
        return True

    def _restore_excluded(self, exclude: str | None, touched: set[str]) -> None:
        """The job excluded last time is back (those of its placements still listed)."""
        if exclude != self._exclude:
            for key, p in self._excluded.items():
                touched.add(self._add(key, p))
            self._excluded = {}

    def _rebuild(self, placements: Sequence[Placement]) -> None:
        """Group every placement afresh; each device's members come out in list order. An object listed twice
        counts twice, so then the keys are list positions and nothing is kept across syncs."""
        keys: Sequence[Hashable] = list(map(id, placements))
        self._placed = dict(zip(keys, placements))
        self._by_position = len(self._placed) < len(placements)
        if self._by_position:
            keys = range(len(placements))
            self._placed = dict(zip(keys, placements))
        grouped: dict[str, dict[int, dict[Hashable, None]]] = {}
        # get-then-create: no throw-away containers per placement; attributes read in C (a tenth of the loop)
        for key, (pool, device) in zip(keys, map(_POOL_DEVICE, placements)):
            devices = grouped.get(pool)
            if devices is None:
                devices = grouped[pool] = {}
            ms = devices.get(device)
            if ms is None:
                devices[device] = {key: None}
            else:
                ms[key] = None
        self._pools = {name: PoolOccupancy(devices) for name, devices in grouped.items()}
        self._by_job, self.memo, self._excluded = None, {}, {}

    def _add(self, key: Hashable, p: Placement) -> str:
        self._placed[key] = p
        if self._by_job is not None:
            self._by_job.setdefault(p.job_id, set()).add(key)
        pool = self._pools.get(p.pool)
        if pool is None:
            pool = self._pools[p.pool] = PoolOccupancy()
        pool.add(key, p)
        return p.pool

    def _remove(self, key: Hashable) -> str:
        p = self._placed.pop(key)
        if self._by_job is not None:
            keys = self._by_job[p.job_id]
            keys.discard(key)
            if not keys:
                del self._by_job[p.job_id]
        pool = self._pools[p.pool]
        pool.remove(key, p)
        if not pool.total:
            del self._pools[p.pool]
        return p.pool

    # ------------------------------------------------------------------------------------------------ read
    def listed(self) -> list[Placement]:
        """The synced placements in list order, less the excluded job's (what the index shows)."""
        return [p for p in self._listed if p.job_id != self._exclude]

    def occupied(self, pool: str) -> bool:
        return pool in self._pools

    def version(self, pool: str) -> int:
        """Changes whenever a placement joins or leaves the pool (0: nothing placed); -1 when nothing may be
        kept across syncs (an object listed twice)."""
        if self._by_position:
            return -1
        p = self._pools.get(pool)
        return p.version if p is not None else 0

    def in_list_order(self, members: Sequence[Placement]) -> bool:
        """Whether ``members`` (of one device, as returned by :meth:`members` earlier) are still in the order of
        the cluster's list (a list may be reordered without any placement changing)."""
        order = self._positions()
        pos = [order.get(id(m), -1) for m in members]
        return all(a < b for a, b in zip(pos, pos[1:]))

    def members(self, pool: str, device: int) -> tuple[Placement, ...]:
        """Jobs on one device, in the order of the cluster's list."""
        p = self._pools.get(pool)
        ms = p.devices.get(device) if p is not None else None
        if not ms:
            return ()
        placed = self._placed
        if len(ms) == 1 or self._order is None:  # no incremental change since a regrouping: already in list order
            return tuple(placed[k] for k in ms)
        order = self._order
        return tuple(placed[k] for _, k in sorted((order[k], k) for k in ms))

    def count(self, pool: str, device: int) -> int:
        p = self._pools.get(pool)
        return len(p.devices.get(device, ())) if p is not None else 0

    def used(self, pool: str, count: int) -> int:
        """Slots taken on the pool's devices 0..count-1 (a placement naming a device the pool lacks is ignored)."""
        p = self._pools.get(pool)
        if p is None:
            return 0
        if p.within(count):
            return p.total
        return sum(len(ms) for d, ms in p.devices.items() if 0 <= d < count)

    def fullest_free(self, pool: str, count: int, cap: int) -> int | None:
        """The occupied device with the most jobs but a free slot (lowest index among equals), or None."""
        p = self._pools.get(pool)
        if p is None:
            return None
        for n in sorted((n for n, ds in p.levels.items() if ds and n < cap), reverse=True):
            ds = p.levels[n]
            if p.within(count):
                return p.lowest(n)
            valid = [d for d in ds if 0 <= d < count]
            if valid:
                return min(valid)
        return None

    def first_empty(self, pool: str, count: int) -> int | None:
        """Lowest device index with no job on it (None when every device is occupied)."""
        p = self._pools.get(pool)
        if p is None:
            return 0 if count > 0 else None
        i, devices = p.gap, p.devices
        while i in devices:  # stops at the first gap: each step moves the pool's mark for good (until a removal)
            i += 1
        p.gap = i
        return i if i < count else None

    def least_loaded(self, pool: str, count: int) -> int:
        """The device with the fewest jobs (lowest index among equals); walks every device (rare: a full pool)."""
        p = self._pools.get(pool)
        devices = p.devices if p is not None else {}
        return min(range(count), key=lambda k: (len(devices.get(k, ())), k))
