"""Stepping the simulator from outside: for callers that decide themselves and want the engine's physics one
interval at a time (the streaming flow's simulated serving, `oltunes.launchers.sim_serving`) or one batch part
to its end (`run_batch`, the simulated launcher). A mixin of :class:`~oltunes.sim.engine.Simulator`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from oltunes.errors import ConfigError
from oltunes.percentile import percentiles
from oltunes.sim.jobrun import JobRun
from oltunes.sim.jobrun import RunResult
from oltunes.types import Candidate, Decision, Measurement, Placement


class ExternalStepping:
    """``place``, ``step`` and ``run_batch`` (needs the :class:`~oltunes.sim.engine.Simulator` state)."""

    def place(self, r: JobRun, d: Decision, now: float) -> None:
        """Configure ``r`` per ``d`` at ``now`` (a change pays the switch cost) on the device ``d`` names."""
        c = d.candidate
        jid = r.job.spec.job_id
        self.cluster.remove(jid, keep_load=True)
        dev = self._device_for(d)
        if dev is None:
            raise ConfigError(f"simulator: no device up in pool {c.pool!r}")
        self._configure(r, d, dev, now)
        self.cluster.place(r.placement)
        self.cluster.loads.setdefault(jid, min(1.0, self.model.load(r.job.spec, c)) if r.streaming else 1.0)

    def step(self, runs: list[JobRun], t0: float, t1: float, final: bool = False) -> list[Measurement]:
        """Serve the placed ``runs`` from ``t0`` to ``t1``: the measurement of each run that served requests.
        ``final``: a drain; what is still queued at ``t1`` is dropped and nothing is measured."""
        seen: list[Measurement] = []
        res = RunResult("external", self.duration_s, self.dt, runs, {})
        self._serve_interval(_Observer(seen.append), res, runs, [], t0, t1, final)
        return seen

    def run_batch(self, r: JobRun, d: Decision, max_s: float = 7 * 86400.0) -> Measurement:
        """Run batch job ``r`` as ``d`` says from time 0 until its items are done (the simulated batch launcher):
        one measurement of the whole run. The candidate's co-runners share its device as outside tenants
        (interference, time-slicing); drift and the simulator's events apply as in `run`."""
        self.place(r, d, 0.0)
        dev = r.placement.device
        for co in d.candidate.co_runners:
            try:
                vi = self.model.variant_index(co.variant)
            except ConfigError:  # a co-runner the truth model does not know: no interference to model
                continue
            if self.cluster.has_slot(d.candidate.pool, dev):
                cand = Candidate.model_construct(pool=d.candidate.pool, accelerator=d.candidate.accelerator,
                                                 variant=self.model.variants()[vi], batch_size=co.batch_size,
                                                 concurrency=1, co_runners=())
                self.cluster.add_tenant(Placement.model_construct(job_id=co.job_id, pool=d.candidate.pool, device=dev,
                                                                  candidate=cand, slo_ms=1e12, arrival_rate_rps=0.0),
                                        vi, co.load, math.inf)
        self._active, self._waiting = [r], []
        r.started_s = 0.0
        idle_w = self.cluster.pool(d.candidate.pool).accelerator.idle_w
        lat_ms: list[float] = []
        energy = busy = t = 0.0
        n_ev = 0
        while r.remaining > 0:
            if t >= max_s:
                raise ConfigError(f"simulator: batch job {r.job.spec.job_id} not done after {max_s:g} simulated s")
            n_ev = self._events_until(t + self.dt, n_ev, t)
            if r.placement is None:
                raise ConfigError(f"simulator: the device of batch job {r.job.spec.job_id} was lost")
            self.step([r], t, t + self.dt)
            lat_ms += r.interval_lat_ms
            energy += r.energy_j
            busy += r.busy_iso
            t += self.dt
        end = r.finished_s if r.finished_s is not None else t
        energy -= idle_w * (t - end)  # the last interval's idle share after the job ended
        p50, p95, p99 = percentiles(lat_ms, (50, 95, 99))
        c = r.decision.candidate
        return Measurement(
            job_id=r.job.spec.job_id, decision_id=d.decision_id, kind=r.job.spec.kind, arrival_rate_rps=0.0,
            candidate=c, items=r.items_done, wall_s=end, latency_p50_ms=float(p50), latency_p95_ms=float(p95),
            latency_p99_ms=float(p99), throughput_items_per_s=r.items_done / max(end - r.ready_s, 1e-9),
            energy_j_per_item=energy / r.items_done, energy_source="simulated", accuracy=r.accuracy,
            gpu_util=min(1.0, busy / max(end - r.ready_s, 1e-9)), simulated=True,
        )  # fmt: skip


@dataclass
class _Observer:
    """The policy shape `Simulator._serve_interval` reports measurements to, for `Simulator.step`."""

    observe: Callable[[Measurement], None]
    name: str = "external"
    adaptive: bool = False
    learns: bool = True

    def observe_many(self, ms: Sequence[Measurement]) -> None:
        for m in ms:
            self.observe(m)
