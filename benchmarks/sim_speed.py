"""Simulator speed: simulated requests per second of wall time, how it grows with cluster size and requests, and
(for a learning policy) where the time goes: the engine, the policy's decisions, its observations.

Goals: issue 4, 1,000 accelerators and 1,000,000 requests in <= 60 s on 2 cores (``static-profile``); issue 14,
under ``--policy oltunes``, 1M requests on 1,000 devices in <= 10 s and 10M requests on 10,000 devices in <= 120 s.
Workload: Proteus "equal gamma" streams (one per device on 90 % of the devices, all nine families), rate-scaled to
hit the request count, over 120 simulated seconds (observed every 5 s, re-tuned every 30 s). The served share is
reported. Run from the repo root:

    .venv/bin/python -m benchmarks.sim_speed --policy oltunes --json benchmarks/results/sim_speed.json
    .venv/bin/python -m benchmarks.sim_speed --policy oltunes --large   # adds 10M requests on 10,000 devices
    .venv/bin/python -m benchmarks.sim_speed --policy oltunes --repeats 3   # each row the median of 3 runs

Times are the simulation's CPU time (``time.process_time``: it moves less with the machine's load than wall time),
split into the policy's ``decide`` and ``observe`` calls and the rest (the engine); wall time is reported beside it.
The first measurement of a policy in a process first simulates a small cluster (``WARMUP``) under that policy, off
the clock and reported apart (``warmup_cpu_s``, the same in every row): the process's one-off start-up (imports,
first allocations).
"""

from __future__ import annotations

import functools
import math
import time

from benchmarks.common import parser, print_table, write_json
from oltunes.policies import Policy
from oltunes.sim.metrics import compute
from oltunes.sim.scenario import scenario_from_data
from oltunes.simulation import context, prepare, simulator

MIX = (("cpu", 0.15), ("t4", 0.25), ("l4", 0.15), ("v100", 0.15), ("a100", 0.2), ("h100", 0.1))
BASE_RPS = 28.8  # mean request rate of one equal_gamma_300 stream at rate_scale 1
FAMILIES = 9
# (devices, requests) -> goal in seconds, per policy kind: issue 4 for a static policy, issue 14 for a learning one
GOALS = {"static": {(1000, 1_000_000): 60.0}, "learning": {(1000, 1_000_000): 10.0, (10_000, 10_000_000): 120.0}}


def scenario(devices: int, requests: int, duration_s: float = 120.0, seed: int = 0, boost: float = 1.0):
    counts = [max(1, round(devices * f)) for _, f in MIX]
    counts[0] += devices - sum(counts)
    streams = int(devices * 0.9)  # leave room: static-profile never co-locates
    replicas = math.ceil(streams / FAMILIES)
    rate = boost * requests / (replicas * FAMILIES * BASE_RPS * duration_s)
    return scenario_from_data({
        "name": f"speed-{devices}-{requests}",
        "seed": seed,
        "duration_s": duration_s,
        "control_interval_s": 5,
        "retune_interval_s": 30,
        "pools": [{"name": n, "accelerator": n, "count": c} for (n, _), c in zip(MIX, counts)],
        "workload": {"streaming": [{"trace": "proteus", "scenario": "equal_gamma_300", "replicas": replicas,
                                    "rate_scale": rate}]},
    })


class TimedPolicy:
    """A policy whose ``decide`` and ``observe`` (or ``observe_many``: one count per measurement) calls are counted
    and timed (CPU seconds); the rest is the policy's own."""

    def __init__(self, inner: Policy) -> None:
        self._inner = inner
        self.calls = {"decide": 0, "observe": 0}
        self.cpu_s = {"decide": 0.0, "observe": 0.0}

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def _timed(self, what: str, fn, *args, calls: int = 1, **kwargs):
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            self.cpu_s[what] += time.process_time() - t0
            self.calls[what] += calls

    def decide(self, *args, **kwargs):
        return self._timed("decide", self._inner.decide, *args, **kwargs)

    def observe(self, *args, **kwargs):
        return self._timed("observe", self._inner.observe, *args, **kwargs)

    def observe_many(self, ms):  # the engine reports a control interval's measurements together: counted each
        return self._timed("observe", self._inner.observe_many, ms, calls=len(ms))


WARMUP = (20, 5_000)  # devices, requests: every compiled path of the policy and the engine (~0.5 s once loaded)


@functools.cache  # once per policy and process
def warm_up(policy: str) -> float:
    """CPU seconds of a small simulation under ``policy``: the process's one-off start-up, off the clock."""
    prep = prepare(scenario(*WARMUP))
    sim = simulator(prep)
    cpu0 = time.process_time()
    sim.run(Policy.make(policy, ctx=context(prep, sim.model, sim.cluster)))
    return time.process_time() - cpu0


def workload(devices: int, requests: int):
    """``scenario(devices, requests)`` prepared; thinning is random, so topped up once to really hold >= ``requests``."""
    prep = prepare(scenario(devices, requests))
    if prep.n_requests < requests:
        prep = prepare(scenario(devices, requests, boost=1.01 * requests / prep.n_requests))
    return prep


def timed_simulation(prep, policy: str):
    """A simulator of ``prep`` and ``policy`` wrapped to count and time its calls (``TimedPolicy``)."""
    sim = simulator(prep)
    return sim, TimedPolicy(Policy.make(policy, ctx=context(prep, sim.model, sim.cluster)))


def measure(devices: int, requests: int, policy: str) -> dict:
    warmup_cpu_s = warm_up(policy)
    t0 = time.perf_counter()
    prep = workload(devices, requests)
    build_s = time.perf_counter() - t0
    sim, timed = timed_simulation(prep, policy)
    cpu0 = time.process_time()
    res = sim.run(timed)
    cpu_s = time.process_time() - cpu0
    return {
        "devices": devices,
        "requests": prep.n_requests,
        "jobs": len(prep.jobs),
        "workload_build_s": build_s,
        "warmup_cpu_s": warmup_cpu_s,
        "sim_s": res.wall_s,
        "sim_cpu_s": cpu_s,
        "decide_cpu_s": timed.cpu_s["decide"],
        "observe_cpu_s": timed.cpu_s["observe"],
        "engine_cpu_s": cpu_s - timed.cpu_s["decide"] - timed.cpu_s["observe"],
        "decisions": timed.calls["decide"],
        "observations": timed.calls["observe"],
        "total_s": build_s + res.wall_s,
        "sim_requests_per_s": prep.n_requests / res.wall_s,
        "served_share": 1.0 - compute(res)["dropped_rate"],
    }


def median_run(runs: list[dict]) -> dict:
    """The run in the middle by total time (the lower middle of an even count), with every run's total beside it:
    one whole run's figures, so its parts still add up."""
    ordered = sorted(runs, key=lambda r: r["total_s"])
    return {**ordered[(len(ordered) - 1) // 2], "total_s_runs": [r["total_s"] for r in runs]}


def goal_of(policy: str, devices: int, requests: int) -> float | None:
    kind = "learning" if Policy.lookup(policy).learns else "static"
    return GOALS[kind].get((devices, requests))


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--policy", default="static-profile")
    p.add_argument("--quick", action="store_true", help="ten times smaller (smoke run)")
    p.add_argument("--large", action="store_true", help="also 10M requests on 10,000 devices (minutes)")
    p.add_argument("--repeats", type=int, default=1, help="runs per size; the row is the median run (by total s)")
    a = p.parse_args()
    k = 10 if a.quick else 1
    sizes = [("headline", 1000, 1_000_000)]
    sizes += [("by devices", d, 250_000) for d in (250, 500, 1000)]
    sizes += [("by requests", 1000, r) for r in (250_000, 500_000)]
    if a.large:
        sizes += [("by devices", 10_000, 10_000_000)]
    rows, cols = [], ["series", "devices", "requests", "jobs", "decisions", "observations", "sim s", "sim CPU s",
                      "decide CPU s", "observe CPU s", "engine CPU s", "warm-up CPU s", "served", "goal s", "met"]
    for series, devices, requests in sizes:
        r = median_run([measure(devices // k, requests // k, a.policy) for _ in range(max(1, a.repeats))])
        goal = goal_of(a.policy, devices // k, requests // k)
        r.update(series=series, goal_s=goal, goal_met=None if goal is None else r["total_s"] <= goal)
        rows.append(r)
        runs = ", ".join(f"{t:.1f}" for t in r["total_s_runs"])
        print(f"{series}: {r['devices']} devices, {r['requests']:,} requests: {r['total_s']:.1f} s (runs: {runs})",
              flush=True)
    keys = ("series", "devices", "requests", "jobs", "decisions", "observations", "sim_s", "sim_cpu_s",
            "decide_cpu_s", "observe_cpu_s", "engine_cpu_s", "warmup_cpu_s", "served_share", "goal_s", "goal_met")
    print_table(f"simulator speed ({a.policy}); total = workload build + simulation", cols,
                [[r[c] if r[c] is not None else "-" for c in keys] for r in rows])
    write_json(a.json, {"policy": a.policy, "headline": rows[0], "rows": rows,
                        "goal_met": all(r["goal_met"] for r in rows if r["goal_met"] is not None)})


if __name__ == "__main__":
    main()
