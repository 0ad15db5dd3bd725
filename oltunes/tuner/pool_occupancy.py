"""One pool's occupied devices, kept for :class:`oltunes.tuner.occupancy.Occupancy`: who is on each device, devices
bucketed by how many jobs they hold, and the marks that let the queries (fullest device with a free slot, first
empty device, slots used) avoid walking the pool's devices per decision."""

from __future__ import annotations

from collections.abc import Hashable
from heapq import heapify, heappop, heappush
from itertools import count

from oltunes.types import Placement

__all__ = ["PoolOccupancy", "new_version"]

_VERSIONS = count(1)  # pool versions are unique across pools and re-creations: 0 means "nothing placed"


def new_version() -> int:
    """A version no pool has had (derived values keyed by it are rebuilt)."""
    return next(_VERSIONS)


class PoolOccupancy:
    """One pool's occupied devices: device -> {key: None} (keys only: containers of plain ints are not tracked by
    the garbage collector, so a large index kept between decisions adds no collection work), and devices bucketed by
    how many jobs they hold. What the queries need is kept so that none walks the pool's devices per decision: the
    lowest device of each level (a heap, built on first need, stale entries dropped as they surface), bounds on the
    device indices and a device below which every one is occupied."""

    __slots__ = ("devices", "gap", "heaps", "hi", "levels", "lo", "total", "version")

    def __init__(self, devices: dict[int, dict[Hashable, None]] | None = None) -> None:
        self.devices: dict[int, dict[Hashable, None]] = devices or {}
        self.levels: dict[int, set[int]] = {}  # member count -> devices holding that many
        self.heaps: dict[int, list[int]] = {}  # member count -> a heap of (at least) that level's devices
        sizes = list(map(len, self.devices.values()))
        self.total = sum(sizes)
        if sizes and min(sizes) == max(sizes):  # one level (e.g. one job per occupied device): no loop in Python
            self.levels[sizes[0]] = set(self.devices)
        else:
            for d, n in zip(self.devices, sizes):
                level = self.levels.get(n)
                if level is None:
                    self.levels[n] = {d}
                else:
                    level.add(d)
        self.lo, self.hi = (min(self.devices), max(self.devices)) if self.devices else (0, -1)  # lo <= d <= hi
        self.gap = 0  # every device in [0, gap) is occupied
        self.version = new_version()

    def _enter(self, n: int, d: int) -> None:
        level = self.levels.get(n)
        if level is None:
            level = self.levels[n] = set()
        level.add(d)
        heap = self.heaps.get(n)
        if heap is not None:
            heappush(heap, d)
            if len(heap) > 2 * len(level) + 32:  # mostly stale: rebuild
                self.heaps[n] = list(level)
                heapify(self.heaps[n])

    def add(self, key: Hashable, p: Placement) -> None:
        d = p.device
        ms = self.devices.setdefault(d, {})
        n = len(ms)
        if n:
            self.levels[n].discard(d)
        ms[key] = None
        self._enter(n + 1, d)
        self.total += 1
        if d < self.lo or self.hi < self.lo:
            self.lo = d
        self.hi = max(self.hi, d)

    def remove(self, key: Hashable, p: Placement) -> None:
        d = p.device
        ms = self.devices[d]
        n = len(ms)
        self.levels[n].discard(d)
        del ms[key]
        if ms:
            self._enter(n - 1, d)
        else:
            del self.devices[d]
            if 0 <= d < self.gap:
                self.gap = d
        self.total -= 1

    def lowest(self, n: int) -> int:
        """The lowest device holding ``n`` jobs (there is one)."""
        ds, heap = self.levels[n], self.heaps.get(n)
        if heap is None:
            heap = self.heaps[n] = list(ds)
            heapify(heap)
        while heap[0] not in ds:
            heappop(heap)
        return heap[0]

    def within(self, count: int) -> bool:
        """Whether every occupied device is one of 0..count-1 (the bounds are tightened when they say no)."""
        if self.lo >= 0 and self.hi < count:
            return True
        if self.devices:
            self.lo, self.hi = min(self.devices), max(self.devices)
        return self.lo >= 0 and self.hi < count
