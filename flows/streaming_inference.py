"""Streaming inference flow: a long-running service whose configuration the tuner keeps adjusting.

It starts a serving worker where the tuner says, replays a real arrival trace against it (bounded load
generator), and every control interval: reads the worker's latency/throughput window and telemetry, logs one
step to the service's MLflow run, feeds the learner, re-consults the tuner and, when the decision changes,
switches workers without dropping in-flight requests (new worker up, traffic moved, old one drained, stopped).
A worker that dies is restarted; requests it had accepted are re-sent or reported failed. The flow stops
after `duration_s` or on cancellation, always stopping its workers and closing its MLflow run. With the
``simulated`` launcher the same loop runs against the simulator's performance model in simulated time.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows.common import check_family, cluster_for, make_tracker, make_tuner, validate
from oltunes.config import get_settings
from oltunes.errors import DataError
from oltunes.launchers import Launcher, WorkerSpec, pool_cores
from oltunes.launchers.serve_metrics import interval_measurement
from oltunes.launchers.supervisor import ServeSupervisor
from oltunes.launchers.traffic import BUNDLED_TRACE, LoadGenerator, Router, json_payloads, load_arrivals
from oltunes.telemetry import Monitor
from oltunes.tracking import conventions as cv
from oltunes.types import ClusterState, Decision, Id, JobSpec, Measurement, Placement, new_id
from tasks import serving
from tasks import tracking as track
from tasks import tuning

DEFAULT_TRACE = "proteus/twitter/medium-normal_load_1x/resnet.csv.gz"  # under settings.shared_data


class StreamParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    family: Id
    slo_ms: float = Field(gt=0, description="p99 latency bound per request")
    accuracy_floor: float = Field(ge=0, le=1)
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

    path = where / "inputs.npz"
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


async def _retune(tuner: Any, job: JobSpec, cluster: ClusterState, current: Decision, slo_ms: float) -> Decision:
    """Re-consult the tuner for a running service; where it runs now lets the tuner prefer staying put."""
    here = Placement(job_id=job.job_id, pool=current.pool, device=current.group.device if current.group else 0,
                     candidate=current.candidate, slo_ms=slo_ms, arrival_rate_rps=job.arrival_rate_rps)  # fmt: skip
    return await tuning.recommend(tuner, job, cluster, here)


async def _simulated_service(p, sid, job, cluster, decision, arrivals, trace_path, tracker, tuner, tsettings, svc) -> StreamOutcome:
    """The same control loop against the simulator's performance model (simulated time: no waiting, no traffic).

    Each interval's offered requests are "served" by ``SimulatedLauncher.measure_interval`` with the current
    decision; the step is logged (experiment ``oltunes-simulation``), observed, and the tuner re-consulted.
    """
    import numpy as np

    launcher = Launcher.make(p.launcher)
    edges = np.arange(0.0, p.duration_s + p.control_interval_s, p.control_interval_s)
    counts = np.histogram(arrivals, bins=edges)[0]
    current, decisions, measurements, step = decision, [decision], [], 0
    for k, n in enumerate(counts):
        if n == 0:
            continue
        rate = n / p.control_interval_s
        now_job = job.model_copy(update={"arrival_rate_rps": rate})
        spec = WorkerSpec(mode="serve", job=now_job, candidate=current.candidate, pool=cluster.pool(current.pool),
                          decision_id=current.decision_id, run_dir=Path(sid))  # fmt: skip
        m = launcher.measure_interval(spec, int(n), k)
        await serving.log_step(svc, step, m, p.slo_ms, p.policy, current, {"offered_rps": rate, "switches": float(len(decisions) - 1)})
        await tuning.observe(tuner, m, tsettings)
        measurements.append(m)
        step += 1
        new = await _retune(tuner, now_job, cluster, current, p.slo_ms)
        if new.candidate.key != current.candidate.key:
            current = new
            decisions.append(new)
    await serving.end_service(svc, "FINISHED")
    n = int(counts.sum())
    return StreamOutcome(
        service_id=sid, decisions=decisions, measurements=measurements, steps=step, restarts=0,
        switches=len(decisions) - 1, requests={"sent": n, "ok": n, "failed": 0, "shed": 0, "in_flight": 0, "retries": 0},
        failures={}, trace=str(trace_path), request_latency={}, status="FINISHED",
    )  # fmt: skip


@flow(name="streaming-inference", flow_run_name="streaming-{family}", validate_parameters=True)
async def streaming_inference(
    family: str,
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
) -> StreamOutcome:
    """Serve `family` under a replayed arrival trace, re-tuning every `control_interval_s`.

    Parameters
    ----------
    family
        Zoo model family to serve.
    slo_ms, accuracy_floor
        Per-request p99 latency bound; minimum variant accuracy.
    trace
        Arrival trace: a path, or a path under ``settings.shared_data`` (e.g.
        ``proteus/twitter/zipf_exponential_bursty_300/bert.csv.gz`` or ``azure/AzureLLMInferenceTrace_conv.csv.gz``).
        Default: ``proteus/twitter/medium-normal_load_1x/resnet.csv.gz``, else the bundled Azure slice.
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
    """
    log = get_run_logger()
    p = validate(
        StreamParams, family=family, slo_ms=slo_ms, accuracy_floor=accuracy_floor, trace=trace, speedup=speedup,
        duration_s=duration_s, control_interval_s=control_interval_s, max_in_flight=max_in_flight,
        max_delay_ms=max_delay_ms, service_id=service_id, launcher=launcher, inventory=inventory, policy=policy,
    )  # fmt: skip
    settings = get_settings()
    backend = Launcher.lookup(p.launcher)
    variants = backend.variants(settings)
    check_family(p.family, variants, p.launcher)
    trace_path = resolve_trace(p.trace)
    arrivals = load_arrivals(trace_path, speedup=p.speedup, duration_s=p.duration_s)
    rate = len(arrivals) / p.duration_s
    sid = p.service_id or f"svc-{p.family}-{new_id()[:8]}"
    workdir = settings.home / "streaming" / sid
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = cluster_for(backend, p.inventory)
    job = JobSpec(job_id=sid, kind="streaming", family=p.family, slo_ms=p.slo_ms, accuracy_floor=p.accuracy_floor, arrival_rate_rps=rate)

    tracker = make_tracker()
    tuner, tsettings = make_tuner(backend, variants)
    await track.warm_start(tracker, tuner, tsettings, ("batch", "streaming"), backend.simulated)
    decision = await tuning.recommend(tuner, job, cluster)
    log.info("service %s: %d arrivals over %.0f s (%.1f req/s) from %s; first decision %s (%s)",
             sid, len(arrivals), p.duration_s, rate, trace_path.name, decision.candidate.key, decision.source)  # fmt: skip

    def spec_for(d: Decision, generation: int) -> WorkerSpec:
        return WorkerSpec(
            mode="serve", job=job, candidate=d.candidate, pool=cluster.pool(d.pool), decision_id=d.decision_id,
            run_dir=workdir / f"gen-{generation}" / "_run", max_delay_ms=p.max_delay_ms,
        )  # fmt: skip

    router = Router()
    supervisor = ServeSupervisor(Launcher.make(p.launcher), router, spec_for)
    svc = tracker.service(
        sid, candidate=decision.candidate, run_name=sid,
        experiment=cv.experiment_for("simulation" if backend.simulated else "streaming"),
        params={"trace": str(trace_path.name), "speedup": p.speedup, "slo_ms": p.slo_ms, "launcher": p.launcher,
                "control_interval_s": p.control_interval_s, "offered_rps": round(rate, 3)},
        tags={cv.TAG_JOB: sid, cv.TAG_POLICY: p.policy, cv.TAG_KIND: "streaming"},
        datasets=[cv.dataset_record(trace_path, len(arrivals))],
    )  # fmt: skip
    if backend.simulated:
        return await _simulated_service(p, sid, job, cluster, decision, arrivals, trace_path, tracker, tuner, tsettings, svc)
    payload = json_payloads(_inputs(p.family, workdir))
    decisions, measurements = [decision], []
    stop_traffic, stop_watch, terminated = asyncio.Event(), asyncio.Event(), asyncio.Event()
    gen = LoadGenerator(router, arrivals, payload, max_in_flight=p.max_in_flight)
    status, step = "FINISHED", 0
    await supervisor.start(decision)
    loop = asyncio.get_running_loop()
    gen_task = asyncio.create_task(gen.run(stop_traffic))
    watch_task = asyncio.create_task(supervisor.watch(stop_watch))
    t_end = time.monotonic() + p.duration_s
    try:
        with _sigterm_stops(stop_traffic, terminated, loop):
            while not gen.finished.is_set() and not stop_traffic.is_set():
                active = supervisor.active
                cores = len(pool_cores(active.spec.pool))
                monitor = Monitor(pid=active.pid, cores=cores, gpu_device_ids=active.spec.pool.device_ids,
                                  gpu=active.spec.pool.accelerator.name != "cpu", watts_per_core=settings.cpu_watts_per_core)  # fmt: skip
                monitor.start()
                wait = max(0.0, min(p.control_interval_s, t_end - time.monotonic()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(gen.finished.wait()), timeout=wait if wait > 0 else 0.01)
                if time.monotonic() >= t_end:
                    stop_traffic.set()
                wm = await serving.read_worker_metrics(supervisor.active.url)
                client = gen.window()
                tele = monitor.stop(cpu_time_s=wm.get("cpu_time_s"))
                current = supervisor.decision
                m = interval_measurement(sid, current, wm, client, tele)
                if m is None:
                    log.info("step %d: no request answered in this interval; nothing to learn", step)
                    continue
                req_p99 = client.percentile(99)
                extra = {
                    "request_latency_p50_ms": client.percentile(50) or 0.0, "request_latency_p99_ms": req_p99 or 0.0,
                    cv.SLO_MET: float(req_p99 is not None and req_p99 <= p.slo_ms),
                    "offered_rps": m.arrival_rate_rps, "served_rps": m.items / m.wall_s, "requests_ok": float(client.ok),
                    "requests_failed": float(client.failed), "requests_shed": float(client.shed),
                    "restarts": float(supervisor.restarts), "switches": float(len(supervisor.switches)),
                    "batch_size_mean": float(wm.get("batch_size_mean") or 0.0),
                }  # fmt: skip
                await serving.log_step(svc, step, m, p.slo_ms, p.policy, current, extra)
                await tuning.observe(tuner, m, tsettings)
                measurements.append(m)
                step += 1
                if stop_traffic.is_set():
                    break
                now_job = job.model_copy(update={"arrival_rate_rps": max(m.arrival_rate_rps, 0.1)})
                new = await _retune(tuner, now_job, cluster, current, p.slo_ms)
                if new.candidate.key != current.candidate.key:
                    rec = await supervisor.switch(new)
                    decisions.append(new)
                    log.info("step %d: switched %s -> %s (old worker drained: %s)", step, rec.old, rec.new, rec.drained)
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
            await asyncio.wait_for(gen_task, timeout=gen.retry_window_s + gen.request_timeout_s + 5)
        stop_watch.set()
        with contextlib.suppress(BaseException):
            await watch_task
        await supervisor.stop()
        if status == "KILLED":
            svc.end(status)  # no new task runs once the flow is being cancelled
        else:
            await serving.end_service(svc, status)
    totals = gen.totals()
    log.info("service %s: %d steps, requests %s, restarts %d, switches %d", sid, step, totals, supervisor.restarts, len(supervisor.switches))
    md_title = f"Streaming service {sid}: first decision"
    await track.publish_decision(decisions[0], measurements[0] if measurements else None, key=f"stream-first-{sid[-12:].lower()}", slo_ms=p.slo_ms, title=md_title)
    if len(decisions) > 1:
        await track.publish_decision(decisions[-1], measurements[-1], key=f"stream-last-{sid[-12:].lower()}", slo_ms=p.slo_ms, title=f"Streaming service {sid}: last decision")
    return StreamOutcome(
        service_id=sid, decisions=decisions, measurements=measurements, steps=step, restarts=supervisor.restarts,
        switches=len(supervisor.switches), requests=totals, failures=dict(gen.failures), trace=str(trace_path),
        request_latency=gen.latency_summary(),
        status=status,
    )  # fmt: skip
