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
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from oltunes.occupancy import Occupancy
from oltunes.types import CoRunner, Placement, Variant

__all__ = [
    "BATCH_DELAY_MS",
    "CoRunnerKey",
    "PlacementOption",
    "co_runner_of",
    "fill_wait_ms",
    "memory_need_gb",
    "model_bytes",
    "placement_options",
    "queue_wait_ms",
    "request_waits",
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
    return np.minimum(1000.0 * (batch - 1.0) / rate, delay_ms)


def queue_wait_ms(batch_latency_ms: Any, rate: float, throughput: Any, concurrency: Any, burstiness: float) -> Any:
    """Approximate p99 queueing delay of a streaming request (Kingman's G/G/1 mean wait with an exponential
    tail): ``lat/c * rho/(1-rho) * (1 + burstiness)/2 * ln(100)``, ``rho = rate / throughput`` (capped below
    1). ``burstiness`` is the squared coefficient of variation of inter-arrival times (1 = Poisson); batch
    latencies in measurements exclude queueing, so this is the only place it enters the SLO check."""
    rho = np.minimum(rate / throughput, 0.999)
    return batch_latency_ms / concurrency * rho / (1.0 - rho) * (1.0 + burstiness) / 2.0 * math.log(100.0)


def request_waits(batch_lat: np.ndarray, thr: np.ndarray, fill: np.ndarray, conc: np.ndarray, rate: float,
                  queueing: bool, burst: float, ln100: float = math.log(100.0)) -> tuple[np.ndarray, Any, np.ndarray]:
    """A streaming request's waits over a (P, V, B, C) grid: (batch latency + batch-fill wait ``fill[b]``, Kingman's
    queueing wait (``queue_wait_ms`` with burstiness ``burst - 1``; 0 without ``queueing``), their sum).
    ``ln100`` is accepted for the callers that pass it (it is ln 100)."""
    req = batch_lat + np.asarray(fill)[:, None]
    if not queueing:
        return req, 0.0, req
    queue = queue_wait_ms(batch_lat, rate, thr, np.asarray(conc), burst - 1.0)
    return req, queue, req + queue


def co_runner_of(p: Placement, load: float = 1.0) -> CoRunner:
    """How a placed job appears to a job sharing its device (default load 1: assume it keeps the device busy;
    the tuner passes a measured or estimated load when it has one)."""
    v = p.candidate.variant
    return CoRunner(job_id=p.job_id, family=v.family, variant=v.name, size=v.size, precision=v.precision,
                    batch_size=p.candidate.batch_size, load=load)


class CoRunnerKey(NamedTuple):
    """The three co-runner fields the feature encoding reads (family, size, load)."""

    family: str
    size: str
    load: float = 1.0


@dataclass(frozen=True)
class PlacementOption:
    """One device of a pool a job could join, with who is on it and what is left there."""

    pool: Any  # oltunes.types.Pool
    device: int
    members: tuple[Placement, ...]  # jobs already on that device
    free_memory_gb: float
    free_slots_after: int  # on the device, once the new job is placed
    pool_free_slots_after: int
    loads: tuple[float, ...] = ()  # busy share of the device each member keeps (empty: 1.0 each)

    @cached_property
    def member_loads(self) -> tuple[float, ...]:
        """Each member's busy share: ``loads``, and 1.0 for the members past the loads given."""
        return (*self.loads, *(1.0,) * (len(self.members) - len(self.loads)))

    @cached_property
    def co_features(self) -> tuple[CoRunnerKey, ...]:
        """The members as the encoding sees them (family, size, load)."""
        return tuple(CoRunnerKey(m.candidate.variant.family, m.candidate.variant.size, load)
                     for m, load in zip(self.members, self.member_loads))

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
        """The members as ``CoRunner`` objects."""
        return tuple(co_runner_of(m, load) for m, load in zip(self.members, self.member_loads))

    @property
    def shared(self) -> bool:
        return bool(self.members)


def placement_options(occupancy: Occupancy, *, ignore_capacity: bool = False,
                      include: tuple[str, int] | None = None,
                      load_of: Callable[[Placement], float] | None = None) -> list[PlacementOption]:
    """Options per pool: the first empty device, and the fullest device with a free slot.

    ``include`` = (pool, device) adds that device too when it has a free slot (a running job's current device, so
    that staying is one of the candidates). With ``ignore_capacity`` a pool without a free slot yields its
    least-loaded device (used only to name a best-available candidate when nothing fits). ``load_of`` gives each
    placed job's busy share of its device (default: 1.0, assume it keeps it busy). Empty devices of a pool are
    interchangeable, so they are one option, represented by the lowest index.
    """
    out: list[PlacementOption] = []
    for pool in occupancy.pools:
        name, cap = pool.name, pool.slots_per_device
        counts = occupancy.occupancy(name)
        devices = []
        empty = occupancy.empty_device(name)
        if empty is not None and cap > 0:
            devices.append(empty)
        fullest = occupancy.most_loaded_device(name)
        if fullest is not None:
            devices.append(fullest)
        if include is not None and include[0] == name and 0 <= include[1] < pool.count:
            keep = include[1]
            if keep not in devices and counts[keep] < cap:
                devices.append(keep)
        pool_free = pool.count * cap - int(counts.sum())
        if not devices:
            least = occupancy.least_loaded_device(name, with_free_slot=False)
            if ignore_capacity and least is not None:
                out.append(_option(occupancy, pool, least, 0, 0, load_of))
            continue
        for d in devices:
            out.append(_option(occupancy, pool, d, cap - int(counts[d]) - 1, pool_free - 1, load_of))
    return out


def _option(occupancy: Occupancy, pool: Any, device: int, free_slots_after: int, pool_free_slots_after: int,
            load_of: Callable[[Placement], float] | None) -> PlacementOption:
    members = tuple(occupancy.members(pool.name, device))
    used = sum(memory_need_gb(m.candidate.variant, m.candidate.concurrency) for m in members)
    loads = () if load_of is None else tuple(load_of(m) for m in members)
    return PlacementOption(pool, device, members, pool.accelerator.memory_gb - used, free_slots_after,
                           pool_free_slots_after, loads)
