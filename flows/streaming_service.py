"""One model of a streaming service as the control loop keeps it: its parameters, job, decisions, measurements and
MLflow run (how it is served is the environment's `oltunes.launchers.serving.Serving`); and how the service
announces its address once it serves (`announce`).

The streaming flow holds one `ModelRun` per family it serves and runs their control steps side by side; each
model is re-tuned with the others' placements in the cluster state, so the tuner's co-running groups apply.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from oltunes.config import get_settings
from oltunes.launchers.service_records import ServiceRecord, write_record
from oltunes.tracking import ServiceRun
from oltunes.tracking import conventions as cv
from oltunes.types import ClusterState, Decision, Id, JobSpec, Measurement, Placement
from tasks import serving as serving_tasks
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


async def announce(service_id: str, url: str, runs: list[ModelRun], launcher: str, log: Any) -> ServiceRecord:
    """The service serves at ``url``: say so in the log, in a Prefect artifact (``service-<id>``), as a tag on each
    model's MLflow run, and in the record `oltunes services` lists (removed when the service stops)."""
    from prefect.runtime import flow_run

    rec = ServiceRecord(service_id=service_id, url=url, models=[m.params.family for m in runs], launcher=launcher,
                        flow_run_id=flow_run.id)  # fmt: skip
    write_record(get_settings().home, rec)
    for m in runs:
        await asyncio.to_thread(m.run.set_tags, {cv.TAG_SERVICE_URL: url})
    key = re.sub(r"[^a-z0-9-]+", "-", f"service-{service_id}".lower())[:100]
    await serving_tasks.publish_address(rec, key=key)
    infer = ", ".join(rec.endpoints[f"{f} infer"] for f in rec.models)
    log.info("service %s is serving at %s (Open Inference Protocol; infer: %s); `oltunes services` lists it",
             service_id, url, infer)  # fmt: skip
    return rec
