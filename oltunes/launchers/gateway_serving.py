"""Real serving for a streaming service, in wall time: one gateway, per model a supervised serving worker behind its
route and (with ``replay``) a client replaying the trace; an interval is measured from the worker's window, the
client's window (without replay: the worker's view of its real clients) and the worker's telemetry
(`oltunes.launchers.serve_metrics`). A model may have a shadow (`shadow`): a second worker, started by the same
launcher, to which the gateway mirrors a share of its requests; it is measured over the same intervals
(`oltunes.launchers.shadow_worker`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from oltunes.config import get_settings
from oltunes.gateway import Gateway, GatewayServer, Route
from oltunes.gateway.shadow import ShadowBudget
from oltunes.launchers.base import Launcher, WorkerSpec
from oltunes.launchers.local import pool_cores
from oltunes.launchers.serve_metrics import interval_measurement, read_window, served_window
from oltunes.launchers.service_records import published_url
from oltunes.launchers.shadow_worker import ShadowWorker
from oltunes.launchers.serving import Interval, ServiceSetup, Serving, ServingReport
from oltunes.launchers.supervisor import ServeSupervisor
from oltunes.launchers.traffic import LoadGenerator, oip_payloads
from oltunes.telemetry import Monitor
from oltunes.tracking import conventions as cv
from oltunes.types import Decision, JobSpec

log = logging.getLogger(__name__)


@dataclass
class _Model:
    job: JobSpec
    route: Route
    supervisor: ServeSupervisor
    gen: LoadGenerator | None = None
    monitor: Monitor | None = None
    served: Counter = field(default_factory=Counter)  # without replay: the real clients' requests, from the worker
    shadow: ShadowWorker | None = None
    shadows_started: int = 0


def request_inputs(family: str, where: Path) -> np.ndarray:
    """Real model inputs for the client's requests (a small dataset of the family, built once per service)."""
    from oltunes.worker.dataset import read_dataset
    from oltunes.zoo import make_dataset

    path = where / f"inputs-{family}.npz"
    if not path.is_file():
        make_dataset(family, 256, path, seed=get_settings().seed)
    return read_dataset(path).x


def run_dir(workdir: Path, family: str, generation: int) -> Path:
    return workdir / family / f"gen-{generation}" / "_run"


class GatewayServing(Serving):
    """Serving workers started by ``launcher`` behind one Open Inference Protocol gateway.

    The gateway is built here, so a bind off loopback without a token is refused before any work starts.
    """

    supports_shadow = True

    def __init__(self, launcher: Launcher, setup: ServiceSetup) -> None:
        self.launcher, self.setup = launcher, setup
        self.gateway = Gateway(token=setup.token)
        self.server = GatewayServer(self.gateway, setup.gateway_host, setup.gateway_port)
        self.models: list[_Model] = []
        self._stop_traffic, self._stop_watch = asyncio.Event(), asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._t_end: float | None = None

    def _spec_for(self, job: JobSpec):
        s = self.setup

        def spec_for(d: Decision, generation: int) -> WorkerSpec:
            return WorkerSpec(mode="serve", job=job, candidate=d.candidate, pool=s.cluster.pool(d.pool), decision_id=d.decision_id,
                              run_dir=run_dir(s.workdir, job.family, generation), max_delay_ms=s.max_delay_ms)  # fmt: skip

        return spec_for

    async def start(self) -> None:
        await self.server.start()
        self.url = published_url(self.setup.gateway_host, self.server.port)  # what clients use (a wildcard: host name)
        for job in self.setup.jobs:
            route = self.gateway.add(job.family, job.slo_ms)
            self.models.append(_Model(job, route, ServeSupervisor(self.launcher, route, self._spec_for(job))))

    async def switch(self, model: int, decision: Decision) -> str:
        sup = self.models[model].supervisor
        if sup.active is None:
            await sup.start(decision)
            return f"started {decision.candidate.key}"
        rec = await sup.switch(decision)
        return f"switched {rec.old} -> {rec.new} (old worker drained: {rec.drained})"

    async def shadow(self, model: int, decision: Decision | None, budget: ShadowBudget) -> str:
        m = self.models[model]
        old, m.shadow = m.shadow, None
        if old is not None:
            await old.stop()
        if decision is None:
            return f"stopped shadow {old.decision.candidate.key}" if old else "no shadow"
        m.shadows_started += 1
        s = self.setup
        spec = WorkerSpec(mode="serve", job=m.job.model_copy(update={"job_id": decision.job_id, "trials": 0}),
                          candidate=decision.candidate, pool=s.cluster.pool(decision.pool), decision_id=decision.decision_id,
                          run_dir=s.workdir / m.job.family / f"shadow-{m.shadows_started}" / "_run", max_delay_ms=s.max_delay_ms)  # fmt: skip
        m.shadow = await ShadowWorker.start(self.launcher, self.gateway, m.job.family, spec, decision, budget)
        return (f"shadowing {decision.candidate.key} on device {decision.group.device if decision.group else 0} "
                f"({budget.share:.1%} of requests, at most {budget.max_rps:g}/s)")  # fmt: skip

    async def _begin_traffic(self) -> None:
        """Once every model has its worker: with replay, one client per model (it asks the gateway what the model
        takes); the workers' supervision in any case."""
        s = self.setup
        if s.replay:
            await self._start_replay()
        self._tasks = [asyncio.create_task(m.gen.run(self._stop_traffic)) for m in self.models if m.gen is not None]
        self._tasks += [asyncio.create_task(m.supervisor.watch(self._stop_watch)) for m in self.models]
        self._t_end = time.monotonic() + s.duration_s

    async def _start_replay(self) -> None:
        s = self.setup
        async with httpx.AsyncClient(timeout=30, headers={"authorization": f"Bearer {s.token}"} if s.token else None) as http:
            for m in self.models:
                meta = (await http.get(f"{self.server.url}/v2/models/{m.job.family}")).raise_for_status().json()
                payload = oip_payloads(request_inputs(m.job.family, s.workdir), meta)
                m.gen = LoadGenerator(self.server.url, m.job.family, s.arrivals, payload, max_in_flight=s.max_in_flight,
                                      token=s.token)  # fmt: skip

    @property
    def finished(self) -> bool:
        gens = [m.gen for m in self.models if m.gen is not None]  # none without replay: it ends at its duration
        return self._stop_traffic.is_set() or (bool(gens) and all(g.finished.is_set() for g in gens))

    async def measure_interval(self, stop: asyncio.Event) -> list[Interval | None]:
        if self._t_end is None:
            await self._begin_traffic()
        assert self._t_end is not None
        watts = get_settings().cpu_watts_per_core
        for m in self.models:  # the active worker now (a switch or a restart may have replaced it)
            active = m.supervisor.active
            assert active is not None
            pool = active.spec.pool
            m.monitor = Monitor(pid=active.pid, cores=len(pool_cores(pool)), gpu_device_ids=pool.device_ids,
                                gpu=pool.accelerator.name != "cpu", watts_per_core=watts)  # fmt: skip
            m.monitor.start()
            if m.shadow is not None:
                m.shadow.begin_interval(watts)
        wait = max(0.01, min(self.setup.control_interval_s, self._t_end - time.monotonic()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=wait)
        if stop.is_set() or time.monotonic() >= self._t_end:
            self._stop_traffic.set()
        return list(await asyncio.gather(*(self._measure(m) for m in self.models)))

    async def _measure(self, m: _Model) -> Interval | None:
        assert m.monitor is not None and m.supervisor.active is not None
        shadow = await m.shadow.measure() if m.shadow is not None else None
        shadow_counts = m.shadow.counts() if m.shadow is not None else {}
        wm = await read_window(m.supervisor.active.url)
        client = m.gen.window() if m.gen is not None else served_window(wm)
        if m.gen is None:
            m.served.update(ok=client.ok, failed=client.failed)
        tele = m.monitor.stop(cpu_time_s=wm.get("cpu_time_s"))
        measured = interval_measurement(m.job.job_id, m.supervisor.decision, wm, client, tele)
        if measured is None:
            return None
        req_p99 = client.percentile(99)
        return Interval(measured, {
            "request_latency_p50_ms": client.percentile(50) or 0.0, "request_latency_p99_ms": req_p99 or 0.0,
            cv.SLO_MET: float(req_p99 is not None and req_p99 <= m.job.slo_ms),
            "offered_rps": measured.arrival_rate_rps, "served_rps": measured.items / measured.wall_s,
            "requests_ok": float(client.ok), "requests_failed": float(client.failed), "requests_shed": float(client.shed),
            "restarts": float(m.supervisor.restarts), "batch_size_mean": float(wm.get("batch_size_mean") or 0.0),
            **shadow_counts,
        }, shadow=shadow)  # fmt: skip

    async def drain(self) -> ServingReport:
        self._stop_traffic.set()
        n_gen = sum(m.gen is not None for m in self.models)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.gather(*self._tasks[:n_gen], return_exceptions=True), timeout=90)
        self._stop_watch.set()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*self._tasks[n_gen:], return_exceptions=True)
        for m in self.models:
            if m.shadow is not None:
                with contextlib.suppress(BaseException):
                    await m.shadow.stop()
                m.shadow = None
            with contextlib.suppress(BaseException):
                await m.supervisor.stop()
        await self.server.stop()
        return self._report()

    def _report(self) -> ServingReport:
        totals: dict[str, int] = {}
        failures: dict[str, int] = {}
        latency = None
        for m in self.models:
            if m.gen is None:  # no replay: what the worker answered its real clients
                for k, v in m.served.items():
                    totals[k] = totals.get(k, 0) + v
        for g in (m.gen for m in self.models if m.gen is not None):
            for k, v in g.totals().items():
                totals[k] = totals.get(k, 0) + v
            for k, v in g.failures.items():
                failures[k] = failures.get(k, 0) + v
            latency = g.latency if latency is None else latency.merge(g.latency)
        summary: dict[str, Any] = {}
        if latency is not None and latency.count:
            summary = {f"p{q}_ms": float(latency.percentile(q)) for q in (50, 95, 99)}  # type: ignore[arg-type]
        return ServingReport(
            requests=totals, failures=failures, request_latency=summary, url=self.url,
            restarts=sum(m.supervisor.restarts for m in self.models), gateway_failures=dict(self.gateway.failures),
            per_model=[{"requests": m.gen.totals() if m.gen else dict(m.served), "restarts": m.supervisor.restarts}
                       for m in self.models],
        )  # fmt: skip
