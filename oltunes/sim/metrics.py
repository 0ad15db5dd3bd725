"""Per-policy metrics from a run: SLO violations, latency percentiles, goodput, utilisation, energy, accuracy loss,
queueing delay, job completion time, fragmentation — plus the per-interval series the report plots.

Definitions (also in the report):

* ``slo_violation_rate``: streaming requests served later than their SLO or dropped, over all streaming requests.
* ``p50_ms`` / ``p99_ms``: end-to-end latency (arrival -> batch done) of served streaming requests.
* ``throughput_rps``: goodput, streaming requests served within SLO per second of the run.
* ``gpu_util``: mean busy fraction of the devices that host at least one job (unused devices are powered down).
* ``energy_j_per_req``: energy of every active device (idle draw + busy draw) over streaming requests served plus
  batch items processed.
* ``accuracy_loss_pts``: mean over served requests and batch items of (family's best accuracy - used), x100.
* ``queueing_delay_s``: mean wait of a served streaming request before its batch starts.
* ``jct_s``: mean batch-job completion time (submit -> last item); unfinished jobs count until the run's end.
* ``fragmentation``: mean share of free slots stranded on partly used devices.
* ``exploration_energy_share``: energy the trials added (shadows, probe shards: their busy draw above idle, and the
  idle draw of a device that ran trials only) over the run's energy (:mod:`oltunes.sim.exploration`).
* ``shadows_per_job`` / ``probes_per_job``: shadows started per streaming job, probe shards per batch job.
* ``regret_per_quarter`` (vs the oracle): (policy's violated requests - oracle's) / requests, among the requests
  arriving in each quarter of the run (not cumulative: a learner's falls from quarter to quarter).
* per drift event: ``before`` / ``after`` = violation rate of the requests arriving in the window (two re-tune
  intervals) before / after it; ``recovery_s`` = time from the event to the start of the first re-tune window from which every window
  up to the next event (or the run's end) is back within 2 points of max(its own ``before``, the oracle's rate in
  that window); 0 = never hurt, None = never recovered.
"""

from __future__ import annotations

import numpy as np

from oltunes.sim.jobrun import RunResult


def _streams(res: RunResult):
    return [r for r in res.runs if r.streaming and len(r.arr) > 0]


def request_arrays(res: RunResult) -> dict[str, np.ndarray]:
    """Concatenated per-request arrays: arrival, latency (s, nan = dropped), SLO (s), violated, accuracy loss."""
    rs = _streams(res)
    if not rs:
        z = np.zeros(0)
        return {"arrival": z, "latency": z, "wait": z, "slo": z, "violated": z.astype(bool), "loss": z}
    arrival = np.concatenate([r.job.arrivals for r in rs])
    done = np.concatenate([r.done for r in rs])
    start = np.concatenate([r.start for r in rs])
    dropped = np.concatenate([r.dropped for r in rs])
    slo = np.concatenate([np.full(len(r.arr), r.job.spec.slo_ms / 1000.0) for r in rs])
    best = np.concatenate([np.full(len(r.arr), res.best_accuracy[r.job.spec.family]) for r in rs])
    acc = np.concatenate([r.acc_per_req for r in rs])
    latency = np.where(dropped, np.nan, done - arrival)
    violated = dropped | ~(latency <= slo)
    return {
        "arrival": arrival,
        "latency": latency,
        "wait": start - arrival,
        "slo": slo,
        "violated": violated,
        "loss": np.where(dropped, np.nan, (best - acc) * 100.0),
    }


def compute(res: RunResult, req: dict[str, np.ndarray] | None = None) -> dict[str, float]:
    req = req if req is not None else request_arrays(res)
    n = len(req["arrival"])
    served = ~np.isnan(req["latency"])
    lat_ms = req["latency"][served] * 1000.0
    batch = [r for r in res.runs if not r.streaming]
    items = sum(r.items_done for r in batch)
    batch_loss = sum(r.items_done * (res.best_accuracy[r.job.spec.family] - r.accuracy) * 100.0 for r in batch)
    n_served = int(served.sum())
    energy = float(np.sum(res.energy_j))
    jct = [((r.finished_s if r.finished_s is not None else res.duration_s) - r.job.submit_s) for r in batch]
    nb = sum(r.batches_done for r in batch)
    loss_total = float(np.nansum(req["loss"])) + batch_loss
    n_streams = sum(r.streaming for r in res.runs)
    return {
        "slo_violation_rate": float(req["violated"].mean()) if n else 0.0,
        "p50_ms": float(np.percentile(lat_ms, 50)) if n_served else float("nan"),
        "p99_ms": float(np.percentile(lat_ms, 99)) if n_served else float("nan"),
        "throughput_rps": float((served & ~req["violated"]).sum() / res.duration_s),
        "gpu_util": float(np.mean(res.util)) if res.util else 0.0,
        "energy_j_per_req": energy / (n_served + items) if (n_served + items) else float("nan"),
        "accuracy_loss_pts": loss_total / (n_served + items) if (n_served + items) else 0.0,
        "queueing_delay_s": float(np.mean(req["wait"][served])) if n_served else float("nan"),
        "jct_s": float(np.mean(jct)) if jct else float("nan"),
        "fragmentation": float(np.mean(res.fragmentation)) if res.fragmentation else 0.0,
        "exploration_energy_share": res.exploration_energy_j / energy if energy > 0 else 0.0,
        "shadows_per_job": res.shadows / n_streams if n_streams else 0.0,
        "probes_per_job": res.probes / len(batch) if batch else 0.0,
        "requests": n,
        "dropped_rate": float((~served).mean()) if n else 0.0,
        "batch_jobs": len(batch),
        "batch_jobs_finished": sum(r.finished_s is not None for r in batch),
        "batch_items": items,
        "batch_slo_violation_rate": sum(r.batches_violated for r in batch) / nb if nb else 0.0,
        "active_devices_mean": float(np.mean(res.active_devices)) if res.active_devices else 0.0,
        "decisions": res.decisions,
        "invalid_decisions": res.invalid_decisions + res.capacity_violations + res.floor_violations,
        "sim_wall_s": res.wall_s,
    }


def violations_per_bin(res: RunResult, req: dict[str, np.ndarray] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bin start times, requests arriving per control interval, how many of them violated their SLO)."""
    req = req if req is not None else request_arrays(res)
    edges = np.arange(0.0, res.duration_s + res.interval_s, res.interval_s)
    tot, _ = np.histogram(req["arrival"], edges)
    bad, _ = np.histogram(req["arrival"][req["violated"]], edges)
    return edges[:-1], tot, bad


def violations_over_time(res: RunResult, req: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(bin start times, SLO violation rate of the requests arriving in each control interval)."""
    t, tot, bad = violations_per_bin(res, req)
    return t, np.where(tot > 0, bad / np.maximum(tot, 1), 0.0)


def _windows(res: RunResult, window_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t, tot, bad = violations_per_bin(res)
    k = max(1, int(round(window_s / res.interval_s)))
    n = len(t) // k * k
    return t[:n:k], tot[:n].reshape(-1, k).sum(1), bad[:n].reshape(-1, k).sum(1)


def warmup(learner: RunResult, oracle: RunResult, window_s: float) -> tuple[float | None, float]:
    """(warm-up length in s, or None = never; SLO attainment learner / oracle after it).

    Warm-up ends with the first window (of ``window_s``, the re-tune interval) after which the learner's attainment
    (1 - violation rate of the requests arriving in the window) stays >= 95% of the oracle's for the rest of the
    run. With no such window the attainment ratio is taken over the second half of the run.
    """
    t, tot, bad_l = _windows(learner, window_s)
    _, _, bad_o = _windows(oracle, window_s)
    att_l = np.where(tot > 0, 1 - bad_l / np.maximum(tot, 1), 1.0)
    att_o = np.where(tot > 0, 1 - bad_o / np.maximum(tot, 1), 1.0)
    ok = att_l >= 0.95 * att_o
    start = next((i for i in range(len(ok)) if ok[i:].all()), None)
    lo = start if start is not None else len(t) // 2
    after_l = 1 - bad_l[lo:].sum() / max(1, tot[lo:].sum())
    after_o = 1 - bad_o[lo:].sum() / max(1, tot[lo:].sum())
    return (None if start is None else float(t[start])), (float(after_l / after_o) if after_o > 0 else float("nan"))


def regret(learner: RunResult, oracle: RunResult, quantiles=(0.25, 0.5, 0.75, 1.0)) -> list[float]:
    """Cumulative (learner's violated requests - oracle's) / cumulative requests, at each quantile of the run."""
    _, tot, bad_l = violations_per_bin(learner)
    _, _, bad_o = violations_per_bin(oracle)
    cum = np.cumsum(bad_l - bad_o) / np.maximum(1, np.cumsum(tot))
    return [float(cum[max(0, int(len(cum) * q) - 1)]) for q in quantiles]


def regret_per_quarter(policy: RunResult, oracle: RunResult, parts: int = 4) -> list[float]:
    """(policy's violated - oracle's) / requests arriving in each of ``parts`` equal slices of the run."""
    _, tot, bad_p = violations_per_bin(policy)
    _, _, bad_o = violations_per_bin(oracle)
    out = []
    for idx in np.array_split(np.arange(len(tot)), parts):
        n = int(tot[idx].sum())
        out.append(float((bad_p[idx].sum() - bad_o[idx].sum()) / n) if n else 0.0)
    return out


RECOVERY_TOLERANCE = 0.02  # violation-rate points a policy may stay above its pre-event level and count recovered


def event_impact(res: RunResult, at_s: float, window_s: float, step_s: float, until_s: float,
                 oracle: RunResult | None = None) -> dict[str, float | None]:
    """Violations in the ``window_s`` before/after an event at ``at_s``, and the time to recover, judged per
    ``step_s`` window (the re-tune interval) up to ``until_s`` (module doc)."""
    t, tot, bad = violations_per_bin(res)
    k = max(1, int(round(step_s / res.interval_s)))

    def rate(lo: float, hi: float, b=bad) -> float:
        m = (t >= lo) & (t < hi)
        return float(b[m].sum() / tot[m].sum()) if tot[m].sum() else 0.0

    before = rate(at_s - window_s, at_s)
    after = rate(at_s, at_s + window_s)
    bad_o = violations_per_bin(oracle)[2] if oracle is not None else None
    starts = [x for x in t if at_s <= x < until_s][::k]
    ok = []
    for lo in starts:
        hi = min(lo + step_s, until_s)
        level = before if bad_o is None else max(before, rate(lo, hi, bad_o))
        ok.append(rate(lo, hi) <= level + RECOVERY_TOLERANCE)
    first = next((i for i in range(len(ok)) if all(ok[i:])), None)
    return {"before": before, "after": after,
            "recovery_s": None if first is None else float(starts[first] - at_s)}
