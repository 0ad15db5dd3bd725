"""One model of a streaming service as the control loop keeps it: its parameters, job, decisions, measurements and
MLflow run (how it is served is the environment's `oltunes.launchers.serving.Serving`).

The streaming flow holds one `ModelRun` per family it serves and runs their control steps side by side; each
model is re-tuned with the others' placements in the cluster state, so the tuner's co-running groups apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from oltunes.tracking import ServiceRun
from oltunes.types import ClusterState, Decision, Id, JobSpec, Measurement, Placement
from tasks import tuning


class ModelParams(BaseModel):
    """One family a streaming service serves (flow parameter ``models``)."""

    model_config = ConfigDict(extra="forbid")

    family: Id  # routed by name, a job id part and a folder name: the strict id pattern
    slo_ms: float = Field(gt=0, le=600_000, description="p99 latency bound per request")
    accuracy_floor: float = Field(default=0.0, ge=0, le=1)


def placement(job: JobSpec, d: Decision, slo_ms: float) -> Placement:
    return Placement(job_id=job.job_id, pool=d.pool, device=d.group.device if d.group else 0, candidate=d.candidate,
                     slo_ms=slo_ms, arrival_rate_rps=job.arrival_rate_rps)  # fmt: skip


@dataclass
class ModelRun:
    """Model ``index`` of the service (``Serving`` addresses it by that index)."""

    params: ModelParams
    job: JobSpec
    index: int
    run: ServiceRun
    decisions: list[Decision] = field(default_factory=list)  # every one applied, the first included
    measurements: list[Measurement] = field(default_factory=list)
    steps: int = 0

    @property
    def decision(self) -> Decision:
        return self.decisions[-1]

    def placement(self) -> Placement:
        return placement(self.job, self.decision, self.params.slo_ms)


async def first_decisions(tuner: object, models: list[ModelParams], jobs: list[JobSpec], cluster: ClusterState) -> list[Decision]:
    """Decide the models one after another, each seeing where the earlier ones were placed."""
    decisions: list[Decision] = []
    for mp, job in zip(models, jobs, strict=True):
        state = cluster.model_copy(update={"placements": [*cluster.placements, *(placement(j, d, m.slo_ms) for m, j, d in zip(models, jobs, decisions))]})
        decisions.append(await tuning.decide(tuner, job, state))
    return decisions
