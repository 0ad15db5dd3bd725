"""How hard each scenario loads its cluster in a given world: the offered load, measured, against the load its
description promises (docs/simulator.md, "Scenarios": the load rule).

**Offered load** of a time window is the smallest ``rho`` such that a fluid assignment of the window's jobs to the
cluster's pools keeps every pool's devices at most ``rho`` busy (a linear programme per window). A job is priced on
each pool at its **least-charging feasible configuration under the simulator's truth** (the oracle's view: the
scenario's world, seed and drift events): a variant meeting the accuracy floor, a batch size and a concurrency whose
isolated p99 batch latency meets the SLO. The charge is the device share the engine itself books for a job
(``oltunes.sim.interval``: isolated busy time x concurrency slowdown / executors):

* a stream at ``r`` requests/s keeps each of its ``c`` executors busy ``min(1, r/c x T(1))`` (the engine batches
  greedily without waiting: below saturation batches stay near 1, above it they fill what the executor can take),
  or ``r/c x T(b)/b`` when even full batches cannot keep up (``T``: the mean batch latency with ``c`` executors);
* a batch job occupies one device from its submission until its items are done at the fewest device-seconds per
  item (capped at the run's end): a batch job never runs on more than one device;
* drift events count: slowed accelerators are priced slowed, lost devices leave the pool, outside tenants keep
  ``load`` of their devices.

``rho <= 1`` means a perfect fluid scheduler could serve the window; it is a lower bound on what a real placement
needs (one device per job, slots, interference and queueing come on top). Reported per scenario: the mean over
retune-interval windows, the peak over those windows and over control intervals (bursts), before/after the first
event, the streams' share of the work, the share of requests with no feasible configuration on any pool of the
cluster, and the share arriving while their stream needs more than one device everywhere (a stream is one
placement; the fluid split hides this, so it is checked apart): violations that no policy can avoid. ``--resize`` prints the multipliers on the streams' rates (and, for
a batch-heavy scenario, on the batch jobs' work) that bring the scenario to its class's target.

    .venv/bin/python -m benchmarks.scenario_load                          # shipped + held-out, grounded world
    .venv/bin/python -m benchmarks.scenario_load --world stress --json load.json
    .venv/bin/python -m benchmarks.scenario_load --scenarios my.yaml --heldout "" --class my=light --resize
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import linprog

from benchmarks.common import parser, print_table, write_json
from oltunes.sim.events import CoRunnerBurst, LoseDevices, SlowAccelerator
from oltunes.sim.perfmodel import PerformanceModel
from oltunes.sim.scenario import Scenario, load_scenario, shipped
from oltunes.simulation import Prepared, prepare

HELDOUT = Path(__file__).parent / "heldout"

# The load rule (docs/simulator.md): the offered load each description promises, as a band on the mean over
# retune windows (``target``: the middle, what a resize aims at). A bursty scenario is moderate on average (its
# bursts are the trace's own, never reshaped); a batch-heavy one has batch jobs carry at least BATCH_SHARE of the
# work (streams are sized to the rest).
CLASSES: dict[str, dict] = {
    "light": {"metric": "load_mean", "band": (0.2, 0.4)},
    "moderate": {"metric": "load_mean", "band": (0.4, 0.65)},
    "batch-heavy": {"metric": "load_mean", "band": (0.65, 0.95)},
    "bursty": {"metric": "load_mean", "band": (0.4, 0.65)},
    "overloaded": {"metric": "load_mean", "band": (1.15, 1.6)},
}
for _c in CLASSES.values():
    _c["target"] = round(sum(_c["band"]) / 2, 3)
BATCH_SHARE = 0.5
# below overload, at most this share of requests may come while their stream needs more than one device
OVER_ONE_DEVICE_MAX = 0.01

# The class each shipped and held-out scenario's description states (unseen scenarios: --class NAME=CLASS).
SCENARIO_CLASS = {
    "tiny": "light", "light": "light", "shift": "moderate", "bursty": "bursty",
    "heterogeneous-heavy": "batch-heavy", "overloaded": "overloaded",
    "a10-l4-wide": "bursty", "bursty-lost-gpus": "bursty", "code-llm": "moderate",
    "code-trace-older-gpus": "light", "medium-cpu-heavy": "moderate", "throttled-l4-noisy-neighbour": "moderate",
}


@dataclass
class Priced:
    """Each job's feasible configurations on each pool, for one epoch (between drift events)."""

    options: list[list[tuple[np.ndarray, np.ndarray] | None]]  # [job][pool]: (T(1) / c, T(b) / (b c)) or None
    devices: np.ndarray  # (pools,) devices available (tenants' load taken off)

    def per_item(self, j: int) -> np.ndarray:
        """(pools,) the fewest device-seconds per item (full batches), inf where nothing is feasible."""
        return np.array([np.inf if o is None else float(o[1].min()) for o in self.options[j]])

    def stream_share(self, j: int, rates: np.ndarray) -> np.ndarray:
        """(windows, pools) the device share the engine charges a stream at these rates (requests/s), at its
        least-charging feasible configuration: an executor at batch 1 is busy rate x T(1) (capped at 1: greedy
        batching then fills what the executor can take), or rate x T(b) / b when even full batches cannot keep up."""
        out = np.full((len(rates), len(self.options[j])), np.inf)
        for k, o in enumerate(self.options[j]):
            if o is not None:
                one, full = o
                out[:, k] = np.maximum(np.minimum(rates[:, None] * one, 1.0), rates[:, None] * full).min(axis=1)
        return out


def options(truth: PerformanceModel, p: Prepared, accelerators: list[str]) -> list[list]:
    """[job][pool]: the feasible configurations' (T(1) / c, T(b) / (b c)) in seconds per executor, where T is the
    mean batch latency with c executors (``None``: nothing meets the SLO and the accuracy floor there)."""
    sc = p.scenario
    variants = p.model.variants()
    batches = sorted({1, *sc.batch_sizes})
    out = []
    for job in p.jobs:
        spec = job.spec
        eligible = [v for v in variants if v.family == spec.family and v.accuracy >= spec.accuracy_floor - 1e-12]
        row = []
        for acc in accelerators:
            g = truth.grid(spec, acc, eligible, batches, sc.concurrencies)
            ok = g.p99_batch_ms <= spec.slo_ms
            ok[:, 0, :] &= np.isin(1, sc.batch_sizes)  # batch 1 prices the others even when not offered
            if not ok.any():
                row.append(None)
                continue
            c = g.concurrencies[None, None, :]
            one = np.broadcast_to(g.mean_batch_ms[:, :1, :] / 1000.0 / c, ok.shape)
            full = g.mean_batch_ms / 1000.0 / (g.batches[None, :, None] * c)
            row.append((one[ok], full[ok]))
        out.append(row)
    return out


def _epochs(sc: Scenario) -> list[float]:
    """Times at which the pricing or the devices change (the start and every drift event but rate steps)."""
    return sorted({0.0, *(e.at_s for e in sc.events if isinstance(e, (SlowAccelerator, LoseDevices, CoRunnerBurst)))})


def _priced(p: Prepared, t: float, cache: dict) -> Priced:
    """The pricing in force at time ``t`` (events before or at ``t`` applied)."""
    sc = p.scenario
    start = max(x for x in _epochs(sc) if x <= t)
    if start in cache:
        return cache[start]
    pools = sc.pool_list()
    truth = p.truth()
    devices = np.array([float(pl.count) for pl in pools])
    for e in sc.events:
        if isinstance(e, SlowAccelerator) and e.at_s <= start:
            truth.slow_down(e.accelerator, e.factor)
        elif isinstance(e, LoseDevices) and e.at_s <= start:
            k = [pl.name for pl in pools].index(e.pool)
            devices[k] = max(0.0, devices[k] - e.count)
        elif isinstance(e, CoRunnerBurst) and e.at_s <= start < e.at_s + e.duration_s:
            k = [pl.name for pl in pools].index(e.pool)
            devices[k] -= e.load * min(devices[k], e.devices or devices[k])
    cache[start] = Priced(options(truth, p, [pl.accelerator.name for pl in pools]), devices)
    return cache[start]


def fluid_rho(demand: np.ndarray, devices: np.ndarray) -> float:
    """Smallest max-utilisation of a fluid split of each job's demand (device-s/s, (jobs, pools)) over the pools."""
    jobs = np.flatnonzero(np.isfinite(demand).any(axis=1) & (np.nan_to_num(demand, posinf=0).max(axis=1) > 0))
    if len(jobs) == 0:
        return 0.0
    d = demand[jobs]
    n_j, n_p = d.shape
    # variables: x (n_j * n_p, row-major) then rho; minimise rho
    c = np.zeros(n_j * n_p + 1)
    c[-1] = 1.0
    a_eq = np.zeros((n_j, n_j * n_p + 1))
    for j in range(n_j):
        a_eq[j, j * n_p:(j + 1) * n_p] = 1.0
    a_ub = np.zeros((n_p, n_j * n_p + 1))
    for k in range(n_p):
        a_ub[k, k:n_j * n_p:n_p] = np.where(np.isfinite(d[:, k]), d[:, k], 0.0)
        a_ub[k, -1] = -max(devices[k], 1e-9)
    bounds = [(0.0, 0.0 if not np.isfinite(x) else None) for x in d.ravel()] + [(0.0, None)]
    r = linprog(c, A_ub=a_ub, b_ub=np.zeros(n_p), A_eq=a_eq, b_eq=np.ones(n_j), bounds=bounds, method="highs")
    if not r.success:
        raise RuntimeError(f"load LP failed: {r.message}")
    return float(r.x[-1])


def window_demands(p: Prepared, edges: np.ndarray, k: float = 1.0, cache: dict | None = None
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per window [edges[i], edges[i+1]): (demand (jobs, pools) in device shares, devices (pools,)), with every
    stream's rate times ``k`` (``cache``: the pricing per epoch, kept between calls)."""
    cache = {} if cache is None else cache
    starts = {}
    for t0 in edges[:-1]:
        pr = _priced(p, float(t0), cache)
        starts.setdefault(id(pr), (pr, []))[1].append(float(t0))
    out = [None] * (len(edges) - 1)
    index = {float(t): i for i, t in enumerate(edges[:-1])}
    span = np.diff(edges)
    for pr, ts in starts.values():
        rows = np.array([index[t] for t in ts])
        t0, t1 = edges[:-1][rows], edges[1:][rows]
        demand = np.zeros((len(rows), len(p.jobs), len(pr.devices)))
        for j, job in enumerate(p.jobs):
            if job.arrivals is not None:
                n = np.searchsorted(job.arrivals, t1) - np.searchsorted(job.arrivals, t0)
                demand[:, j] = pr.stream_share(j, k * n / span[rows])
            else:  # one device from submission until its items are done at this pool's price
                per_item = pr.per_item(j)
                end = job.submit_s + job.spec.items * np.where(np.isfinite(per_item), per_item, 0.0)
                busy = np.minimum(t1[:, None], end[None, :]) - np.maximum(t0, job.submit_s)[:, None]
                demand[:, j] = np.where(np.isfinite(per_item), np.clip(busy, 0.0, None) / span[rows][:, None], np.inf)
        for i, r in enumerate(rows):
            out[r] = (demand[i], pr.devices)
    return out


def _infeasible_share(p: Prepared) -> float:
    """Share of the run's requests whose job has no feasible configuration on any pool (at the start)."""
    pr = _priced(p, 0.0, {})
    total = sum(j.n_requests for j in p.jobs)
    bad = sum(job.n_requests for j, job in enumerate(p.jobs) if not np.isfinite(pr.per_item(j)).any())
    return bad / total if total else 0.0


class Load:
    """A scenario's workload, priced once; :meth:`summary` at any stream-rate multiplier."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.p = p = prepare(sc)
        self._cache: dict = {}
        self.streams = np.array([j.arrivals is not None for j in p.jobs])
        self.requests = int(sum(j.n_requests for j in p.jobs))
        self.infeasible = _infeasible_share(p)

    def rho(self, step: float, k: float) -> np.ndarray:
        """Offered load per window of ``step`` seconds with every stream's rate times ``k``."""
        windows = window_demands(self.p, _edges(self.sc, step), k, self._cache)
        return np.array([fluid_rho(d, n) for d, n in windows])

    def mean(self, k: float = 1.0) -> float:
        return float(self.rho(self.sc.retune_interval_s, k).mean())

    def over_one_device(self, k: float = 1.0) -> float:
        """Share of the requests that arrive while their stream needs more than one device on every pool (a stream
        is one placement: the fluid split cannot help it; no policy serves those windows in time)."""
        edges = _edges(self.sc, self.sc.control_interval_s)
        windows = window_demands(self.p, edges, k, self._cache)
        over = total = 0
        for (d, _), t0, t1 in zip(windows, edges[:-1], edges[1:]):
            for j in np.flatnonzero(self.streams):
                arr = self.p.jobs[j].arrivals
                n = int(np.searchsorted(arr, t1) - np.searchsorted(arr, t0))
                total += n
                over += n if d[j].min() > 1.0 else 0
        return over / total if total else 0.0

    def one_device_cap(self, k: float, tol: float = 0.02) -> float:
        """The largest multiplier up to ``k`` that keeps at most OVER_ONE_DEVICE_MAX of the requests on streams
        needing more than one device (on this realisation: check the rebuilt workload, whose copies differ)."""
        if self.over_one_device(k) <= OVER_ONE_DEVICE_MAX:
            return k
        lo, hi = k / 64, k
        while hi / lo > 1 + tol:
            mid = (lo * hi) ** 0.5
            lo, hi = (mid, hi) if self.over_one_device(mid) <= OVER_ONE_DEVICE_MAX else (lo, mid)
        return lo

    def summary(self, k: float = 1.0) -> dict:
        """The scenario's offered load (module docstring) with every stream's rate times ``k``."""
        sc, streams = self.sc, self.streams
        rho, rho_c = self.rho(sc.retune_interval_s, k), self.rho(sc.control_interval_s, k)
        starts = _edges(sc, sc.retune_interval_s)[:-1]
        first = min((e.at_s for e in sc.events), default=None)
        # each job's share at its least-charging pool, summed over the run: how much of it is streaming
        windows = window_demands(self.p, _edges(sc, sc.retune_interval_s), k, self._cache)
        with np.errstate(all="ignore"):
            work = np.nan_to_num(np.array([np.where(np.isfinite(d), d, np.nan).min(axis=1) for d, _ in windows]))
        work = work.sum(axis=0)
        return {
            "devices": int(sum(pl.count for pl in sc.pool_list())),
            "streams": int(streams.sum()), "batch_jobs": int((~streams).sum()), "requests": self.requests,
            "load_mean": float(rho.mean()), "load_peak": float(rho.max()), "load_peak_control": float(rho_c.max()),
            "load_before_event": float(rho[starts < first].mean()) if first is not None else None,
            "load_after_event": float(rho[starts >= first].mean()) if first is not None else None,
            "stream_share": float(work[streams].sum() / work.sum()) if work.sum() > 0 else 0.0,
            "infeasible_request_share": self.infeasible,
            "over_one_device_share": self.over_one_device(k),
        }

    def stream_factor(self, metric: str, target: float, tol: float = 0.01) -> float:
        """The multiplier on every stream's rate that brings ``metric`` to ``target`` (the load rises with it)."""
        lo, hi = 1 / 64, 256.0
        while hi / lo > 1 + tol:
            mid = (lo * hi) ** 0.5
            lo, hi = (mid, hi) if self.summary(mid)[metric] < target else (lo, mid)
        return (lo * hi) ** 0.5


def with_batch_factor(sc: Scenario, m: float) -> Scenario:
    """The scenario with every batch job's work times ``m`` (items per trace GPU-second and both bounds)."""
    batch = [b.model_copy(update={"items_per_gpu_second": b.items_per_gpu_second * m,
                                  "min_items": max(1, round(b.min_items * m)), "max_items": max(1, round(b.max_items * m))})
             for b in sc.workload.batch]
    return sc.model_copy(update={"workload": sc.workload.model_copy(update={"batch": batch})})


def resize(sc: Scenario, cls: str, tol: float = 0.02) -> dict:
    """Stream-rate and batch-work multipliers that size the scenario to its class (the load rule); below overload
    the stream multiplier is capped where a stream would need more than one device."""
    spec = CLASSES[cls]
    if cls != "batch-heavy" or not sc.workload.batch:
        load = Load(sc)
        k = load.stream_factor(spec["metric"], spec["target"])
        return {"stream_factor": k if cls == "overloaded" else min(k, load.one_device_cap(k)), "batch_factor": 1.0}
    k = Load(sc).stream_factor("load_mean", spec["target"] * (1 - BATCH_SHARE))
    lo, hi = 1.0, 4096.0
    while hi / lo > 1 + tol:
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if Load(with_batch_factor(sc, mid)).summary(k)["load_mean"] < spec["target"] else (lo, mid)
    return {"stream_factor": k, "batch_factor": (lo * hi) ** 0.5}


def _edges(sc: Scenario, step: float) -> np.ndarray:
    return np.append(np.arange(0.0, sc.duration_s, step), sc.duration_s)


def verdict(cls: str | None, m: dict) -> str:
    """``ok`` when the measured load falls in the class's band (and its extra conditions), else ``off``."""
    if cls is None:
        return "?"
    spec = CLASSES[cls]
    lo, hi = spec["band"]
    ok = lo <= m[spec["metric"]] <= hi
    if cls != "overloaded":
        ok &= m["over_one_device_share"] <= OVER_ONE_DEVICE_MAX
    if cls == "batch-heavy":
        ok &= 1 - m["stream_share"] >= BATCH_SHARE - 0.05
    return "ok" if ok else "off"


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(shipped()), help="comma-separated shipped names or files")
    ap.add_argument("--heldout", default=",".join(str(x) for x in sorted(HELDOUT.glob("*.yaml"))),
                    help="comma-separated held-out scenario files")
    ap.add_argument("--world", choices=("grounded", "stress"), default="grounded", help="the simulator's world")
    ap.add_argument("--class", dest="classes", default="", help="NAME=CLASS,... for scenarios not listed here")
    ap.add_argument("--resize", action="store_true",
                    help="also print the stream-rate (and batch-work) multipliers that size each scenario to its class")
    a = ap.parse_args()
    classes = dict(SCENARIO_CLASS, **dict(x.split("=", 1) for x in a.classes.split(",") if x))
    rows, out = [], {}
    for name in [n for n in (a.scenarios + "," + a.heldout).split(",") if n]:
        sc = load_scenario(name)
        sc = sc.model_copy(update={"world": a.world})
        load = Load(sc)
        m = load.summary()
        cls = classes.get(sc.name)
        m.update({"class": cls, "verdict": verdict(cls, m)})
        if a.resize and cls is not None:
            m["resize"] = {k: round(v, 3) for k, v in resize(sc, cls).items()}
        out[sc.name] = m
        ev = (f'{m["load_before_event"]:.2f}/{m["load_after_event"]:.2f}' if m["load_before_event"] is not None
              else "-")
        rows.append([sc.name, m["devices"], m["streams"], m["batch_jobs"], m["load_mean"], m["load_peak"],
                     m["load_peak_control"], ev, m["stream_share"], m["infeasible_request_share"], m["over_one_device_share"], cls or "?",
                     m["verdict"], " ".join(f"{v:g}" for v in m.get("resize", {}).values())])
    print_table(f"Offered load (fluid, cheapest feasible configuration under the truth), {a.world} world",
                ["scenario", "devices", "streams", "batch", "mean", "peak", "peak 5s", "before/after event",
                 "stream share", "infeasible", "over 1 device", "class", "verdict", "x streams x batch"], rows)
    write_json(a.json, {"world": a.world, "classes": CLASSES, "batch_share": BATCH_SHARE, "over_one_device_max": OVER_ONE_DEVICE_MAX, "scenarios": out})


if __name__ == "__main__":
    main()
