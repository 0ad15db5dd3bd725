"""One model of a streaming service: its job, decision, workers (behind the gateway's route), client and MLflow run.

The streaming flow holds one `ServedModel` per family it serves and runs their control steps side by side; each
model is re-tuned with the others' placements in the cluster state, so the tuner's co-running groups apply.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from oltunes.gateway import Route
from oltunes.launchers import pool_cores
from oltunes.launchers.serve_metrics import interval_measurement
from oltunes.launchers.supervisor import ServeSupervisor
from oltunes.launchers.traffic import LoadGenerator
from oltunes.telemetry import Monitor
from oltunes.tracking import ServiceRun
from oltunes.tracking import conventions as cv
from oltunes.tuner.lease_holder import DecisionLeases
from oltunes.types import ClusterState, Decision, Id, JobSpec, Measurement, Placement
from tasks import serving, tuning


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
class ServedModel:
    params: ModelParams
    job: JobSpec
    route: Route
    supervisor: ServeSupervisor
    svc: ServiceRun
    gen: LoadGenerator | None = None
    decisions: list[Decision] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    monitor: Monitor | None = None
    steps: int = 0

    @property
    def decision(self) -> Decision:
        return self.supervisor.decision or self.decisions[-1]

    def placement(self) -> Placement:
        return placement(self.job, self.decision, self.params.slo_ms)

    def start_interval(self, watts_per_core: float) -> None:
        active = self.supervisor.active
        assert active is not None
        pool = active.spec.pool
        self.monitor = Monitor(pid=active.pid, cores=len(pool_cores(pool)), gpu_device_ids=pool.device_ids,
                               gpu=pool.accelerator.name != "cpu", watts_per_core=watts_per_core)  # fmt: skip
        self.monitor.start()

    async def step(self, policy: str, tuner: Any, tsettings: Any, cluster: ClusterState, others: list[Placement],
                   retune: bool, log: Any, leases: DecisionLeases) -> None:  # fmt: skip
        """Close the interval: measure, log, feed the learner; then re-tune and switch workers if it says so."""
        assert self.gen is not None and self.monitor is not None and self.supervisor.active is not None
        wm = await serving.read_worker_metrics(self.supervisor.active.url)
        client = self.gen.window()
        tele = self.monitor.stop(cpu_time_s=wm.get("cpu_time_s"))
        current = self.decision
        m = interval_measurement(self.job.job_id, current, wm, client, tele)
        if m is None:
            log.info("%s step %d: no request answered in this interval; nothing to learn", self.params.family, self.steps)
            return
        req_p99 = client.percentile(99)
        extra = {
            "request_latency_p50_ms": client.percentile(50) or 0.0, "request_latency_p99_ms": req_p99 or 0.0,
            cv.SLO_MET: float(req_p99 is not None and req_p99 <= self.params.slo_ms),
            "offered_rps": m.arrival_rate_rps, "served_rps": m.items / m.wall_s, "requests_ok": float(client.ok),
            "requests_failed": float(client.failed), "requests_shed": float(client.shed),
            "restarts": float(self.supervisor.restarts), "switches": float(len(self.supervisor.switches)),
            "batch_size_mean": float(wm.get("batch_size_mean") or 0.0),
        }  # fmt: skip
        await serving.log_step(self.svc, self.steps, m, self.params.slo_ms, policy, current, extra)
        await tuning.observe(tuner, m, tsettings)
        self.measurements.append(m)
        self.steps += 1
        if not retune:
            return
        now_job = self.job.model_copy(update={"arrival_rate_rps": max(m.arrival_rate_rps, 0.1)})
        here = placement(now_job, current, self.params.slo_ms)
        state = cluster.model_copy(update={"placements": [*cluster.placements, *others]})
        new = await tuning.recommend(tuner, now_job, state, here)
        if new.candidate.key != current.candidate.key and await leases.apply(now_job, new):  # None: refused
            rec = await self.supervisor.switch(new)
            self.decisions.append(new)
            log.info("%s step %d: switched %s -> %s (old worker drained: %s)", self.params.family, self.steps, rec.old, rec.new, rec.drained)


async def first_decisions(tuner: Any, models: list[ModelParams], jobs: list[JobSpec], cluster: ClusterState) -> list[Decision]:
    """Decide the models one after another, each seeing where the earlier ones were placed."""
    decisions: list[Decision] = []
    for mp, job in zip(models, jobs, strict=True):
        state = cluster.model_copy(update={"placements": [*cluster.placements, *(placement(j, d, m.slo_ms) for m, j, d in zip(models, jobs, decisions))]})
        decisions.append(await tuning.recommend(tuner, job, state))
    return decisions


async def gather_steps(models: list[ServedModel], **kw: Any) -> None:
    """Every model's step at once (one model's worker switch does not hold up the others' measurements)."""
    await asyncio.gather(*(m.step(others=[o.placement() for o in models if o is not m], **kw) for m in models))


def run_dir(workdir: Path, family: str, generation: int) -> Path:
    return workdir / family / f"gen-{generation}" / "_run"
