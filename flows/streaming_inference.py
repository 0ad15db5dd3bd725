"""Streaming inference flow: a long-running online service whose configuration the tuner keeps adjusting.

It opens one stable Open Inference Protocol gateway (``gateway_host:gateway_port``; loopback by default, a token
required elsewhere) and, for every model it serves (``family``, or several in ``models``), starts a serving
worker where the tuner says and points the gateway's route for that model at it. Clients, the replayed trace's
load generator among them, only ever talk to the gateway. Every control interval, per model: read the worker's
window and telemetry, log one step to the model's MLflow run, feed the learner, re-consult the tuner (with the
other models' placements in the cluster state) and, when the decision changes, switch workers behind the gateway
(new worker up, route moved, old one drained, stopped). A worker that dies is restarted; the gateway re-sends what
it had accepted. The flow stops after `duration_s` or on cancellation, always stopping its workers and gateway and
closing its MLflow runs. With the ``simulated`` launcher the loop runs on the simulator in simulated time instead
(`SERVICE_LOOPS`, by the launcher's environment).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows.common import (
    bind_ephemeral_api, check_family, cluster_for, make_tracker, make_tuner, run_id, run_name, validate,
)
from flows.streaming_service import ModelParams, ServedModel, first_decisions, gather_steps, placement, run_dir
from oltunes.config import get_settings
from oltunes.errors import ConfigError, DataError
from oltunes.gateway import Gateway, GatewayServer
from oltunes.launchers import Launcher, WorkerSpec
from oltunes.launchers.supervisor import ServeSupervisor
from oltunes.launchers.traffic import BUNDLED_TRACE, LoadGenerator, load_arrivals, oip_payloads
from oltunes.tracking import conventions as cv
from oltunes.tuner.lease_holder import DecisionLeases, lease_decisions, leases_for
from oltunes.types import ClusterState, Decision, Id, JobSpec, Measurement
from tasks import serving
from tasks import tracking as track
from tasks import tuning

DEFAULT_TRACE = "proteus/twitter/medium-normal_load_1x/resnet.csv.gz"  # under settings.shared_data


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
    gateway_host: str = Field(min_length=1, max_length=253)
    gateway_port: int = Field(ge=0, le=65535)


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


def _inputs(family: str, where: Path) -> Any:
    from oltunes.worker.dataset import read_dataset
    from oltunes.zoo import make_dataset

    path = where / f"inputs-{family}.npz"
    if not path.is_file():
        make_dataset(family, 256, path, seed=get_settings().seed)
    return read_dataset(path).x


@contextlib.contextmanager
def _sigterm_stops(stop: asyncio.Event, terminated: asyncio.Event, loop: asyncio.AbstractEventLoop):
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


@dataclass
class Service:
    """What both service loops share: the validated parameters, the jobs with their first decisions, the tuner."""

    p: StreamParams
    sid: str
    jobs: list[JobSpec]
    decisions: list[Decision]
    cluster: ClusterState
    arrivals: Any
    trace_path: Path
    tuner: Any
    tsettings: Any
    open_run: Callable[[JobSpec, ModelParams, Decision], Any]  # the model's MLflow service run
    workdir: Path
    token: str | None  # the gateway's bearer token
    log: Any
    leases: DecisionLeases  # every decision is leased before it is applied (`DecisionLeases.apply`)


async def _serve_in_simulated_time(svc: Service, settings: Any, gateway: Gateway, server: GatewayServer) -> StreamOutcome:
    """The control loop against the simulator's performance model (simulated time: no waiting, no traffic)."""
    all_d, all_m = [], []
    for mp, job, d in zip(svc.p.models, svc.jobs, svc.decisions, strict=True):
        ds, ms = await _simulated_model(svc, mp, job, d)
        all_d += ds
        all_m += ms
    n = len(svc.arrivals) * len(svc.jobs)
    return StreamOutcome(
        service_id=svc.sid, decisions=all_d, measurements=all_m, steps=len(all_m), restarts=0, switches=len(all_d) - len(svc.jobs),
        requests={"sent": n, "ok": n, "failed": 0, "shed": 0, "in_flight": 0, "refused": 0}, failures={},
        trace=str(svc.trace_path), request_latency={}, status="FINISHED",
    )  # fmt: skip


async def _simulated_model(svc: Service, mp: ModelParams, job: JobSpec, decision: Decision) -> tuple[list[Decision], list[Measurement]]:
    """One model's loop: each interval's offered requests are "served" by ``SimulatedLauncher.measure_interval``
    with the current decision; the step is logged (the environment's experiment), observed, the tuner re-consulted.
    """
    import numpy as np

    p, cluster = svc.p, svc.cluster
    run = svc.open_run(job, mp, decision)
    launcher = Launcher.make(p.launcher)
    edges = np.arange(0.0, p.duration_s + p.control_interval_s, p.control_interval_s)
    counts = np.histogram(svc.arrivals, bins=edges)[0]
    current, decisions, measurements = decision, [decision], []
    for k, n in enumerate(counts):
        if n == 0:
            continue
        rate = n / p.control_interval_s
        now_job = job.model_copy(update={"arrival_rate_rps": rate})
        spec = WorkerSpec(mode="serve", job=now_job, candidate=current.candidate, pool=cluster.pool(current.pool),
                          decision_id=current.decision_id, run_dir=Path(job.job_id))  # fmt: skip
        m = launcher.measure_interval(spec, int(n), k)
        await serving.log_step(run, len(measurements), m, mp.slo_ms, p.policy, current, {"offered_rps": rate, "switches": float(len(decisions) - 1)})
        await tuning.observe(svc.tuner, m, svc.tsettings)
        measurements.append(m)
        new = await tuning.recommend(svc.tuner, now_job, cluster, placement(now_job, current, mp.slo_ms))
        if new.candidate.key != current.candidate.key and await svc.leases.apply(now_job, new):
            current = new
            decisions.append(new)
    await serving.end_service(run, "FINISHED")
    return decisions, measurements


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
    models: list[dict[str, Any]] | None = None,
    gateway_host: str = "127.0.0.1",
    gateway_port: int = 0,
) -> StreamOutcome:
    """Serve `family` (or every entry of `models`) behind one gateway under a replayed trace, re-tuning as it runs.

    Parameters
    ----------
    family, slo_ms, accuracy_floor
        One zoo model family to serve, its per-request p99 latency bound and minimum variant accuracy.
    models
        Several families at once instead: ``[{"family": "cnn", "slo_ms": 50}, {"family": "mlp", "slo_ms": 20,
        "accuracy_floor": 0.9}]``; each has its own decision, workers and MLflow run, routed by model name.
    trace
        Arrival trace: a path, or a path under ``settings.shared_data`` (e.g.
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
        ``local`` (real serving workers, the default) or ``simulated`` (the performance model answers each
        interval in simulated time, on the GPU pools of ``infra/inventory.yaml``; everything tagged simulated).
    gateway_host, gateway_port
        Where clients reach the service (port 0: a free port, logged). Off loopback, ``OLTUNES_GATEWAY_TOKEN``
        must be set; clients send it as ``Authorization: Bearer <token>``.
    """
    bind_ephemeral_api()  # die-with-parent for Prefect's ephemeral server (workers: oltunes.lifeline.spawn)
    log = get_run_logger()
    if (family is None) == (models is None):
        raise ConfigError("parameter 'models': give either 'family' (one model) or 'models' (several), not both or neither")
    wanted = models if models is not None else [{"family": family, "slo_ms": slo_ms, "accuracy_floor": accuracy_floor}]
    p = validate(
        StreamParams, models=wanted, trace=trace, speedup=speedup, duration_s=duration_s,
        control_interval_s=control_interval_s, max_in_flight=max_in_flight, max_delay_ms=max_delay_ms,
        service_id=service_id, launcher=launcher, inventory=inventory, policy=policy, gateway_host=gateway_host,
        gateway_port=gateway_port,
    )  # fmt: skip
    names = [m.family for m in p.models]
    if len(set(names)) != len(names):
        raise ConfigError("parameter 'models': each family may appear once")
    settings = get_settings()
    backend = Launcher.lookup(p.launcher)
    variants = backend.variants(settings)
    for name in names:
        check_family(name, variants, p.launcher)
    token = settings.gateway_token.get_secret_value() if settings.gateway_token else None
    gateway = Gateway(token=token)
    server = GatewayServer(gateway, p.gateway_host, p.gateway_port)  # refuses off loopback without a token, before any work
    trace_path = resolve_trace(p.trace)
    arrivals = load_arrivals(trace_path, speedup=p.speedup, duration_s=p.duration_s)
    rate = len(arrivals) / p.duration_s
    sid = p.service_id or f"svc-{'-'.join(names)}-{run_id()[:8]}"
    workdir = settings.home / "streaming" / sid
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = cluster_for(backend, p.inventory)
    jobs = [JobSpec(job_id=sid if len(names) == 1 else f"{sid}-{m.family}", kind="streaming", family=m.family,
                    slo_ms=m.slo_ms, accuracy_floor=m.accuracy_floor, arrival_rate_rps=rate) for m in p.models]  # fmt: skip

    tracker = make_tracker()
    tuner, tsettings = make_tuner(backend, variants, p.policy)
    await track.warm_start(tracker, tuner, tsettings, ("batch", "streaming"), backend.environment)
    decisions = await first_decisions(tuner, p.models, jobs, cluster)
    for job, d in zip(jobs, decisions, strict=True):
        log.info("service %s: %d arrivals over %.0f s (%.1f req/s) from %s; %s first decision %s (%s)",
                 sid, len(arrivals), p.duration_s, rate, trace_path.name, job.family, d.candidate.key, d.source)  # fmt: skip

    def service_run(job: JobSpec, mp: ModelParams, d: Decision) -> Any:
        return tracker.service(
            job.job_id, candidate=d.candidate, run_name=job.job_id, experiment=backend.environment.experiment("streaming"),
            params={"trace": str(trace_path.name), "speedup": p.speedup, "slo_ms": mp.slo_ms, "launcher": p.launcher,
                    "control_interval_s": p.control_interval_s, "offered_rps": round(rate, 3)},
            tags={cv.TAG_JOB: job.job_id, cv.TAG_POLICY: p.policy, cv.TAG_KIND: "streaming"},
            datasets=[cv.dataset_record(trace_path, len(arrivals))],
        )  # fmt: skip

    async with lease_decisions(leases_for(tuner, cluster.pools)) as held:  # released when the service ends
        for job, d in zip(jobs, decisions, strict=True):
            await held.apply(job, d)
        svc = Service(p=p, sid=sid, jobs=jobs, decisions=decisions, cluster=cluster, arrivals=arrivals, trace_path=trace_path,
                      tuner=tuner, tsettings=tsettings, open_run=service_run, workdir=workdir, token=token, log=log, leases=held)  # fmt: skip
        return await SERVICE_LOOPS[backend.environment.name](svc, settings, gateway, server)


async def _serve_with_workers(svc: Service, settings: Any, gateway: Gateway, server: GatewayServer) -> StreamOutcome:
    """The control loop against real serving workers behind the gateway, under the replayed trace (wall time)."""
    p, sid, cluster, log = svc.p, svc.sid, svc.cluster, svc.log
    tuner, tsettings, arrivals, workdir, token = svc.tuner, svc.tsettings, svc.arrivals, svc.workdir, svc.token
    names = [m.family for m in p.models]
    served: list[ServedModel] = []
    launcher_obj = Launcher.make(p.launcher)
    for mp, job, d in zip(p.models, svc.jobs, svc.decisions, strict=True):
        def spec_for(dec: Decision, generation: int, job: JobSpec = job) -> WorkerSpec:
            return WorkerSpec(mode="serve", job=job, candidate=dec.candidate, pool=cluster.pool(dec.pool), decision_id=dec.decision_id,
                              run_dir=run_dir(workdir, job.family, generation), max_delay_ms=p.max_delay_ms)  # fmt: skip

        route = gateway.add(mp.family, mp.slo_ms)
        served.append(ServedModel(params=mp, job=job, route=route, supervisor=ServeSupervisor(launcher_obj, route, spec_for),
                                  svc=svc.open_run(job, mp, d), decisions=[d]))  # fmt: skip
    stop_traffic, stop_watch, terminated = asyncio.Event(), asyncio.Event(), asyncio.Event()
    status = "FINISHED"
    tasks: list[asyncio.Task] = []
    loop = asyncio.get_running_loop()
    try:
        await server.start()
        log.info("service %s: gateway %s serving %s (Open Inference Protocol, /metrics)", sid, server.url, ", ".join(names))
        await asyncio.gather(*(m.supervisor.start(m.decisions[0]) for m in served))
        async with httpx.AsyncClient(timeout=30, headers={"authorization": f"Bearer {token}"} if token else None) as http:
            for m in served:  # an ordinary client: asks the gateway what the model takes
                meta = (await http.get(f"{server.url}/v2/models/{m.params.family}")).raise_for_status().json()
                payload = oip_payloads(_inputs(m.params.family, workdir), meta)
                m.gen = LoadGenerator(server.url, m.params.family, arrivals, payload, max_in_flight=p.max_in_flight, token=token)
        tasks = [asyncio.create_task(m.gen.run(stop_traffic)) for m in served if m.gen is not None]
        tasks += [asyncio.create_task(m.supervisor.watch(stop_watch)) for m in served]
        t_end = time.monotonic() + p.duration_s
        with _sigterm_stops(stop_traffic, terminated, loop):
            while not stop_traffic.is_set() and not all(m.gen.finished.is_set() for m in served if m.gen):
                for m in served:
                    m.start_interval(settings.cpu_watts_per_core)
                wait = max(0.01, min(p.control_interval_s, t_end - time.monotonic()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop_traffic.wait(), timeout=wait)
                if time.monotonic() >= t_end:
                    stop_traffic.set()
                await gather_steps(served, policy=p.policy, tuner=tuner, tsettings=tsettings, cluster=cluster,
                                   retune=not stop_traffic.is_set(), log=log, leases=svc.leases)  # fmt: skip
        if terminated.is_set():
            status = "KILLED"
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "KILLED"
        raise
    except BaseException:
        status = "FAILED"
        raise
    finally:
        stop_traffic.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.gather(*tasks[: len(served)], return_exceptions=True), timeout=90)
        stop_watch.set()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks[len(served) :], return_exceptions=True)
        for m in served:
            with contextlib.suppress(BaseException):
                await m.supervisor.stop()
        await server.stop()
        for m in served:
            if status == "KILLED":
                m.svc.end(status)  # no new task runs once the flow is being cancelled
            else:
                await serving.end_service(m.svc, status)
    return await _outcome(sid, served, gateway, server.url, svc.trace_path, status, log)


#: How a service runs its control intervals, by launcher environment (`oltunes.launchers.environment`).
SERVICE_LOOPS: dict[str, Callable[[Service, Any, Gateway, GatewayServer], Awaitable[StreamOutcome]]] = {
    "disk": _serve_with_workers,
    "simulated": _serve_in_simulated_time,
}


async def _outcome(sid: str, served: list[ServedModel], gateway: Gateway, url: str, trace_path: Path, status: str, log: Any) -> StreamOutcome:
    totals: dict[str, int] = {}
    failures: dict[str, int] = {}
    latency = None
    for m in served:
        assert m.gen is not None
        for k, v in m.gen.totals().items():
            totals[k] = totals.get(k, 0) + v
        for k, v in m.gen.failures.items():
            failures[k] = failures.get(k, 0) + v
        latency = m.gen.latency if latency is None else latency.merge(m.gen.latency)
    restarts = sum(m.supervisor.restarts for m in served)
    switches = sum(len(m.supervisor.switches) for m in served)
    log.info("service %s: requests %s, restarts %d, switches %d, gateway gave up on %s", sid, totals, restarts, switches, dict(gateway.failures))
    for m in served:
        key = m.job.job_id[-12:].lower()
        first = m.measurements[0] if m.measurements else None
        await track.publish_decision(m.decisions[0], first, key=f"stream-first-{key}", slo_ms=m.params.slo_ms,
                                     title=f"Streaming service {m.job.job_id}: first decision")  # fmt: skip
        if len(m.decisions) > 1:
            await track.publish_decision(m.decisions[-1], m.measurements[-1] if m.measurements else None, key=f"stream-last-{key}",
                                         slo_ms=m.params.slo_ms, title=f"Streaming service {m.job.job_id}: last decision")  # fmt: skip
    summary = {} if latency is None or not latency.count else {f"p{q}_ms": float(latency.percentile(q)) for q in (50, 95, 99)}  # type: ignore[arg-type]
    return StreamOutcome(
        service_id=sid, decisions=[d for m in served for d in m.decisions], measurements=[x for m in served for x in m.measurements],
        steps=sum(m.steps for m in served), restarts=restarts, switches=switches, requests=totals, failures=failures,
        request_latency=summary, trace=str(trace_path), status=status, gateway_url=url, gateway_failures=dict(gateway.failures),
        per_model={m.params.family: {"job_id": m.job.job_id, "steps": m.steps, "requests": m.gen.totals() if m.gen else {},
                                     "switches": len(m.supervisor.switches), "restarts": m.supervisor.restarts} for m in served},
    )  # fmt: skip
