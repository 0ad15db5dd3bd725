"""Queue policies by name: which waiting batch job gets capacity next. Lower score = earlier; ties go oldest first.

The simulator's environment and the product call the same objects: :func:`release_order` is the function the
tuning service calls for jobs waiting on a lease (it builds the same :class:`QueueView` the simulator builds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from oltunes.errors import ConfigError, invalid
from oltunes.registry import Registered
from oltunes.rltune.cluster import ClusterShape, NodePool, NodeState
from oltunes.rltune.features import QueueView

MIN_RUNTIME_S = 10.0  # bounded slowdown's floor, also F1's


class QueuePolicy(Registered, root=True):
    """Scores the visible queue; ``uses_runtime`` marks policies that read (oracle) run times."""

    uses_runtime = False

    def scores(self, view: QueueView) -> np.ndarray:
        raise NotImplementedError

    def choose(self, view: QueueView) -> int:
        """Index (into the view) of the job to run next."""
        return int(np.lexsort((view.submit, self.scores(view)))[0])

    def order(self, view: QueueView) -> np.ndarray:
        return np.lexsort((view.submit, self.scores(view)))


class Fcfs(QueuePolicy, name="fcfs"):
    def scores(self, view: QueueView) -> np.ndarray:
        return view.submit.astype(float)


class Sjf(QueuePolicy, name="sjf"):
    """Shortest job first on the trace's real run times (an oracle, as in the paper); unknown runs last."""

    uses_runtime = True

    def scores(self, view: QueueView) -> np.ndarray:
        return np.nan_to_num(view.duration, nan=np.inf)


class F1(QueuePolicy, name="f1"):
    """F1 (Carastan-Santos & de Camargo, SC'17): log10(run time) x GPUs + 870 x log10(submit time)."""

    uses_runtime = True

    def scores(self, view: QueueView) -> np.ndarray:
        r = np.maximum(np.nan_to_num(view.duration, nan=86400.0), MIN_RUNTIME_S)
        s = np.maximum(view.submit - view.submit.min(), 0.0) + 1.0
        return np.log10(r) * view.gpus + 870.0 * np.log10(s)


class SlurmMultifactor(QueuePolicy, name="slurm"):
    """Slurm multifactor priority (defaults' shape): age (to 7 days) + fair share + job size (large first)."""

    W_AGE, W_FAIRSHARE, W_SIZE, MAX_AGE_S = 1000.0, 1000.0, 500.0, 7 * 86400.0

    def scores(self, view: QueueView) -> np.ndarray:
        age = np.clip((view.now - view.submit) / self.MAX_AGE_S, 0.0, 1.0)
        usage = np.array([view.group_usage.get(int(g), 0.0) for g in view.group])
        total = sum(view.group_usage.values())
        groups = max(len(set(view.group_usage) | set(map(int, view.group))), 1)
        fairshare = 2.0 ** (-usage / (total / groups)) if total > 0 else np.ones(len(view))
        size = view.gpus / max(int(view.state.pool_cap.max()), 1)
        return -(self.W_AGE * age + self.W_FAIRSHARE * fairshare + self.W_SIZE * size)


class GavelLike(QueuePolicy, name="gavel-like"):
    """Gavel's fairness objective as a queue order: the group with the least attained GPU time goes first."""

    def scores(self, view: QueueView) -> np.ndarray:
        return np.array([view.group_usage.get(int(g), 0.0) for g in view.group])


class RandomOrder(QueuePolicy, name="random"):
    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def scores(self, view: QueueView) -> np.ndarray:
        return self.rng.random(len(view))


class RLTune(QueuePolicy, name="rltune"):
    """The trained policy network (greedy: highest logit first). Reads the requested run time, as the paper's."""

    uses_runtime = True

    def __init__(self, weights: str | Path | None = None) -> None:
        from oltunes.rltune.net import load_policy

        if weights is None:
            raise ConfigError("queue policy 'rltune' needs weights= (a file written by `oltunes rltune train`)")
        self.net, self.meta = load_policy(Path(weights))

    def scores(self, view: QueueView) -> np.ndarray:
        return -self.net.logits_np(view.features)


# ----------------------------------------------------------------------------------------------- product hook
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


def release_order(policy: QueuePolicy, waiting: list[dict | WaitingJob], pools: list[dict | PoolCapacity],
                  now: float, group_usage: dict[int, float] | None = None) -> list[str]:
    """Job ids of `waiting` in the order `policy` would hand them capacity (the service's queue order)."""
    if len(waiting) > 10_000:
        raise ConfigError("waiting: at most 10000 jobs")
    try:
        jobs = [WaitingJob.model_validate(j) for j in waiting]
        caps = [PoolCapacity.model_validate(p) for p in pools]
    except ValidationError as e:
        raise invalid(e, "queue") from None
    if not jobs:
        return []
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
    return [jobs[i].job_id for i in policy.order(view)]
