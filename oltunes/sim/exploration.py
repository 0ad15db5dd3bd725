"""Exploration in the simulator: a stream's shadow and a batch job's probe shards, run from a decision's ``trials``
(``JobSpec.trials``: only a policy that asks gets any — ``oltunes``; the oracle and the baselines never do).
A mixin of :class:`~oltunes.sim.engine.Simulator`.

* **Shadow** (a streaming job's first trial with a free slot on a device that serves no stream, preferably one in
  use): for ``SHADOW_RETUNES`` re-tune intervals or until it has run ``SHADOW_BATCHES`` full batches, a
  ``shadow_share`` of the stream's requests (every k-th arrival) is mirrored to the trial's candidate on the
  trial's device, a worker under its own slot. The stream's requests, latency and SLO never depend on it: it never
  runs beside a stream (its own included) and ends if its stream moves onto its device. Its answers are discarded,
  so it replays what was mirrored in full batches as they fill (a throughput run of the candidate). Its load is a
  co-runner of whatever runs on its device (interference, time-slicing) and its energy is counted there. It is
  measured once, when it ends, over its whole run (at least ``SHADOW_MIN_BATCHES`` batches): latency at the
  candidate's batch size, throughput, energy per item of its busy time.
* **Probe shard** (a batch job's trials at its first placement): ``probe_share`` of its items (at least one batch)
  run on each trial's candidate beside the job's own start; the items count towards the job (done once: taken
  from the job's remaining items, what a shard left after ``PROBE_INTERVALS`` control intervals goes back to it;
  its batches' SLO misses count as the job's). It is measured every interval, as batch jobs are. When the last
  shard ends, the job is re-decided with what they measured (an early re-tune).
* **Budget**: no trial starts while a job waits for a slot, nor once the trials' energy (with what the new one is
  predicted to add, and ``START_MARGIN`` kept back) exceeds ``exploration_budget`` of the run's energy without
  trials (its rate so far, spent at most ``BUDGET_AHEAD`` of the run ahead of time); running shadows end when it
  does.

Trials are measured with ``purpose`` ``shadow`` / ``probe`` under their own job id (``<job>-shadowN`` /
``<job>-probeN``, the decision id of the job's decision), so the learner's per-job memory of the job itself
(its load, its bursts) is the job's alone. The run's ``exploration_energy_j`` is what the trials added: their busy
draw above idle, and the idle draw of a device that ran trials only; ``shadows`` / ``probes`` how many started.
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.percentile import percentiles
from oltunes.sim.jobrun import JobRun, RunResult
from oltunes.sim.workload import SimJob
from oltunes.tuner.decide.trials import SHADOW_MIN_BATCHES
from oltunes.types import PROBE_SHARE, SHADOW_SHARE, Decision, Measurement, Trial  # (the shares: one definition)

SHADOW_RETUNES = 2  # a shadow lasts this many re-tune intervals at most
SHADOW_BATCHES = 8  # or until it has run this many full batches (enough to measure; its device's idle draw costs)
PROBE_INTERVALS = 3  # control intervals a probe shard may run before its rest goes back to the job
EXPLORATION_BUDGET = 0.05  # the trials' energy, share of the run's energy
BUDGET_AHEAD = 0.25  # share of the run whose budget may be spent ahead of time
START_MARGIN = 0.1  # share of the allowance a new trial leaves for the running ones' overruns


class Exploration:
    """Starting, feeding and ending trials (needs the :class:`~oltunes.sim.engine.Simulator` state)."""

    shadow_share: float = SHADOW_SHARE
    probe_share: float = PROBE_SHARE
    exploration_budget: float = EXPLORATION_BUDGET

    def _init_exploration(self) -> None:
        self._exploring: list[JobRun] = []
        self._energy_so_far = self._elapsed = 0.0
        self._reports: list[Measurement] = []  # the shadows' measurements, for the policy at the next tick

    def _over_budget(self, res: RunResult, extra_j: float = 0.0) -> bool:
        """The trials' energy (with ``extra_j``: and the next interval's of those running, as in their last one,
        and ``extra_j``) exceeds what the budget allows by now: its share of the energy the run draws without
        trials (at its rate so far; none before an interval has run) over the time elapsed plus
        ``BUDGET_AHEAD`` of the run, so that trials may start early, when they teach most, without spending the
        whole run's budget in its first minutes."""
        rate = (self._energy_so_far - res.exploration_energy_j) / max(self._elapsed, self.dt)
        allowed = self.exploration_budget * rate * min(self.duration_s, self._elapsed + BUDGET_AHEAD * self.duration_s)
        if not extra_j:
            return res.exploration_energy_j > allowed
        # a start: with what those running would draw next, and a tenth kept back for their overruns
        ahead = sum(tr.energy_j for tr in self._exploring) + extra_j
        return res.exploration_energy_j + ahead > (1.0 - START_MARGIN) * allowed

    def _start_trials(self, decided: list[tuple[JobRun, Decision, bool]], now: float, res: RunResult) -> None:
        """Start the trials of this tick's decisions (``first``: a job's first placement) that the rules allow."""
        if self._waiting:  # no slot goes to a trial while a job waits for one
            return
        for r, d, first in decided:
            if not d.trials or r.placement is None or self._over_budget(res, 1e-9):
                continue
            if r.streaming:
                if r.shadow is None:
                    r.shadow = self._trial(r, d, d.trials, "shadow", res.shadows + 1, now, res)
                    res.shadows += r.shadow is not None
            elif first and r.probes_open == 0:
                for t in d.trials:
                    pr = self._trial(r, d, (t,), "probe", res.probes + 1, now, res)
                    if pr is not None:
                        r.probes_open += 1
                        res.probes += 1

    def _trial(self, r: JobRun, d: Decision, trials: tuple[Trial, ...], purpose: str, n: int, now: float,
               res: RunResult) -> JobRun | None:
        """Place the first of ``trials`` with a free slot off ``r``'s device (on a device already in use if one of
        them is: an idle one would be powered up for the trial alone) as a trial run; None if none has a slot."""
        here = (r.placement.pool, r.placement.device)
        cl = self.cluster
        ok = [t for t in trials if (t.candidate.pool, t.device) != here and cl.has_slot(t.candidate.pool, t.device)
              and not any(cl.placements[j].candidate.variant.family and self._serves(j)
                          for j in cl.members(t.candidate.pool, t.device))]
        t = next((t for t in ok if cl.members(t.candidate.pool, t.device)), ok[0] if ok else None)
        if t is None:
            return None
        spec, c = r.job.spec, t.candidate
        if purpose == "probe":
            items = min(r.remaining - 1, max(c.batch_size, math.ceil(self.probe_share * spec.items)))
            if items <= 0:
                return None
            until = now + PROBE_INTERVALS * self.dt
            work = items  # (all in its first interval, as far as the budget is concerned)
        else:
            items, until = 0, now + SHADOW_RETUNES * self.retune_s
            work = spec.arrival_rate_rps * self.shadow_share * self.dt
        # what it would add over its first interval, as the tuner predicts it: its items' energy, and the device's
        # idle draw while it runs if it is alone there
        pred = t.predicted
        cost = pred.energy_j_per_item * work
        if not cl.members(c.pool, t.device):
            busy_s = work / pred.throughput_items_per_s if pred.throughput_items_per_s > 0 else self.dt
            cost += cl.pool(c.pool).accelerator.idle_w * (self.dt if purpose == "shadow" else min(self.dt, busy_s))
        if self._over_budget(res, cost):
            return None
        jid = f"{spec.job_id}-{purpose}{n}"[-128:].lstrip("-._") or f"{purpose}{n}"
        tspec = spec.model_copy(update={"job_id": jid, "kind": "batch", "items": items, "arrival_rate_rps": 0.0,
                                        "trials": 0})
        tr = JobRun(SimJob(tspec, now), seed=r.seed * 31 + n)
        tr.purpose, tr.of, tr.until_s = purpose, r, until
        tr.mirrored = r.i  # a shadow mirrors from the stream's next request on
        self._configure(tr, d.model_copy(update={"candidate": t.candidate, "group": None, "trials": ()}),
                        t.device, now)
        self.cluster.place(tr.placement)
        self.cluster.loads[jid] = 1.0 if purpose == "probe" else self._shadow_load(r, tr)
        r.remaining -= items
        tr.started_s = now
        tr.energy_j = cost  # (until its first interval says what it drew)
        self._exploring.append(tr)
        return tr

    def _serves(self, job_id: str) -> bool:
        """Whether ``job_id`` serves live requests (a stream, whose latency a trial beside it would hurt)."""
        return job_id in self._streams

    def _shadow_load(self, r: JobRun, tr: JobRun) -> float:
        """A shadow's expected busy share: its mirrored rate times the candidate's isolated time per item."""
        rate = r.job.spec.arrival_rate_rps * self.shadow_share
        return min(1.0, rate * float(tr.lat[tr.batch]) / (tr.batch * tr.conc))

    def _feed_trials(self, t0: float, t1: float, res: RunResult, final: bool) -> None:
        """Before an interval: end the trials whose time is up (or all, ``final``; running shadows once over
        budget), and give each shadow the full batches of the requests mirrored to it by ``t1``."""
        over = self._over_budget(res)
        for tr in list(self._exploring):
            p = tr.of
            # its device was lost, or its job moved there (never beside the job it tries a candidate for)
            gone = tr.job.spec.job_id not in self.cluster.placements or (
                p.placement is not None and (p.placement.pool, p.placement.device) == (tr.placement.pool,
                                                                                        tr.placement.device))
            if tr.purpose == "shadow":
                done = t0 >= tr.until_s or tr.batches_done >= SHADOW_BATCHES
                if final or gone or over or done or p.placement is None:
                    self._end_trial(tr, t0)
                    continue
                k = max(1, round(1.0 / self.shadow_share))
                hi = int(np.searchsorted(p.arr, t1))
                lo = tr.mirrored
                fresh = (hi - 1) // k - (lo - 1) // k if hi > lo else 0  # indices in [lo, hi) that are multiples of k
                tr.mirrored = max(lo, hi)
                tr.queued += fresh
                full = tr.queued // tr.batch * tr.batch
                tr.queued -= full
                tr.remaining += full
            elif final or gone or (t0 >= tr.until_s and p.remaining > 0) or tr.remaining <= 0:
                self._end_trial(tr, t0)

    def _end_trial(self, tr: JobRun, now: float) -> None:
        """End a trial: free its slot; a probe shard's work goes to its job (what it did, and its rest back)."""
        if tr.purpose == "shadow" and len(tr.shadow_lat_ms) >= SHADOW_MIN_BATCHES:
            self._reports.append(self._shadow_measurement(tr, now))
        self._exploring.remove(tr)
        self.cluster.remove(tr.job.spec.job_id)
        tr.placement = None
        p = tr.of
        if tr.purpose == "shadow":
            p.shadow = None
            return
        p.remaining += tr.remaining
        p.items_done += tr.items_done
        p.batches_done += tr.batches_done
        p.batches_violated += tr.batches_violated
        if p.remaining <= 0 and tr.remaining <= 0 and p.finished_s is not None:
            p.finished_s = max(p.finished_s, tr.finished_s if tr.finished_s is not None else now)
        tr.remaining = 0
        p.probes_open -= 1
        if p.probes_open == 0:
            p.first_seen = False  # re-decided at the next tick, with what its shards measured

    def _shadow_measurement(self, tr: JobRun, now: float) -> Measurement:
        """A shadow's one measurement, over its whole run (a few batches per interval would each report a p99 of
        one or two batches): a throughput run of the candidate, with the co-runners it has now."""
        c, pl = tr.decision.candidate, tr.placement
        co = self.cluster.co_runners(pl.pool, pl.device, exclude=tr.job.spec.job_id)
        p50, p95, p99 = percentiles(tr.shadow_lat_ms, (50, 95, 99))
        drawn_j, items = tr.shadow_busy
        busy_s = sum(tr.shadow_lat_ms) / 1000.0 / tr.conc
        # per item as its stream would pay there, as the stream's own measurements say it: the draw above idle of
        # its busy time, and its share of the device's idle draw at the stream's rate (not the shadow's: at 2 % of
        # the rate an item would carry 50x the idle draw; without it, a shadowed candidate looks cheaper than the
        # one serving by the idle share alone)
        idle_w = self.cluster.pool(pl.pool).accelerator.idle_w
        rate = tr.of.job.spec.arrival_rate_rps
        idle_j = idle_w / (len(self.cluster.members(pl.pool, pl.device)) * rate) if rate > 0 else 0.0
        return Measurement(
            job_id=tr.job.spec.job_id, decision_id=tr.decision.decision_id, kind="batch", arrival_rate_rps=0.0,
            candidate=c.model_copy(update={"co_runners": co}), items=int(items), wall_s=max(now - tr.started_s, 1e-9),
            latency_p50_ms=float(p50), latency_p95_ms=float(p95), latency_p99_ms=float(p99),
            throughput_items_per_s=items / busy_s, energy_j_per_item=drawn_j / items + idle_j, energy_source="simulated",
            accuracy=tr.accuracy, gpu_util=min(1.0, busy_s / max(now - tr.started_s, 1e-9)),
            request_latency_p99_ms=None, queueing_delay_ms=None, simulated=True, purpose="shadow", timestamp=now)

    def _account_trials(self, res: RunResult, t1: float) -> None:
        """After an interval (ending at ``t1``): the run's energy so far (the budget's base) and what the trials
        added to it: their busy draw above idle, and the idle draw of a device that ran trials only."""
        self._energy_so_far += res.energy_j[-1]
        span = min(t1, self.duration_s) - self._elapsed
        self._elapsed = min(t1, self.duration_s)
        added = 0.0
        trials = {tr.job.spec.job_id for tr in self._exploring}
        for tr in self._exploring:
            pl = tr.placement
            idle_w = self.cluster.pool(pl.pool).accelerator.idle_w
            drawn = tr.busy_j * (1.0 - idle_w / tr.power) if tr.power > 0 else 0.0
            members = self.cluster.members(pl.pool, pl.device)
            tr.energy_j = drawn + (idle_w * span / len(members) if trials.issuperset(members) else 0.0)
            added += tr.energy_j
            if tr.purpose == "shadow" and tr.interval_items:
                tr.shadow_lat_ms += tr.interval_lat_ms
                tr.shadow_busy[0] += drawn
                tr.shadow_busy[1] += tr.interval_items
        res.exploration_energy_j += added
