"""Streaming inference flow: a long-running online service whose configuration the tuner keeps adjusting.

It opens one stable Open Inference Protocol gateway (``gateway_host:gateway_port``; loopback by default, a token
required elsewhere) and, for every model it serves (``family``, or several in ``models``), starts a serving
worker where the tuner says and points the gateway's route for that model at it. Clients, the replayed trace's
load generator among them, only ever talk to the gateway. Every control interval, per model: read the worker's
window and telemetry, log one step to the model's MLflow run, feed the learner, re-consult the tuner (with the
other models' placements in the cluster state) and, when the decision changes, switch workers behind the gateway
(new worker up, route moved, old one drained, stopped). A worker that dies is restarted; the gateway re-sends what
it had accepted. The flow stops after `duration_s` or on cancellation, always stopping its workers and gateway and
closing its MLflow runs.

There is one control loop (`run_service`) for every environment: it talks to the environment's `Serving` (start,
switch, measure_interval, drain). With ``launcher="simulated"`` that is the simulator's event engine (queueing
included) in simulated time, with ``local`` / ``docker`` real workers behind the gateway in wall time. Every
decision takes effect in `apply_decision`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows.common import (bind_ephemeral_api, check_family, make_tracker, make_tuner, ran_policy, run_id, run_name,
                          validate)
from flows.streaming_service import (SHADOW_LEASE_WAIT_S, ModelParams, ModelRun, announce, apply_shadow,
                                     cancel_logs_at_info, first_decisions, placement, shadow_metrics, sigterm_stops)
from oltunes.config import get_settings
from oltunes.errors import ConfigError, DataError
from oltunes.gateway.shadow import DEFAULT_SHARE, MAX_SHARE, ShadowBudget
from oltunes.launchers.environment import Environment
from oltunes.launchers.service_records import remove_record
from oltunes.launchers.serving import Interval, ServiceSetup, Serving, ServingReport
from oltunes.launchers.traffic import BUNDLED_TRACE, load_arrivals
from oltunes.tracking import conventions as cv
from oltunes.allocator.holder import DecisionLeases, lease_decisions, leases_for
from oltunes.types import ClusterState, Decision, Id, JobSpec, Measurement, Placement
from tasks import serving as serving_tasks
from tasks import tracking as track
from tasks import tuning

DEFAULT_TRACE = "proteus/twitter/medium-normal_load_1x/resnet.csv.gz"  # under settings.shared_data
DEFAULT_EXPECTED_RPS = 10.0  # without replay: the rate the first decision plans for, unless told


class StreamParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[ModelParams] = Field(min_length=1, max_length=8)
    trace: str | None = None
    speedup: float = Field(gt=0)
    duration_s: float = Field(gt=0)
    control_interval_s: float = Field(gt=0)
    max_in_flight: int = Field(ge=1)
    max_delay_ms: float = Field(ge=0)
    service_id: Id | None = None  # a job id, an MLflow tag and a folder name: the strict id pattern
    launcher: str
    inventory: str | None = None
    policy: str
    advisory: bool = False
    gateway_host: str = Field(min_length=1, max_length=253)
    gateway_port: int = Field(ge=0, le=65535)
    replay: bool
    expected_rps: float | None = Field(default=None, gt=0, le=1e6)
    shadow_share: float = Field(default=DEFAULT_SHARE, ge=0, le=MAX_SHARE)
    shadow_max_rps: float = Field(default=20.0, gt=0, le=1e6)

    def shadow_budget(self) -> ShadowBudget | None:
        return ShadowBudget(share=self.shadow_share, max_rps=self.shadow_max_rps) if self.shadow_share > 0 else None


class StreamOutcome(BaseModel):
    service_id: str
    decisions: list[Decision]
    measurements: list[Measurement]
    steps: int
    restarts: int
    switches: int
    requests: dict[str, int]
    failures: dict[str, int]
    request_latency: dict[str, float] = Field(description="client-side p50/p95/p99 over the session, ms")
    trace: str
    status: str
    gateway_url: str | None = None
    gateway_failures: dict[str, int] = Field(default={}, description="requests the gateway gave up on, by reason")
    per_model: dict[str, dict[str, Any]] = {}
    shadow_measurements: list[Measurement] = Field(default=[], description="observed with purpose='shadow'")


def resolve_trace(trace: str | None) -> Path:
    """A path as given, else relative to ``settings.shared_data``; default: a Proteus Twitter stream, or the
    bundled Azure slice when the shared data folder is absent."""
    shared = get_settings().shared_data
    if trace is None:
        default = shared / DEFAULT_TRACE
        return default if default.is_file() else BUNDLED_TRACE
    for candidate in (Path(trace).expanduser(), shared / trace):
        if candidate.is_file():
            return candidate.resolve()
    raise DataError(f"parameter 'trace': {trace} not found (as a path, or under {shared})")


@dataclass
class Service:
    """What the control loop needs: the validated parameters, the models it serves, the cluster, the tuner."""

    p: StreamParams
    sid: str
    models: list[ModelRun]
    cluster: ClusterState
    tuner: Any
    tsettings: Any
    log: Any
    leases: DecisionLeases  # every decision is leased before it takes effect (`apply_decision`)
    shadow_leases: DecisionLeases | None = None  # the shadows' own (`apply_shadow`): a short wait, then skipped

    async def shadow(self, serving: Serving, m: ModelRun, decision: Decision) -> None:
        budget = self.p.shadow_budget()
        if budget is not None and self.shadow_leases is not None and serving.supports_shadow:
            await apply_shadow(serving, m, decision, self.shadow_leases, budget, self.log)

    def placements(self, but: ModelRun | None = None) -> list[Placement]:
        """Every model's worker but `but`'s, and every shadow (`but`'s too: a co-runner where it runs)."""
        share = self.p.shadow_share
        return [pl for o in self.models for pl in o.placements(share) if o is not but or pl.job_id != o.job.job_id]


async def run_service(svc: Service, serving: Serving, first: list[Decision]) -> tuple[str, ServingReport]:
    """The control loop, the same for every environment: apply the first decisions, then every interval measure
    each model, log the step, feed the learner, re-consult the tuner and apply what changed; always drain."""
    stop, terminated = asyncio.Event(), asyncio.Event()
    status = "FINISHED"
    try:
        await serving.start()
        await asyncio.gather(*(apply_decision(svc, serving, m, d) for m, d in zip(svc.models, first, strict=True)))
        if serving.url is None:
            svc.log.info("service %s: serving %s in simulated time", svc.sid, ", ".join(m.params.family for m in svc.models))
        else:
            await announce(svc.sid, serving.url, svc.models, svc.p.launcher, svc.log)
        with sigterm_stops(stop, terminated, asyncio.get_running_loop()):
            while not serving.finished:
                intervals = await serving.measure_interval(stop)
                if terminated.is_set():  # cancelled: the run may start no more task runs; the partial interval is dropped
                    break
                retune = not serving.finished
                # side by side: one model's worker switch does not hold up the others' measurements
                await asyncio.gather(*(control_step(svc, serving, m, iv, retune) for m, iv in zip(svc.models, intervals, strict=True)))
        if terminated.is_set():
            status = "KILLED"
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "KILLED"
        raise
    except BaseException:
        status = "FAILED"
        raise
    finally:
        if status == "KILLED":
            svc.log.info("service %s: cancelled; stopping its workers and gateway", svc.sid)
            cancel_logs_at_info()
        report = await serving.drain()
        remove_record(get_settings().home, svc.sid)
        for m in svc.models:
            if status == "KILLED":
                m.run.end(status)  # no new task runs once the flow is being cancelled
            else:
                await serving_tasks.end_service(m.run, status)
    return status, report


async def control_step(svc: Service, serving: Serving, m: ModelRun, interval: Interval | None, retune: bool) -> None:
    """Close one model's interval: log it, feed the learner; then re-tune (with the other models' placements in the
    cluster state, so co-running groups apply) and apply a changed decision."""
    if interval is None:
        svc.log.info("%s step %d: no request answered in this interval; nothing to learn", m.params.family, m.steps)
        return
    measured, current, shadow = interval.measurement, m.decision, interval.shadow
    extra = {**interval.metrics, "switches": float(len(m.decisions) - 1), **shadow_metrics(shadow)}
    ran = ran_policy(svc.p.policy, svc.p.advisory)
    await serving_tasks.log_step(m.run, m.steps, measured, m.params.slo_ms, ran, current, extra)
    await tuning.observe(svc.tuner, measured)
    m.measurements.append(measured)
    if shadow is not None:  # what the shadow measured over the same interval, tagged purpose='shadow'
        await tuning.observe(svc.tuner, shadow)
        m.shadow_measurements.append(shadow)
    m.steps += 1
    if not retune:
        return
    now_job = m.job.model_copy(update={"arrival_rate_rps": max(measured.arrival_rate_rps, 0.1)})
    state = svc.cluster.model_copy(update={"placements": [*svc.cluster.placements, *svc.placements(but=m)]})
    new = await tuning.decide(svc.tuner, now_job, state, placement(now_job, current, m.params.slo_ms))
    if new.candidate.key != current.candidate.key:
        await apply_decision(svc, serving, m, new, now_job)
    # shadows start here, never before the first interval: the service and its supervision are up by then
    await svc.shadow(serving, m, new)


async def apply_decision(svc: Service, serving: Serving, m: ModelRun, decision: Decision,
                         job: JobSpec | None = None) -> None:
    """The one place a decision takes effect (the first one of each model too): its device is leased from the
    tuning service (the lease moves with a re-tune; `job` carries the rate measured since), then the serving side
    moves to it. A move the service refuses (the target is full) keeps the current decision."""
    if await svc.leases.apply(job or m.job, decision) is None:
        return
    how = await serving.switch(m.index, decision)
    m.decisions.append(decision)
    svc.log.info("%s step %d: %s", m.params.family, m.steps, how)


@flow(name="streaming-inference", flow_run_name=run_name("streaming"), validate_parameters=True)
async def streaming_inference(
    family: str | None = None,
    slo_ms: float = 100.0,
    accuracy_floor: float = 0.0,
    trace: str | None = None,
    speedup: float = 4.0,
    duration_s: float = 60.0,
    control_interval_s: float = 10.0,
    max_in_flight: int = 128,
    max_delay_ms: float = 2.0,
    service_id: str | None = None,
    launcher: str = "local",
    inventory: str | None = None,
    policy: str = "oltunes",
    advisory: bool = False,
    models: list[dict[str, Any]] | None = None,
    gateway_host: str = "127.0.0.1",
    gateway_port: int = 0,
    replay: bool = True,
    expected_rps: float | None = None,
    shadow_share: float = DEFAULT_SHARE,
    shadow_max_rps: float = 20.0,
) -> StreamOutcome:
    """Serve `family` (or every entry of `models`) behind one gateway, re-tuning as it runs; with ``replay`` a
    replayed trace is its load (a load test), without it only its real clients are (a service).

    Parameters
    ----------
    family, slo_ms, accuracy_floor
        One zoo model family to serve, its per-request p99 latency bound and minimum variant accuracy.
    models
        Several families at once instead: ``[{"family": "cnn", "slo_ms": 50}, {"family": "mlp", "slo_ms": 20,
        "accuracy_floor": 0.9}]``; each has its own decision, workers and MLflow run, routed by model name.
    replay
        Replay ``trace`` against the service (one client per model, beside any real client). Off (the production
        deployment): only real clients are served and measured, until ``duration_s`` or a cancel.
    expected_rps
        Without replay, the request rate the first decision plans for (default 10 req/s); re-tuning then follows
        the measured rate. With replay the trace's rate is used.
    trace
        Arrival trace (with ``replay``): a path, or a path under ``settings.shared_data`` (e.g.
        ``proteus/twitter/zipf_exponential_bursty_300/bert.csv.gz`` or ``azure/AzureLLMInferenceTrace_conv.csv.gz``).
        Default: ``proteus/twitter/medium-normal_load_1x/resnet.csv.gz``, else the bundled Azure slice. Every
        model replays it (its own client).
    speedup
        Replay the trace this many times faster.
    duration_s, control_interval_s
        How long the service runs; how often it is measured and re-tuned.
    max_in_flight
        Load generator bound: arrivals beyond this many outstanding requests are shed (and counted).
    max_delay_ms
        Worker dynamic batching: longest a request waits for its batch to fill.
    launcher
        The environment: ``local`` (real serving workers, the default), ``docker`` (worker containers) or
        ``simulated`` (the simulator's event engine serves each interval in simulated time, queueing included, on
        the GPU pools of ``infra/inventory.yaml``; everything tagged simulated).
    gateway_host, gateway_port
        Where clients reach the service (port 0: a free port). Its address is logged, published as the Prefect
        artifact ``service-<service_id>`` and the MLflow tag ``oltunes.service_url``, and listed by
        ``oltunes services``; a wildcard host (``0.0.0.0``) is published as this host's name. Off loopback, ``OLTUNES_GATEWAY_TOKEN``
        must be set; clients send it as ``Authorization: Bearer <token>``.
    shadow_share, shadow_max_rps
        Shadow requests (0: none): each decision also names the candidate the tuner would learn most from
        (``Decision.trials[0]``); a worker of it runs beside the model's under its own lease, the gateway mirrors
        this share of the answered requests to it (at most ``shadow_max_rps`` per second; a full queue drops,
        never waits), discards its answers, and its measurements reach the learner tagged ``shadow``. Environments
        without a gateway (simulated) run no shadow.
    """
    bind_ephemeral_api()  # die-with-parent for Prefect's ephemeral server (workers: oltunes.lifeline.spawn)
    log = get_run_logger()
    if (family is None) == (models is None):
        raise ConfigError("parameter 'models': give either 'family' (one model) or 'models' (several), not both or neither")
    wanted = models if models is not None else [{"family": family, "slo_ms": slo_ms, "accuracy_floor": accuracy_floor}]
    p = validate(
        StreamParams, models=wanted, trace=trace, speedup=speedup, duration_s=duration_s,
        control_interval_s=control_interval_s, max_in_flight=max_in_flight, max_delay_ms=max_delay_ms,
        service_id=service_id, launcher=launcher, inventory=inventory, policy=policy, advisory=advisory, gateway_host=gateway_host,
        gateway_port=gateway_port, replay=replay, expected_rps=expected_rps, shadow_share=shadow_share,
        shadow_max_rps=shadow_max_rps,
    )  # fmt: skip
    env = Environment.make(p.launcher)
    if not p.replay and not env.serves_live_clients:
        raise ConfigError(f"parameter 'replay': the {p.launcher} launcher serves only a replayed trace (replay=true)")
    names = [m.family for m in p.models]
    if len(set(names)) != len(names):
        raise ConfigError("parameter 'models': each family may appear once")
    settings = get_settings()
    variants = env.variants(settings)
    for name in names:
        check_family(name, variants, p.launcher)
    if p.replay:
        trace_path: Path | None = resolve_trace(p.trace)
        arrivals = load_arrivals(trace_path, speedup=p.speedup, duration_s=p.duration_s)
        rate = len(arrivals) / p.duration_s
    else:
        trace_path, arrivals, rate = None, np.empty(0), p.expected_rps or DEFAULT_EXPECTED_RPS
    sid = p.service_id or f"svc-{'-'.join(names)}-{run_id()[:8]}"
    workdir = settings.home / "streaming" / sid
    cluster = await asyncio.to_thread(env.usable_cluster, p.inventory, log)  # engines checked: before any decision
    jobs = [JobSpec(job_id=sid if len(names) == 1 else f"{sid}-{m.family}", kind="streaming", family=m.family,
                    slo_ms=m.slo_ms, accuracy_floor=m.accuracy_floor, arrival_rate_rps=rate,
                    trials=int(p.shadow_share > 0)) for m in p.models]  # fmt: skip
    serving = env.serving(ServiceSetup(
        jobs=jobs, arrivals=arrivals, duration_s=p.duration_s, control_interval_s=p.control_interval_s, cluster=cluster,
        workdir=workdir, max_in_flight=p.max_in_flight, max_delay_ms=p.max_delay_ms, gateway_host=p.gateway_host,
        gateway_port=p.gateway_port, token=settings.gateway_token.get_secret_value() if settings.gateway_token else None,
        replay=p.replay,
    ))  # fmt: skip  (a gateway off loopback without a token is refused here, before any work)
    workdir.mkdir(parents=True, exist_ok=True)

    tracker = make_tracker()
    tuner, tsettings = make_tuner(env, variants, p.policy, p.advisory)
    await track.warm_start(tracker, tuner, tsettings, ("batch", "streaming"), env)
    decisions = await first_decisions(tuner, p.models, jobs, cluster)
    load = (f"replaying {len(arrivals)} arrivals over {p.duration_s:.0f} s ({rate:.1f} req/s) from {trace_path.name}"
            if trace_path else f"no replay: serving real clients for up to {p.duration_s:.0f} s, planned for {rate:g} req/s")
    for job, d in zip(jobs, decisions, strict=True):
        log.info("service %s: %s; %s first decision %s (%s)", sid, load, job.family, d.candidate.key, d.source)

    def service_run(job: JobSpec, mp: ModelParams, d: Decision) -> Any:
        return tracker.service(
            job.job_id, candidate=d.candidate, run_name=job.job_id, experiment=env.experiment("streaming"),
            params={"trace": trace_path.name if trace_path else "none (real clients)", "speedup": p.speedup, "slo_ms": mp.slo_ms, "launcher": p.launcher,
                    "control_interval_s": p.control_interval_s, "offered_rps": round(rate, 3), "shadow_share": p.shadow_share,
                    "shadow_max_rps": p.shadow_max_rps},
            tags={cv.TAG_JOB: job.job_id, cv.TAG_POLICY: ran_policy(p.policy, p.advisory), cv.TAG_KIND: "streaming"},
            datasets=[cv.dataset_record(trace_path, len(arrivals))] if trace_path else [],
        )  # fmt: skip

    models = [ModelRun(params=mp, job=job, index=i, run=service_run(job, mp, d))
              for i, (mp, job, d) in enumerate(zip(p.models, jobs, decisions, strict=True))]  # fmt: skip
    book = leases_for(tuner, cluster.pools)
    # released when the service ends; shadows lease on the same book, so each counts as a co-runner where it runs
    async with lease_decisions(book) as held, lease_decisions(book, wait_s=SHADOW_LEASE_WAIT_S) as shadow_held:
        svc = Service(p=p, sid=sid, models=models, cluster=cluster, tuner=tuner, tsettings=tsettings, log=log, leases=held,
                      shadow_leases=shadow_held)  # fmt: skip
        status, report = await run_service(svc, serving, decisions)
    return await _outcome(svc, report, trace_path, status)


async def _outcome(svc: Service, report: ServingReport, trace_path: Path | None, status: str) -> StreamOutcome:
    switches = sum(len(m.decisions) - 1 for m in svc.models)
    svc.log.info("service %s: requests %s, restarts %d, switches %d, gateway gave up on %s", svc.sid, report.requests,
                 report.restarts, switches, report.gateway_failures)  # fmt: skip
    # once cancelled, the flow run starts no task run (the API would abort it): the artifacts are written directly
    publish = track.publish_decision.fn if status == "KILLED" else track.publish_decision
    for m in svc.models:
        key = m.job.job_id[-12:].lower()
        first = m.measurements[0] if m.measurements else None
        await publish(m.decisions[0], first, key=f"stream-first-{key}", slo_ms=m.params.slo_ms,
                                     title=f"Streaming service {m.job.job_id}: first decision")  # fmt: skip
        if len(m.decisions) > 1:
            await publish(m.decisions[-1], m.measurements[-1] if m.measurements else None, key=f"stream-last-{key}",
                                         slo_ms=m.params.slo_ms, title=f"Streaming service {m.job.job_id}: last decision")  # fmt: skip
    return StreamOutcome(
        service_id=svc.sid, decisions=[d for m in svc.models for d in m.decisions],
        measurements=[x for m in svc.models for x in m.measurements], steps=sum(m.steps for m in svc.models),
        restarts=report.restarts, switches=switches, requests=report.requests, failures=report.failures,
        request_latency=report.request_latency, trace=str(trace_path or ""), status=status, gateway_url=report.url,
        gateway_failures=report.gateway_failures,
        shadow_measurements=[x for m in svc.models for x in m.shadow_measurements],
        per_model={m.params.family: {"job_id": m.job.job_id, "steps": m.steps, "requests": pm["requests"],
                                     "switches": len(m.decisions) - 1, "restarts": pm["restarts"], "shadowed": m.shadowed}
                   for m, pm in zip(svc.models, report.per_model, strict=True)},
    )  # fmt: skip
