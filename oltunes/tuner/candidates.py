"""Where a new job could go: placement options per pool, and the capacity rules.

A *placement option* is one device of a pool the job could join: the first empty device (no co-runners)
and the fullest device that still has a free slot (co-running; best fit, it fragments least). The tuner's
candidate grid is then options x variants of the job's family x batch sizes x concurrencies.

Capacity:

* slots — a job takes one slot on one device, whatever its batch size and concurrency
  (``Pool.slots_per_device`` bounds co-running jobs per device);
* memory — a job needs ``concurrency x (2 x model bytes + 0.25 GB)`` of device memory (weights plus
  workspace/activations for each in-flight batch, a deliberate over-estimate); the co-runners' needs are
  counted the same way from their placements.

Concurrency is the number of batches the job keeps in flight on its device (ONNX Runtime sessions/streams).
Batch size is the *largest* batch: streaming workers batch dynamically (``fill_wait_ms``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from oltunes.tuner import built
from oltunes.tuner.memo import put_bounded
from oltunes.tuner.occupancy import MAX_MEMO, Occupancy
from oltunes.types import CoRunner, Placement, Pool, Variant

__all__ = [
    "BATCH_DELAY_MS",
    "CoLite",
    "PlacementOption",
    "co_runner_of",
    "fill_wait_ms",
    "memory_need_gb",
    "model_bytes",
    "placement_options",
    "queue_wait_ms",
]

BATCH_DELAY_MS = 5.0  # the serving worker's default max_delay_ms (oltunes.worker.serve.ServeConfig)

_WORKSPACE_GB = 0.25


def model_bytes(v: Variant) -> float:
    """Serialized model size; estimated from the parameter count (or ~100 MB) when unknown."""
    if v.bytes:
        return float(v.bytes)
    per_param = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0}[v.precision]
    return (v.params or 25_000_000) * per_param


def memory_need_gb(v: Variant, concurrency: int) -> float:
    return concurrency * (2.0 * model_bytes(v) / 1e9 + _WORKSPACE_GB)


def fill_wait_ms(batch: Any, rate: float, delay_ms: float = BATCH_DELAY_MS) -> Any:
    """Longest a streaming request waits for its batch to fill: the dynamic batcher closes a batch when it is
    full or its oldest request has waited ``delay_ms``, whichever comes first (0 for batch jobs)."""
    if rate <= 0:
        return 0.0 * batch
    if type(batch) is float:  # one batch size (a placed job's, a measurement's): numpy's minimum without its call
        wait = 1000.0 * (batch - 1.0) / rate
        return wait if wait < delay_ms or math.isnan(wait) else delay_ms  # (ties and NaN as np.minimum)
    return np.minimum(1000.0 * (batch - 1.0) / rate, delay_ms)


def queue_wait_ms(batch_latency_ms: Any, rate: float, throughput: Any, concurrency: Any, burstiness: float) -> Any:
    """Approximate p99 queueing delay of a streaming request (Kingman's G/G/1 mean wait with an exponential
    tail): ``lat/c * rho/(1-rho) * (1 + burstiness)/2 * ln(100)``, ``rho = rate / throughput`` (capped below
    1). ``burstiness`` is the squared coefficient of variation of inter-arrival times (1 = Poisson); batch
    latencies in measurements exclude queueing, so this is the only place it enters the SLO check. (The tuner's
    grids get it from ``wait_kernels.request_waits``, the same arithmetic compiled, checked against this.)"""
    rho = np.minimum(rate / throughput, 0.999)
    return batch_latency_ms / concurrency * rho / (1.0 - rho) * (1.0 + burstiness) / 2.0 * np.log(100.0)


def co_runner_of(p: Placement, load: float = 1.0) -> CoRunner:
    """How a placed job appears to a job sharing its device (default load 1: assume it keeps the device busy;
    the tuner passes a measured or estimated load when it has one)."""
    c = p.candidate
    return built.co_runner(p.job_id, c.variant.family, c.variant.name, c.variant.size, c.variant.precision,
                           c.batch_size, load)


class CoLite(NamedTuple):
    """The three co-runner fields the feature encoding reads (cheap to build for every option)."""

    family: str
    size: str
    load: float = 1.0


@dataclass(frozen=True)
class PlacementOption:
    pool: Pool
    device: int
    members: tuple[Placement, ...]  # jobs already on that device
    free_memory_gb: float
    free_slots_after: int  # on the device, once the new job is placed
    pool_free_slots_after: int
    loads: tuple[float, ...] = ()  # busy share of the device each member keeps (empty: 1.0 each)
    # the index's table of what each placement reads, where the option came from one (its members' co-runner
    # objects are made once per placement and load there): not part of what the option is
    per: _PerPlacement | None = field(default=None, compare=False, repr=False)

    @cached_property
    def member_loads(self) -> tuple[float, ...]:
        """Each member's busy share: ``loads``, and 1.0 for the members past the loads given."""
        return (*self.loads, *(1.0,) * (len(self.members) - len(self.loads)))

    @cached_property
    def co_features(self) -> tuple[CoLite, ...]:
        """The members as the encoding sees them (family, size, load)."""
        return tuple([CoLite(m.candidate.variant.family, m.candidate.variant.size, load)
                      for m, load in zip(self.members, self.member_loads)])

    @cached_property
    def model_key(self) -> tuple:
        """What the estimate's grid reads of this option: pool, accelerator (and its power), co-runners."""
        acc = self.pool.accelerator
        return (self.pool.name, acc.name, acc.max_w, self.co_features)

    @cached_property
    def prior_key(self) -> tuple:
        """What the prior's grid reads of this option: accelerator (and its power), co-runners' summed load."""
        acc = self.pool.accelerator
        return (acc.name, acc.max_w, sum(c.load for c in self.co_features))

    @cached_property
    def co_runners(self) -> tuple[CoRunner, ...]:
        """The members as ``CoRunner`` objects (built only for the chosen option)."""
        made = co_runner_of if self.per is None else self.per.co_runner
        return tuple(made(m, load) for m, load in zip(self.members, self.member_loads))

    @property
    def shared(self) -> bool:
        return bool(self.members)


def placement_options(pools: Sequence[Pool], occupancy: Occupancy, *, ignore_capacity: bool = False,
                      include: tuple[str, int] | None = None,
                      load_of: Callable[[Placement], float] | None = None,
                      loads_version: Hashable | None = None) -> list[PlacementOption]:
    """Options per pool: first empty device, and the fullest device with a free slot.

    ``occupancy`` says who runs where (``Occupancy.of(cluster.placements)``, or one the caller keeps in sync).
    ``include`` = (pool, device) adds that device too when it has a free slot (a running job's current
    device, so that staying is one of the candidates). With ``ignore_capacity`` every pool yields its
    least-loaded device even when full (used only to name a best-available candidate when nothing fits).
    ``load_of`` gives each placed job's busy share of its device (default: 1.0, assume it keeps it busy);
    ``loads_version`` says what it reads besides the placements: while it stays the same, a pool whose placements
    did not change keeps its options' loads without reading them again (None: read them every time).

    Empty devices of a pool are interchangeable, so they are one option, represented by the lowest index;
    the work per pool is a few look-ups in the index, never a walk over its devices or placements.
    """
    out: list[PlacementOption] = []
    memo = occupancy.memo
    if len(memo) > MAX_MEMO:
        memo.clear()
    reordered = occupancy.reordered
    per = _per_placement(memo, load_of, loads_version)
    for pool in pools:
        name = pool.name
        keep = include[1] if include is not None and include[0] == name and 0 <= include[1] < pool.count else None
        # A pool whose placements did not change since the last decision keeps its options (the same objects,
        # so what they cache holds too); only its members' loads are read again.
        key = (name, keep, ignore_capacity, load_of is None)
        version = occupancy.version(name)
        hit = memo.get(key)
        if hit is not None and hit[0] is pool and hit[1] == version and hit[4] != reordered:
            # the list may have reordered its placements since: kept only if each device's members are still in
            # its order (a change by appending and removing, the common one, never reorders: no check then)
            if all(occupancy.in_list_order(o.members) for o in hit[2] if len(o.members) > 1):
                hit = memo[key] = (*hit[:4], reordered)
            else:
                hit = None
        if hit is None or hit[0] is not pool or hit[1] != version:
            opts = _pool_options(pool, occupancy, keep, ignore_capacity, per)
            if version >= 0:
                memo[key] = (pool, version, opts, loads_version, reordered)
        elif load_of is not None and (loads_version is None or hit[3] != loads_version) and any(
                o.members for o in hit[2]):
            opts = hit[2]
            loaded = [o if o.loads == (ls := per.loads(o.members)) else replace(o, loads=ls) for o in opts]
            if any(a is not b for a, b in zip(loaded, opts)):
                opts = loaded
            memo[key] = (pool, version, opts, loads_version, reordered)
        else:
            opts = hit[2]
        out += opts
    return out


def _per_placement(memo: dict, load_of: Callable[[Placement], float] | None,
                   loads_version: Hashable | None) -> _PerPlacement:
    """The occupancy's table of what each placement reads, for this ``load_of`` at this ``loads_version`` (a new
    one when either moves; loads read afresh on every call without a version)."""
    per = memo.get(_PerPlacement)
    if per is None or per.load_of != load_of or per.loads_version != loads_version or (
            load_of is not None and loads_version is None):
        per = memo[_PerPlacement] = _PerPlacement(load_of, loads_version)
    return per


def _pool_options(pool: Pool, occupancy: Occupancy, keep: int | None, ignore_capacity: bool,
                  per: _PerPlacement) -> list[PlacementOption]:
    name, cap, count = pool.name, pool.slots_per_device, pool.count
    mem = pool.accelerator.memory_gb
    if not occupancy.occupied(name) and keep in (None, 0):  # the common case on a quiet cluster
        return [PlacementOption(pool, 0, (), mem, cap - 1, count * cap - 1)]
    fullest = occupancy.fullest_free(name, count, cap)
    pool_free = count * cap - occupancy.used(name, count)
    empty = occupancy.first_empty(name, count)
    empty_free = empty if cap > 0 else None  # a pool without slots has no free device, empty or not
    shared = () if fullest is None else (fullest,)
    if empty_free is None and not shared:
        if not ignore_capacity:
            return []
        i = empty if empty is not None else occupancy.least_loaded(name, count)
        ms = occupancy.members(name, i)
        used, loads = per.need_and_loads(ms)
        return [PlacementOption(pool, i, ms, mem - used, 0, 0, loads, per)]
    chosen = [*([] if empty_free is None else [empty_free]), *shared]
    if keep is not None and keep not in chosen and occupancy.count(name, keep) < cap:
        chosen.append(keep)
    out = []
    for i in chosen:
        ms = occupancy.members(name, i)
        used, loads = per.need_and_loads(ms)
        out.append(PlacementOption(pool, i, ms, mem - used, cap - len(ms) - 1, pool_free - 1, loads, per))
    return out


class _PerPlacement:
    """Each placement's memory need, and its load while ``loads_version`` holds, read once per placement object:
    a pool whose placements changed has its options built again, mostly of the same placements (placements are
    frozen, so the same object needs the same memory and, until the version moves, keeps the same load)."""

    def __init__(self, load_of: Callable[[Placement], float] | None, loads_version: Hashable) -> None:
        self.load_of, self.loads_version = load_of, loads_version
        self._seen: dict[int, tuple[Placement, float, float | None]] = {}  # id -> (p, need, load); holds p
        self._co: dict[int, tuple[Placement, float, CoRunner]] = {}  # id -> (p, load, its co-runner); holds p

    def _of(self, p: Placement) -> tuple[Placement, float, float | None]:
        hit = self._seen.get(id(p))
        if hit is None or hit[0] is not p:
            c = p.candidate
            load = None if self.load_of is None else self.load_of(p)
            hit = put_bounded(self._seen, id(p), (p, memory_need_gb(c.variant, c.concurrency), load), MAX_MEMO * 16)
        return hit

    def need_and_loads(self, placements: Sequence[Placement]) -> tuple[float, tuple[float, ...]]:
        """The placements' summed memory need (GB) and ``loads(placements)``, each placement read once."""
        seen = [self._of(p) for p in placements]
        return sum([s[1] for s in seen]), (() if self.load_of is None else tuple([s[2] for s in seen]))

    def loads(self, placements: Sequence[Placement]) -> tuple[float, ...]:
        return self.need_and_loads(placements)[1]

    def co_runner(self, p: Placement, load: float) -> CoRunner:
        """``co_runner_of(p, load)``, made once per placement object and load (co-runners are frozen)."""
        hit = self._co.get(id(p))
        if hit is None or hit[0] is not p or hit[1] != load:
            hit = put_bounded(self._co, id(p), (p, load, co_runner_of(p, load)), MAX_MEMO * 16)
        return hit[2]
