"""The types every part shares: the real path (Prefect + worker) and the simulator pass exactly these.

    JobSpec ──► Tuner.recommend(job, ClusterState) ──► Decision(candidate, group, explanation)
    Measurement (what really happened for one Decision) ──► Tuner.observe(...)

Units: latency in milliseconds, energy in joules, accuracy as a fraction in [0, 1], power in watts.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Precision = Literal["fp32", "fp16", "int8"]
JobKind = Literal["batch", "streaming"]
Objective = Literal["energy", "completion_time", "cost"]
DecisionSource = Literal["model", "prior", "explore", "fallback", "policy"]
EnergySource = Literal["measured", "estimated", "simulated"]


def new_id() -> str:
    return uuid.uuid4().hex


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Accelerator(_Frozen):
    """One accelerator type (a GPU model, or a CPU socket share for local pools)."""

    name: str = Field(min_length=1, description="e.g. cpu, t4, v100, a100, h100, l4")
    memory_gb: float = Field(gt=0)
    idle_w: float = Field(ge=0)
    max_w: float = Field(gt=0)
    cost_per_hour: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _power_order(self) -> Accelerator:
        if self.idle_w > self.max_w:
            raise ValueError(f"accelerator {self.name}: idle_w ({self.idle_w}) exceeds max_w ({self.max_w})")
        return self


class Pool(_Frozen):
    """A homogeneous group of devices; the unit the tuner chooses between."""

    name: str = Field(min_length=1)
    accelerator: Accelerator
    count: int = Field(ge=1, description="devices in the pool")
    slots_per_device: int = Field(default=4, ge=1, description="max jobs co-running on one device")
    cpu_set: tuple[int, ...] | None = Field(default=None, description="CPU cores (local CPU pools)")
    device_ids: tuple[str, ...] = Field(default=(), description="GPU UUIDs (Docker launcher)")
    engine: str | None = Field(
        default=None,
        pattern=r"^(unix|tcp|ssh)://[^\s]{1,250}$",
        description="Docker engine of this pool's host (Docker launcher); default: DOCKER_HOST",
    )


class Variant(_Frozen):
    """One servable model variant: family × size × precision, with its measured accuracy."""

    family: str = Field(min_length=1)
    name: str = Field(min_length=1, description="unique id, e.g. cnn-m-int8")
    size: str = Field(min_length=1, description="size label within the family, e.g. s/m/l or resnet50")
    precision: Precision = "fp32"
    accuracy: float = Field(ge=0, le=1)
    params: int = Field(default=0, ge=0)
    bytes: int = Field(default=0, ge=0)
    path: str | None = None


class CoRunner(_Frozen):
    """What the tuner knows about another job sharing the same device."""

    job_id: str
    family: str
    variant: str
    size: str
    precision: Precision = "fp32"
    batch_size: int = Field(default=1, ge=1)
    load: float = Field(default=1.0, ge=0, description="share of its device time the co-runner keeps busy")


class Candidate(_Frozen):
    """One configuration point: where and how a job would run."""

    pool: str
    accelerator: str
    variant: Variant
    batch_size: int = Field(ge=1)
    concurrency: int = Field(default=1, ge=1)
    co_runners: tuple[CoRunner, ...] = ()

    @property
    def key(self) -> str:
        """Stable identity (co-runners excluded): pool/variant/batch/concurrency."""
        return f"{self.pool}/{self.variant.name}/b{self.batch_size}/c{self.concurrency}"


class JobSpec(_Frozen):
    """An inference job as a user submits it."""

    job_id: str = Field(default_factory=new_id, min_length=1)
    kind: JobKind = "batch"
    family: str = Field(min_length=1)
    slo_ms: float = Field(gt=0, description="p99 latency bound: per request (streaming) or per batch (batch)")
    accuracy_floor: float = Field(default=0.0, ge=0, le=1)
    objective: Objective = "energy"
    arrival_rate_rps: float = Field(default=0.0, ge=0, description="expected request rate (streaming)")
    items: int = Field(default=0, ge=0, description="items to process (batch)")
    deadline_s: float | None = Field(default=None, gt=0)


class Placement(_Frozen):
    """A job currently running on one device of a pool."""

    job_id: str
    pool: str
    device: int = Field(ge=0)
    candidate: Candidate
    slo_ms: float = Field(gt=0)
    arrival_rate_rps: float = Field(default=0.0, ge=0)


class ClusterState(BaseModel):
    """The pools and what runs on them now."""

    model_config = ConfigDict(extra="forbid")

    pools: list[Pool]
    placements: list[Placement] = []

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(f"unknown pool {name!r}; known: {', '.join(p.name for p in self.pools)}")

    def jobs_on(self, pool: str, device: int | None = None) -> list[Placement]:
        return [pl for pl in self.placements if pl.pool == pool and (device is None or pl.device == device)]

    def free_slots(self, pool: str) -> int:
        p = self.pool(pool)
        return p.count * p.slots_per_device - len(self.jobs_on(pool))


class Prediction(_Frozen):
    latency_p99_ms: float = Field(ge=0, description="p99 latency of one batch")
    energy_j_per_item: float = Field(ge=0)
    throughput_items_per_s: float = Field(ge=0)
    margin_ms: float = Field(default=0.0, ge=0, description="uncertainty added to latency before the SLO check")


class Alternative(_Frozen):
    """A runner-up candidate and why it lost."""

    candidate_key: str
    prediction: Prediction
    reason: str


class ColocationGroup(_Frozen):
    """Jobs allowed to share one device, with each member's predicted slowdown (1.0 = none)."""

    group_id: str = Field(default_factory=new_id)
    pool: str
    device: int = Field(ge=0)
    members: tuple[str, ...] = Field(min_length=1, description="job ids")
    predicted_slowdown: dict[str, float] = {}


class Explanation(_Frozen):
    predicted: Prediction
    n_candidates: int = Field(ge=0)
    n_feasible: int = Field(ge=0)
    runner_ups: tuple[Alternative, ...] = ()
    note: str = ""


class Decision(_Frozen):
    """The tuner's answer for one job."""

    decision_id: str = Field(default_factory=new_id)
    job_id: str
    candidate: Candidate
    group: ColocationGroup | None = None
    source: DecisionSource = "model"
    feasible: bool = True
    explanation: Explanation

    @property
    def pool(self) -> str:
        return self.candidate.pool

    @property
    def variant(self) -> Variant:
        return self.candidate.variant


class Measurement(_Frozen):
    """What really happened when a Decision ran (or what the simulator says happened)."""

    measurement_id: str = Field(default_factory=new_id, description="idempotency key: observed at most once")
    job_id: str
    decision_id: str | None = None
    kind: JobKind = "batch"
    arrival_rate_rps: float = Field(default=0.0, ge=0)
    candidate: Candidate
    items: int = Field(ge=0)
    wall_s: float = Field(ge=0)
    latency_p50_ms: float = Field(ge=0)
    latency_p95_ms: float = Field(ge=0)
    latency_p99_ms: float = Field(ge=0, description="p99 latency of one batch")
    throughput_items_per_s: float = Field(ge=0)
    energy_j_per_item: float = Field(ge=0)
    energy_source: EnergySource
    accuracy: float | None = Field(default=None, ge=0, le=1)
    gpu_util: float | None = Field(default=None, ge=0, le=1)
    request_latency_p99_ms: float | None = Field(
        default=None, ge=0, description="streaming: p99 end-to-end request latency (queueing + batch fill + batch)")
    queueing_delay_ms: float | None = Field(
        default=None, ge=0, description="streaming: mean wait of a request before its batch starts")
    simulated: bool = False
    timestamp: float = Field(default_factory=time.time)
