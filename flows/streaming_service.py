"""One model of a streaming service as the control loop keeps it: its parameters, job, decisions, measurements and
MLflow run (how it is served is the environment's `oltunes.launchers.serving.Serving`); how the service
announces its address once it serves (`announce`), and how a cancel ends it (`sigterm_stops`,
`cancel_logs_at_info`).

The streaming flow holds one `ModelRun` per family it serves and runs their control steps side by side; each
model is re-tuned with the others' placements in the cluster state, so the tuner's co-running groups apply.

Shadows (`apply_shadow`): with ``shadow_share`` > 0 every decision is asked for one trial (``JobSpec.trials``) and
the model shadows ``Decision.trials[0]``: a worker of that candidate on that device, under its own lease (job
``<job id>-shadow``), fed a share of the model's live requests by the gateway. Its placement is in the cluster
state of every later decision (a co-runner where it runs), and what was shadowed is tagged on the model's run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import threading
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from oltunes.allocator.holder import DecisionLeases, LeaseTimeout
from oltunes.config import get_settings
from oltunes.errors import OLTunesError
from oltunes.gateway.shadow import ShadowBudget
from oltunes.launchers.service_records import ServiceRecord, write_record
from oltunes.launchers.serving import Serving
from oltunes.tracking import ServiceRun
from oltunes.tracking import conventions as cv
from oltunes.types import ClusterState, ColocationGroup, Decision, Explanation, Id, JobSpec, Measurement, Placement
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
    shadow: Decision | None = None  # what its shadow runs now (its job is the shadow's own)
    shadowed: list[str] = field(default_factory=list)  # every shadow started: "<candidate key> on device <d>"
    shadow_measurements: list[Measurement] = field(default_factory=list)

    @property
    def decision(self) -> Decision:
        return self.decisions[-1]

    def placement(self) -> Placement:
        return placement(self.job, self.decision, self.params.slo_ms)

    def placements(self, share: float) -> list[Placement]:
        """Where it runs: its worker, and its shadow (a co-runner there, at the mirrored share of the rate)."""
        own = [self.placement()]
        if self.shadow is not None:
            rate = self.job.arrival_rate_rps * share
            own.append(placement(self.job.model_copy(update={"job_id": self.shadow.job_id, "arrival_rate_rps": rate}),
                                 self.shadow, self.params.slo_ms))  # fmt: skip
        return own


SHADOW_TAG = "oltunes.shadow"  # the model's run: what its shadow runs now ("none" once stopped)
SHADOW_LEASE_WAIT_S = 5.0  # a shadow waits this long for a slot at most, then is skipped: it is never worth queueing


def shadow_id(job_id: str) -> str:
    return f"{job_id[:120]}-shadow"


async def apply_shadow(serving: Serving, m: ModelRun, decision: Decision, leases: DecisionLeases, budget: ShadowBudget,
                       log: Any) -> None:  # fmt: skip
    """Shadow ``decision.trials[0]`` (the tuner's choice of what to learn next) from now on, or nothing when it
    suggests none; a shadow already running it is kept. Its device is leased apart (a shadow finding no free slot
    within `SHADOW_LEASE_WAIT_S` is skipped), a shadow that fails to start is logged and skipped: the service
    itself never waits for, or fails because of, a shadow."""
    trial = decision.trials[0] if decision.trials else None
    cur = m.shadow
    if trial is not None and cur is not None and cur.candidate.key == trial.candidate.key \
            and cur.group is not None and cur.group.device == trial.device:
        return
    if cur is not None:
        m.shadow = None
        await serving.shadow(m.index, None, budget)
        await leases.release(cur.job_id)
        await asyncio.to_thread(m.run.set_tags, {SHADOW_TAG: "none"})
    if trial is None:
        return
    sid = shadow_id(m.job.job_id)
    job = m.job.model_copy(update={"job_id": sid, "trials": 0, "arrival_rate_rps": m.job.arrival_rate_rps * budget.share})
    shadow = Decision(job_id=sid, candidate=trial.candidate, source="explore",
                      group=ColocationGroup(pool=trial.candidate.pool, device=trial.device, members=(sid,)),
                      explanation=Explanation(predicted=trial.predicted, n_candidates=1, n_feasible=1,
                                              note=f"shadow of {m.job.job_id}: expected improvement {trial.value:.4g}"))  # fmt: skip
    what = f"{trial.candidate.key} on device {trial.device}"
    try:
        if await leases.apply(job, shadow) is None:
            return
    except LeaseTimeout:
        log.info("%s: no free slot for shadow %s; not shadowed", m.params.family, what)
        return
    try:
        how = await serving.shadow(m.index, shadow, budget)
    except (OLTunesError, KeyError) as e:  # a worker that never got healthy, a pool this service does not have
        log.warning("%s: shadow %s did not start (%s); not shadowed", m.params.family, what, e)
        await leases.release(sid)
        return
    m.shadow = shadow
    m.shadowed.append(what)
    await asyncio.to_thread(m.run.set_tags, {SHADOW_TAG: what})
    log.info("%s step %d: %s", m.params.family, m.steps, how)


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


def shadow_metrics(shadow: Measurement | None) -> dict[str, float]:
    """The shadow's interval as step metrics of the model's run (none when it measured nothing)."""
    if shadow is None:
        return {}
    return {"shadow_latency_p99_ms": shadow.latency_p99_ms, "shadow_throughput_items_per_s": shadow.throughput_items_per_s,
            "shadow_energy_j_per_item": shadow.energy_j_per_item, "shadow_offered_rps": shadow.arrival_rate_rps,
            "shadow_request_latency_p99_ms": shadow.request_latency_p99_ms or 0.0}  # fmt: skip


@contextlib.contextmanager
def sigterm_stops(stop: asyncio.Event, terminated: asyncio.Event, loop: asyncio.AbstractEventLoop):
    """SIGTERM (how a cancelled deployment run is ended) stops the service cleanly instead of killing it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        loop.add_signal_handler(signal.SIGTERM, lambda: (terminated.set(), stop.set()))
    except (NotImplementedError, RuntimeError):
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


class _CancelEndsAtInfo(logging.Filter):
    """Prefect logs a run's final state at ERROR unless it is Completed; a service stopped by a cancel ends
    Cancelling/Cancelled as it should, so that one line of this run is logged at INFO."""

    def __init__(self, flow_run_id: str | None) -> None:
        super().__init__()
        self.flow_run_id = flow_run_id

    def filter(self, record: logging.LogRecord) -> bool:
        if (self.flow_run_id and getattr(record, "flow_run_id", None) == self.flow_run_id
                and record.getMessage().startswith("Finished in state Cancel")):  # fmt: skip
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def cancel_logs_at_info() -> None:
    from prefect.runtime import flow_run

    logging.getLogger("prefect.flow_runs").addFilter(_CancelEndsAtInfo(flow_run.id))
