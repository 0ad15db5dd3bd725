"""Discrete-event engine: per-request queues with dynamic batching per serving instance, device sharing per
co-running group, re-tuning at an interval; deterministic for a seed.

Time advances in control intervals. Inside one interval every serving instance processes its own arrival array
in one tight loop over *batches* (never a heap event per request): the earliest-free executor takes every request
that has arrived (up to the batch size) as one batch — dynamic batching without a queue delay — and records the
per-request results as it goes (:mod:`oltunes.sim.jobrun`, compiled). What couples instances on one device
(interference by pair class, time-slicing when their loads exceed the device, gavel packing efficiency) is computed
per interval from the loads each job kept in the previous interval (:mod:`oltunes.sim.interval`). Requests that wait
longer than ``drop_after_slo x SLO`` are shed (counted as dropped, which is a violation); requests still queued when
the run ends after a drain are dropped.
So every request is either served or dropped: conservation holds by construction and is tested.

Policies see only measurements (noisy, drifting); the same noise and drift make the "physics" the requests feel.
Drift events (:mod:`oltunes.sim.events`) are applied at the start of the control interval they fall in; the engine
is their :class:`~oltunes.sim.events.World`: devices go down (their jobs wait to be placed again), an accelerator
type slows (the truth model changes, running jobs feel it at once), outside tenants take slots for a while.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Protocol

import numpy as np

from oltunes.errors import ConfigError
from oltunes.sim import calibration as cal
from oltunes.sim.cluster import SimCluster
from oltunes.sim.events import CoRunnerBurst, Event
from oltunes.sim.interval import IntervalServing
from oltunes.sim.exploration import Exploration
from oltunes.sim.jobrun import JobRun, RunResult
from oltunes.sim.perfmodel import PerformanceModel
from oltunes.sim.stepping import ExternalStepping
from oltunes.trusted import trusted_model
from oltunes.sim.workload import SimJob
from oltunes.types import (
    Candidate,
    ClusterState,
    Decision,
    JobSpec,
    Measurement,
    Placement,
)


class Policy(Protocol):
    """What the engine needs of a placement policy (``oltunes.policies.Policy`` has this shape)."""

    name: str
    adaptive: bool  # re-decided every re-tune interval
    learns: bool  # observes a Measurement per job per control interval
    retunes_early: bool  # also re-decides a job right after its first measurement

    def decide(self, job: JobSpec, state: ClusterState, current: Placement | None = None) -> Decision | None: ...

    def observe(self, m: Measurement) -> None: ...

    def observe_many(self, ms: Sequence[Measurement]) -> None: ...  # a control interval's measurements together



class Simulator(IntervalServing, ExternalStepping, Exploration):
    """Runs one policy over one workload on one cluster."""

    def __init__(
        self,
        model: PerformanceModel,
        cluster: SimCluster,
        jobs: list[SimJob],
        *,
        duration_s: float,
        seed: int = 0,
        control_interval_s: float = 5.0,
        retune_interval_s: float = 30.0,
        drop_after_slo: float = 5.0,
        drain_s: float | None = None,
        events: list[Event] = (),
    ) -> None:
        self.model = model
        self.cluster = cluster
        self.jobs = jobs
        self.duration_s = float(duration_s)
        self.seed = seed
        self.dt = float(control_interval_s)
        self.retune_s = float(retune_interval_s)
        self.drop_after = float(drop_after_slo)
        self.drain_s = drain_s
        model.add_accelerators({p.accelerator.name: p.accelerator for p in cluster.pools})
        self.events = sorted(events, key=lambda e: e.at_s)
        for e in self.events:  # unknown names fail now, not mid-run
            if isinstance(e, CoRunnerBurst):
                model.variant_index(e.variant)
        self._active: list[JobRun] = []
        self._waiting: list[JobRun] = []
        self._init_exploration()
        rng = np.random.default_rng([seed, 7])
        # slow drift per device: random phase and period, plus a fixed per-device factor (as lists: read per device
        # per interval, where numpy's scalars cost more than the arithmetic; the same floats)
        self._drift = {
            p.name: (
                rng.uniform(0, 2 * math.pi, p.count).tolist(),
                rng.uniform(*cal.DRIFT_PERIOD_S, p.count).tolist(),
                (1.0 + rng.uniform(-cal.DEVICE_SPREAD, cal.DEVICE_SPREAD, p.count)).tolist(),
            )
            for p in cluster.pools
        }

    # ------------------------------------------------------------------ helpers
    def drift(self, pool: str, device: int, t: float) -> float:
        phase, period, fixed = self._drift[pool]
        return fixed[device] * (1.0 + cal.DRIFT_AMPLITUDE * math.sin(2 * math.pi * t / period[device] + phase[device]))

    def _configure(self, r: JobRun, d: Decision, device: int, now: float, spec: JobSpec | None = None) -> None:
        """Apply a validated decision (``spec``: the job as the policy saw it, e.g. with the observed rate)."""
        c = d.candidate
        vi = self.model.variant_index(c.variant.name)
        same = (
            r.placement is not None
            and r.placement.pool == c.pool
            and r.placement.device == device
            and r.vi == vi
            and r.batch == c.batch_size
            and r.conc == c.concurrency
        )
        r.decision = d
        spec = spec or r.job.spec
        r.placement = trusted_model(Placement, {"job_id": spec.job_id, "pool": c.pool, "device": device, "candidate": c,
                                        "slo_ms": spec.slo_ms, "arrival_rate_rps": spec.arrival_rate_rps})
        if same:
            return
        r.vi = vi
        r.accel = c.accelerator
        r.batch = min(c.batch_size, cal.MAX_BATCH)
        r.conc = c.concurrency
        r.accuracy = c.variant.accuracy
        self._physics(r)
        ready = now + cal.SWITCH_COST_S
        if r.streaming:
            busy_until = float(r.free.max()) if len(r.free) else now
            r.free = np.full(r.conc, max(ready, busy_until))  # all equal: a valid heap for serve
        else:
            r.ready_s = ready

    def _physics(self, r: JobRun) -> None:
        """What the truth model says about the run's configuration (re-read when the truth drifts)."""
        row = self.model.latency_row(r.vi, r.accel)
        r.lat = row[: r.batch + 1] / 1000.0
        r.power = self.model.busy_power_w(r.vi, r.accel, r.batch)
        r.sigma = self.model.sigma(r.vi, r.accel)
        r.kappa = self.model.concurrency_factor(r.accel, r.conc)

    # ------------------------------------------------------------------ drift events (the events.World interface)
    def lose_devices(self, pool: str, count: int, now: float) -> None:
        gone = set(self.cluster.lose_devices(pool, count))
        for r in [r for r in self._active if r.job.spec.job_id in gone]:
            r.placement = r.decision = None
            self._active.remove(r)
            self._waiting.append(r)

    def slow_accelerator(self, accelerator: str, factor: float) -> None:
        self.model.slow_down(accelerator, factor)
        for r in self._active:
            if r.accel == accelerator:
                self._physics(r)

    def co_runner_burst(self, event: CoRunnerBurst, now: float) -> None:
        cl = self.cluster
        try:
            pool = cl.pool(event.pool)
        except ConfigError:  # every device of the pool is gone: nobody to disturb
            return
        vi = self.model.variant_index(event.variant)
        variant = self.model.variants()[vi]
        placed = 0
        for dev in range(pool.count):
            if event.devices is not None and placed >= event.devices:
                break
            if not cl.has_slot(pool.name, dev):
                continue
            jid = f"burst-{now * 1000:.0f}ms-{pool.name}-{dev}"  # a valid Id: learners see it as a co-runner
            cand = Candidate.model_construct(pool=pool.name, accelerator=pool.accelerator.name, variant=variant,
                                             batch_size=1, concurrency=1, co_runners=())
            cl.add_tenant(Placement.model_construct(job_id=jid, pool=pool.name, device=dev, candidate=cand,
                                                    slo_ms=1e12, arrival_rate_rps=0.0),
                          vi, event.load, now + event.duration_s)
            placed += 1

    def _events_until(self, t1: float, k: int, now: float) -> int:
        """Apply the events before ``t1`` from index ``k`` on; returns the next index. Ends expired bursts."""
        self.cluster.expire_tenants(now)
        while k < len(self.events) and self.events[k].at_s < t1:
            self.events[k].apply(self, now)
            k += 1
        return k

    def _device_for(self, d: Decision) -> int | None:
        """The device ``d``'s group names in its pool, else the pool's least loaded one (None: none is up)."""
        c = d.candidate
        if d.group is not None and d.group.pool == c.pool:
            return d.group.device
        return self.cluster.least_loaded_device(c.pool)

    def _valid(self, r: JobRun, d: Decision | None, res: RunResult) -> int | None:
        """Device to place on, or None (invalid decisions are counted; the job then waits)."""
        if d is None:
            return None
        res.decisions += 1
        c = d.candidate
        spec = r.job.spec
        try:
            pool = self.cluster.pool(c.pool)
        except ConfigError:
            res.invalid_decisions += 1
            return None
        if c.variant.family != spec.family or c.variant.accuracy < spec.accuracy_floor - 1e-12:
            res.floor_violations += 1
            return None
        if pool.accelerator.name != c.accelerator:
            res.invalid_decisions += 1
            return None
        dev = self._device_for(d)
        if dev is None or not self.cluster.has_slot(c.pool, dev):
            res.capacity_violations += 1
            return None
        return dev

    # ------------------------------------------------------------------ main loop
    def run(self, policy: Policy, progress: Callable[[float], None] | None = None) -> RunResult:
        """Simulate the whole workload under ``policy``; deterministic for (seed, jobs, policy)."""
        wall0 = time.perf_counter()
        runs = [JobRun(j, seed=self.seed * 1_000_003 + k) for k, j in enumerate(self.jobs)]
        with _frozen_while_running() as keep:
            return self._run(policy, progress, runs, wall0, keep)

    def _run(self, policy: Policy, progress: Callable[[float], None] | None, runs: list[JobRun], wall0: float,
             keep: Callable[[], None]) -> RunResult:
        model, cl = self.model, self.cluster
        res = RunResult(
            policy=policy.name,
            duration_s=self.duration_s,
            interval_s=self.dt,
            runs=runs,
            best_accuracy={f: model.best_accuracy(f) for f in {j.spec.family for j in self.jobs}},
        )
        by_submit = sorted(range(len(runs)), key=lambda k: (runs[k].job.submit_s, k))
        nxt = n_ev = 0
        self._active, self._waiting = [], []
        self._init_exploration()
        self._streams = {r.job.spec.job_id for r in runs if r.streaming}
        next_retune = self.retune_s
        n_ticks = int(math.ceil(self.duration_s / self.dt))
        for tick in range(n_ticks + 1):
            final = tick == n_ticks
            t0 = tick * self.dt
            t1 = min(t0 + self.dt, self.duration_s) if not final else math.inf
            cl.now = t0
            if final:
                # drain: no new arrivals; queues empty or are shed within the drop window
                t1 = self.duration_s + (self.drain_s if self.drain_s is not None else self._drain_window())
            else:
                n_ev = self._events_until(t1, n_ev, t0)
                while nxt < len(by_submit) and runs[by_submit[nxt]].job.submit_s < t1:
                    self._waiting.append(runs[by_submit[nxt]])
                    nxt += 1
                decided: list[tuple[JobRun, Decision, bool]] = []  # (run, decision, its first placement)
                if policy.adaptive and t0 >= next_retune:
                    next_retune += self.retune_s
                    for r in self._active:
                        r.first_seen = True  # a regular re-tune after its first measurement makes an early one moot
                        decided.append((r, self._retune(policy, r, res, t0), False))
                elif policy.adaptive and policy.retunes_early:
                    for r in self._active:
                        if r.measured and not r.first_seen:
                            r.first_seen = True
                            decided.append((r, self._retune(policy, r, res, t0), False))
                still = []
                for r in self._waiting:
                    d = policy.decide(r.job.spec, cl.state())
                    dev = self._valid(r, d, res)
                    if dev is None:
                        still.append(r)
                        continue
                    decided.append((r, d, r.started_s is None and not r.streaming))
                    self._configure(r, d, dev, max(t0, r.job.submit_s))
                    cl.place(r.placement)
                    # until it has run an interval, a job's load is what its expected rate implies (what a
                    # monitor would show after a few seconds); batch jobs run flat out
                    spec = r.job.spec
                    cl.loads[spec.job_id] = (
                        min(1.0, model.load(spec, r.placement.candidate)) if r.streaming else 1.0
                    )
                    if not r.streaming and r.started_s is None:
                        r.started_s = max(t0, r.job.submit_s)
                    self._active.append(r)
                self._waiting = still
                self._start_trials(decided, t0, res)
            self._feed_trials(t0, t1, res, final)
            if self._reports:  # the shadows that ended: their measurements
                policy.observe_many(self._reports)
                self._reports = []
            self._serve_interval(policy, res, self._active + self._exploring, self._waiting, t0, t1, final)
            self._account_trials(res, t1)
            if not final:
                for r in [r for r in self._active if not r.streaming and r.remaining <= 0]:
                    cl.remove(r.job.spec.job_id)  # the slot frees at the next tick
                self._active = [r for r in self._active if r.streaming or r.remaining > 0]
            keep()  # what this tick left is long-lived: out of the collector's passes
            if progress is not None:
                progress(min(1.0, (tick + 1) / (n_ticks + 1)))
        res.wall_s = time.perf_counter() - wall0
        return res

    def _drain_window(self) -> float:
        slo = max((j.spec.slo_ms for j in self.jobs if j.arrivals is not None), default=0.0)
        return self.drop_after * slo / 1000.0 + self.dt

    def _retune(self, policy: Policy, r: JobRun, res: RunResult, now: float) -> Decision:
        """Re-decide a placed job; the decision it runs on (the old one when the new one is not valid)."""
        old_pl = self.cluster.remove(r.job.spec.job_id, keep_load=True)
        spec = r.job.spec
        if r.streaming and r.i < len(r.arr):
            # the rate seen over the last re-tune window is what an operator's monitor would report
            lo, hi = np.searchsorted(r.arr, (now - self.retune_s, now)).tolist()
            rate = (hi - lo) / self.retune_s
            spec = with_rate(spec, rate)
        d = policy.decide(spec, self.cluster.state(), current=old_pl)
        dev = self._valid(r, d, res)
        if dev is None:
            d, dev = r.decision, old_pl.device  # keep the old placement
        self._configure(r, d, dev, now, spec)
        self.cluster.place(r.placement)
        return d


_YOUNG_EVERY = 50_000  # allocations between collections of the youngest objects while a run lasts (Python: 700)


def with_rate(spec: JobSpec, rate: float) -> JobSpec:
    """``spec.model_copy(update={"arrival_rate_rps": rate})`` (the same fields, fields set, no extra or private
    values; ``rate`` a float), without pydantic's generic copy: one per re-decision of a stream."""
    return trusted_model(JobSpec, {**spec.__dict__, "arrival_rate_rps": rate},
                         spec.__pydantic_fields_set__ | {"arrival_rate_rps"})


@contextmanager
def _frozen_while_running():
    """Keep what is alive out of the garbage collector's passes while a run lasts: the workload and the job runs
    (their request lists: millions of items at scale) from the start, and what every tick leaves behind (the
    policy's learnt state, the cluster's) as the ticks go, via the ``keep`` it yields (call it once per tick).
    Every full collection walked all of that again: a tenth of a run at 10,000 devices. Only when memory is
    scanned changes (garbage in reference cycles is collected when the run ends); a caller's own freeze is left
    as it is (``keep`` then does nothing).

    The young objects are collected every ``_YOUNG_EVERY`` allocations rather than every 700 (the thresholds are
    restored when the run ends; a threshold of 0, no automatic collection, is left as it is): a collection walks
    every reference its young objects hold, and a decision's are many (the cluster snapshot lists every placement,
    the policy's values per option), so at 10,000 devices a snapshot, young for one decision, was walked again and
    again, and the collector took some 15 s of a run's CPU (under 5 s after; engine and policy alike)."""
    thresholds = gc.get_threshold()
    if thresholds[0]:
        gc.set_threshold(max(thresholds[0], _YOUNG_EVERY), *thresholds[1:])
    try:
        if gc.get_freeze_count():
            yield lambda: None
            return
        gc.freeze()
        try:
            yield gc.freeze
        finally:
            gc.unfreeze()
    finally:
        gc.set_threshold(*thresholds)
