"""The product's batch queue: jobs waiting for GPUs (a lease) in the tuning service, ordered by a queue policy.

The interface for the service's lease queue: build the policy once by name with
:func:`oltunes.rltune.policies.queue_policy` (``fcfs`` by default, ``rltune`` with a trained weights file), then
call, validated at the edge (pydantic; errors name the field, never echo input), :func:`release_order` (the order
the waiting jobs get capacity) or :func:`admit` (which of them start now, and on which nodes: in that order, every
job that fits, placed by the same mapper as the simulator's). The queue keeps its own state; these are pure.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from oltunes.errors import ConfigError, invalid
from oltunes.rltune.cluster import ClusterShape, NodePool, NodeState
from oltunes.rltune.features import QueueView
from oltunes.rltune.mapper import Mapper
from oltunes.rltune.policies import QueuePolicy

MAX_WAITING = 10_000
_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"


class WaitingJob(BaseModel):
    """A batch job waiting for GPUs (a lease) in the tuning service."""

    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(pattern=_ID)
    gpus: int = Field(ge=1, le=64)
    submitted_s: float = Field(ge=0, allow_inf_nan=False)
    expected_duration_s: float | None = Field(default=None, gt=0, le=1e8, allow_inf_nan=False)
    group: int = Field(default=0, ge=0, le=1_000_000)
    pools: list[str] | None = Field(default=None, max_length=64, description="allowed pools; None = any")


class PoolCapacity(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=_ID)
    gpus_per_node: int = Field(ge=1, le=64)
    free_per_node: list[int] = Field(min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _within(self) -> PoolCapacity:
        if any(f < 0 or f > self.gpus_per_node for f in self.free_per_node):
            raise ValueError("free_per_node: each entry must be between 0 and gpus_per_node")
        return self


def _view(waiting: list[dict | WaitingJob], pools: list[dict | PoolCapacity], now: float,
          group_usage: dict[int, float] | None) -> tuple[list[WaitingJob], QueueView | None]:
    if not math.isfinite(now):
        raise ConfigError("now: must be a finite number of seconds")
    if len(waiting) > MAX_WAITING:
        raise ConfigError(f"waiting: at most {MAX_WAITING} jobs")
    try:
        jobs = [WaitingJob.model_validate(j) for j in waiting]
        caps = [PoolCapacity.model_validate(p) for p in pools]
    except ValidationError as e:
        raise invalid(e, "queue") from None
    if not jobs:
        return [], None
    if not caps:
        raise ConfigError("pools: at least one pool")
    shape = ClusterShape("service", tuple(NodePool(p.name, len(p.free_per_node), p.gpus_per_node) for p in caps))
    state = NodeState(shape)
    state.free = np.concatenate([np.asarray(p.free_per_node) for p in caps])
    allowed = np.ones((len(jobs), len(caps)), bool)
    for i, j in enumerate(jobs):
        if j.pools is not None:
            allowed[i] = [p.name in j.pools for p in caps]
    view = QueueView(
        now=float(now),
        submit=np.array([j.submitted_s for j in jobs]),
        gpus=np.array([j.gpus for j in jobs]),
        duration=np.array([np.nan if j.expected_duration_s is None else j.expected_duration_s for j in jobs]),
        group=np.array([j.group for j in jobs]),
        allowed=allowed,
        state=state,
        group_usage=dict(group_usage or {}),
    )
    return jobs, view


def release_order(policy: QueuePolicy, waiting: list[dict | WaitingJob], pools: list[dict | PoolCapacity],
                  now: float, group_usage: dict[int, float] | None = None) -> list[str]:
    """Job ids of `waiting` in the order `policy` hands them capacity (the service's queue order)."""
    jobs, view = _view(waiting, pools, now, group_usage)
    return [] if view is None else [jobs[i].job_id for i in policy.order(view)]


class PolicyQueue:
    """A `QueuePolicy` as the lease book's queue order (`oltunes.allocator.queue.QueueOrder`)."""

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy, self.name, self.uses_runtime = policy, policy.name, policy.uses_runtime

    def release_order(self, waiting: list[dict | WaitingJob], pools: list[dict | PoolCapacity],
                      now: float) -> list[str]:
        return release_order(self.policy, waiting, pools, now)


def queue_order(policy: str | QueuePolicy = "fcfs") -> PolicyQueue:
    """The lease book's queue order for a queue policy (by name: an unknown one fails, listing the known ones)."""
    return PolicyQueue(QueuePolicy.make(policy) if isinstance(policy, str) else policy)


def admit(policy: QueuePolicy, waiting: list[dict | WaitingJob], pools: list[dict | PoolCapacity], now: float,
          group_usage: dict[int, float] | None = None, mapper: Mapper | None = None
          ) -> list[tuple[str, str, dict[int, int]]]:
    """The jobs that start now: (job id, pool name, {node index in the pool: GPUs}), in the policy's order.

    Walks the policy's order once and places every job that still fits (later jobs may use capacity an earlier,
    bigger one could not); the service turns each into a lease.
    """
    jobs, view = _view(waiting, pools, now, group_usage)
    if view is None:
        return []
    mapper = mapper or Mapper.make("milp")
    state, out = view.state, []
    first_node = np.concatenate([[0], np.cumsum([p.nodes for p in state.shape.pools])])
    for i in policy.order(view):
        alloc = mapper.place(state, jobs[i].gpus, view.allowed[i])
        if alloc is None:
            continue
        state.take(alloc)
        k = int(state.node_pool[next(iter(alloc))])
        out.append((jobs[i].job_id, state.shape.pools[k].name, {n - int(first_node[k]): g for n, g in alloc.items()}))
    return out
