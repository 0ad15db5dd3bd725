"""Simulated serving for a streaming service, in simulated time: the event engine of ``oltunes simulate``
(`oltunes.sim.engine.Simulator`) serves every model's replayed arrivals with dynamic batching, per-request queues,
shedding after ``drop_after_slo x SLO``, device drift, and interference between models sharing a device. So a
configuration past its capacity queues here exactly as it does in the simulator: one physics everywhere.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from oltunes.launchers.serving import Interval, ServiceSetup, Serving, ServingReport
from oltunes.launchers.sim_engine import run_seed, simulator
from oltunes.percentile import percentiles
from oltunes.sim.jobrun import JobRun
from oltunes.sim.perfmodel import PerformanceModel
from oltunes.sim.workload import SimJob
from oltunes.tracking import conventions as cv
from oltunes.types import Decision


class SimulatedServing(Serving):
    """Each `measure_interval` advances the engine one control interval; nothing waits and no request is sent."""

    def __init__(self, model: PerformanceModel, setup: ServiceSetup, seed: int) -> None:
        self.setup = setup
        jobs = [SimJob(job, submit_s=0.0, arrivals=np.asarray(setup.arrivals, dtype=float)) for job in setup.jobs]
        self.sim = simulator(model, setup.cluster.pools, jobs, duration_s=setup.duration_s, seed=seed,
                             control_interval_s=setup.control_interval_s)  # fmt: skip
        # noise per model from the seed and its job id: a re-run reproduces its numbers
        self.runs = [JobRun(j, seed=run_seed(seed, j.spec.job_id)) for j in jobs]
        self.now = 0.0
        self._over = False

    async def start(self) -> None:
        return None

    async def switch(self, model: int, decision: Decision) -> str:
        r = self.runs[model]
        old = r.decision.candidate.key if r.decision is not None else None
        self.sim.place(r, decision, self.now)
        return f"switched {old} -> {decision.candidate.key}" if old else f"started {decision.candidate.key}"

    @property
    def finished(self) -> bool:
        return self._over

    async def measure_interval(self, stop: asyncio.Event) -> list[Interval | None]:
        t0, t1 = self.now, min(self.now + self.setup.control_interval_s, self.setup.duration_s)
        measured = {m.job_id: m for m in self.sim.step(self.runs, t0, t1)}
        self.now = t1
        self._over = stop.is_set() or t1 >= self.setup.duration_s
        span = max(t1 - t0, 1e-9)
        out: list[Interval | None] = []
        for r in self.runs:
            m = measured.get(r.job.spec.job_id)
            if m is None:
                out.append(None)
                continue
            offered = int(np.searchsorted(r.job.arrivals, t1) - np.searchsorted(r.job.arrivals, t0))
            req_p99 = m.request_latency_p99_ms  # logged with the measurement, as its queueing delay
            # the offered rate (what the tuner plans for, as a real client reports it); wall-clock timestamps
            m = m.model_copy(update={"arrival_rate_rps": offered / span, "timestamp": time.time()})
            out.append(Interval(m, {
                cv.SLO_MET: float(req_p99 is not None and req_p99 <= r.job.spec.slo_ms), "offered_rps": offered / span,
                "served_rps": m.items / span, "requests_ok": float(m.items), "requests_failed": float(r.interval_dropped),
            }))  # fmt: skip
        return out

    async def drain(self) -> ServingReport:
        """Serve what is queued within the drop window, drop the rest (as the simulator's final tick does)."""
        if any(r.decision is not None for r in self.runs):
            slo_s = max(r.job.spec.slo_ms for r in self.runs) / 1000.0
            placed = [r for r in self.runs if r.decision is not None]
            self.sim.step(placed, self.now, self.now + self.sim.drop_after * slo_s + self.sim.dt, final=True)
        per_model, latencies = [], []
        for r in self.runs:
            served = ~np.isnan(r.done)
            latencies.append((r.done[served] - r.job.arrivals[served]) * 1000.0)
            ok, dropped = int(served.sum()), int(r.dropped.sum())
            sent = ok + dropped
            per_model.append({"requests": {"sent": sent, "ok": ok, "failed": dropped, "shed": 0, "in_flight": 0, "refused": 0},
                              "restarts": 0})  # fmt: skip
        totals = {k: sum(int(p["requests"][k]) for p in per_model) for k in per_model[0]["requests"]}
        lat = np.concatenate(latencies)
        summary = dict(zip(("p50_ms", "p95_ms", "p99_ms"), map(float, percentiles(lat.tolist(), (50, 95, 99))))) if lat.size else {}
        failures = {"dropped after waiting past drop_after x SLO": totals["failed"]} if totals["failed"] else {}
        return ServingReport(requests=totals, failures=failures, request_latency=summary, per_model=per_model)

