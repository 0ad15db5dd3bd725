"""One control interval of the event engine: the coupling of the jobs sharing a device (time-slicing,
interference, packing) from the loads they kept last interval, each job's serving under it
(:mod:`oltunes.sim.jobrun`), the interval's energy and utilisation, and the measurements policies see.
A mixin of :class:`~oltunes.sim.engine.Simulator` (its truth model, cluster, drift and drop window).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from oltunes.percentile import percentiles, total
from oltunes.sim.jobrun import JobRun, RunResult, advance_batch, serve, shed_unplaced
from oltunes.trusted import trusted_model
from oltunes.types import Candidate, CoRunner, Measurement, new_ids

if TYPE_CHECKING:
    from oltunes.sim.engine import Policy

_MEASURED = frozenset(Measurement.model_fields) - {"measurement_id"}  # what the engine gives (the id: a default)


class IntervalServing:
    """Serving and measuring one control interval (needs the :class:`~oltunes.sim.engine.Simulator` state)."""

    def _serve_interval(self, policy: Policy, res: RunResult, active: list[JobRun], waiting: list[JobRun], t0: float,
              t1: float, final: bool) -> None:
        model, cl = self.model, self.cluster
        span = max(t1 - t0, 1e-9)  # the final tick is the drain: from the last tick to the drain's end
        tmid = (t0 + min(t1, self.duration_s)) / 2
        # per-device coupling from last interval's loads
        groups: dict[tuple[str, int], list[JobRun]] = {}
        for r in active:
            groups.setdefault((r.placement.pool, r.placement.device), []).append(r)
        outside = cl.tenants_by_device()  # co-runner bursts: (variant, load) per device
        energy = 0.0
        busy_total = 0.0
        drop_after, loads_now = self.drop_after, cl.loads
        for (pool, dev), members in groups.items():
            acc = cl.pool(pool).accelerator
            idle_w = acc.idle_w
            drift = self.drift(pool, dev, tmid)
            bg = outside.get((pool, dev), [])
            shared = len(members) + len(bg) > 1
            if shared:  # time-slicing and interference from the loads the device's jobs kept last interval
                loads = {r.job.spec.job_id: loads_now.get(r.job.spec.job_id, 0.0 if r.streaming else 1.0)
                         for r in members}
                share = model.sharing_factor(acc.name, sum(loads.values()) + sum(load for _, load in bg), True)
            else:
                share = model.sharing_factor(acc.name, 0.0, False)
            idle_each = idle_w * span / len(members)
            dyn = 0.0
            dev_busy = 0.0
            for r in members:
                r.begin_interval()
                if shared:
                    co = [(o.vi, loads[o.job.spec.job_id]) for o in members if o is not r] + bg
                    slow, extra = model.interference(r.vi, co)
                    slow = float(slow)  # the table's numpy scalar: as a float the serving loop runs much faster
                else:
                    slow, extra = 1.0, 0.0
                kappa = r.kappa
                factor = drift * slow * kappa * share
                sigma = math.hypot(r.sigma, extra)
                if r.streaming:
                    serve(r, t1, factor, sigma, drop_after)
                else:
                    advance_batch(r, t0, t1, factor, sigma)
                # share of the device the job kept busy (batch jobs and probe shards run flat out; a shadow only
                # as long as its mirrored requests last)
                load = min(1.0, r.busy_iso * kappa / (r.conc * span)) if r.streaming or r.purpose == "shadow" else 1.0
                work_s = r.busy_iso * drift * slow  # device time at full draw
                r.busy_j = r.power * work_s
                drawn = (r.power - idle_w) * work_s
                r.energy_j = drawn + idle_each
                dyn += drawn
                loads_now[r.job.spec.job_id] = load
                dev_busy += min(1.0, work_s / span)
            energy += idle_w * span + min(dyn, (acc.max_w - idle_w) * span)
            busy_total += min(1.0, dev_busy)
        for r in waiting:
            if r.streaming:
                shed_unplaced(r, t1 if not final else math.inf, self.drop_after)
        if final:  # still queued after the drain: dropped (the drain's energy is counted below)
            for r in active + waiting:
                if r.streaming and r.i < len(r.arr):
                    r.dropped[r.i :] = True
                    r.i = len(r.arr)
        res.t.append(t0)
        res.util.append(busy_total / len(groups) if groups else 0.0)
        res.energy_j.append(energy)
        res.active_devices.append(len(groups))
        res.fragmentation.append(cl.fragmentation())
        if policy.learns and not final:  # the interval's measurements, reported together
            measured = [r for r in active if r.interval_items > 0 and r.purpose != "shadow"]  # (a shadow: at its end)
            if measured:
                policy.observe_many([self._measurement(r, span, t1, mid)
                                     for r, mid in zip(measured, new_ids(len(measured)))])
            for r in measured:
                r.measured = True

    def _measurement(self, r: JobRun, span: float, now: float, measurement_id: str) -> Measurement:
        if r.streaming:  # figured as it was served
            p50, p95, p99, lat_sum, req_p99, wait = r.figures.tolist()
        else:  # (a batch job's few dozen latencies: no kernel to compile where only batch jobs run)
            p50, p95, p99 = percentiles(r.interval_lat_ms, (50, 95, 99))
            lat_sum, req_p99, wait = total(r.interval_lat_ms), None, None
        c = r.decision.candidate
        co = self.cluster.co_runners(c.pool, r.placement.device, exclude=r.job.spec.job_id)
        last = r.measured_as
        if last is not None and _same(last.co_runners, co) and r.measured_for is c:  # as last interval (often alone)
            cand = last
        else:
            cand = r.measured_as = trusted_model(Candidate, {
                "pool": c.pool, "accelerator": c.accelerator, "variant": c.variant, "batch_size": c.batch_size,
                "concurrency": c.concurrency, "co_runners": co})  # fmt: skip
            r.measured_for = c
        busy = lat_sum / 1000.0 / r.conc
        return trusted_model(Measurement, {
            "measurement_id": measurement_id,
            "job_id": r.job.spec.job_id,
            "decision_id": r.decision.decision_id,
            "kind": r.job.spec.kind,
            "arrival_rate_rps": r.interval_items / span if r.streaming else 0.0,
            "candidate": cand,
            "items": r.interval_items,
            "wall_s": span,
            "latency_p50_ms": p50,
            "latency_p95_ms": p95,
            "latency_p99_ms": p99,
            "throughput_items_per_s": r.interval_items / busy if busy > 0 else 0.0,
            # (the truth model's power: a numpy float); a shadow's, of its busy time: it idles between the mirrored
            # requests' batches, which a throughput run of the candidate would not
            "energy_j_per_item": float(r.busy_j if r.purpose == "shadow" else r.energy_j) / r.interval_items,
            "energy_source": "simulated",
            "accuracy": r.accuracy,
            "gpu_util": min(1.0, r.busy_iso / span),
            "request_latency_p99_ms": req_p99,
            "queueing_delay_ms": wait,
            "simulated": True,
            "purpose": r.purpose,
            "timestamp": now,
        }, _MEASURED)  # fmt: skip


def _same(a: tuple[CoRunner, ...], b: tuple[CoRunner, ...]) -> bool:
    """``a == b`` for co-runners the cluster built (fields only: no private or extra attributes), without pydantic's
    ``__eq__`` (many times the cost, and most co-runners' loads changed since the last interval); the same tuple
    first (a job alone on its device, most jobs: ``()`` both times)."""
    return a is b or (len(a) == len(b) and all(x is y or x.__dict__ == y.__dict__ for x, y in zip(a, b)))
