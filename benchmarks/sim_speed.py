"""Simulator speed: simulated requests per second of wall time, and how it grows with cluster size and requests.

Goal (issue 4): 1,000 accelerators and 1,000,000 requests in <= 60 s on 2 cores. Workload: Proteus "equal gamma"
streams (one per device, all nine families), rate-scaled to hit the request count, over 120 simulated seconds,
placed by ``static-profile`` (cheap to decide, and it picks variants that can keep up, so most requests are really
batched and served rather than shed in bulk — the served share is reported). Run from the repo root:

    .venv/bin/python -m benchmarks.sim_speed --json benchmarks/results/sim_speed.json
"""

from __future__ import annotations

import math
import time

from benchmarks.common import parser, print_table, write_json
from oltunes.sim.metrics import compute
from oltunes.simulation import prepare, run_policy
from oltunes.sim.scenario import scenario_from_data

MIX = (("cpu", 0.15), ("t4", 0.25), ("l4", 0.15), ("v100", 0.15), ("a100", 0.2), ("h100", 0.1))
BASE_RPS = 28.8  # mean request rate of one equal_gamma_300 stream at rate_scale 1
FAMILIES = 9


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


def measure(devices: int, requests: int, policy: str) -> dict:
    t0 = time.perf_counter()
    prep = prepare(scenario(devices, requests))
    if prep.n_requests < requests:  # thinning is random: top up once so the run really has >= the target
        prep = prepare(scenario(devices, requests, boost=1.01 * requests / prep.n_requests))
    build_s = time.perf_counter() - t0
    cpu0 = time.process_time()
    res = run_policy(prep, policy)
    cpu_s = time.process_time() - cpu0  # the machine is shared: CPU time moves less with load than wall time
    return {
        "devices": devices,
        "requests": prep.n_requests,
        "jobs": len(prep.jobs),
        "workload_build_s": build_s,
        "sim_s": res.wall_s,
        "sim_cpu_s": cpu_s,
        "total_s": build_s + res.wall_s,
        "sim_requests_per_s": prep.n_requests / res.wall_s,
        "served_share": 1.0 - compute(res)["dropped_rate"],
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--policy", default="static-profile")
    p.add_argument("--quick", action="store_true", help="ten times smaller (smoke run)")
    a = p.parse_args()
    k = 10 if a.quick else 1
    head = measure(1000 // k, 1_000_000 // k, a.policy)
    by_devices = [measure(d // k, 250_000 // k, a.policy) for d in (250, 500, 1000)]
    by_requests = [measure(1000 // k, r // k, a.policy) for r in (250_000, 500_000, 1_000_000)]
    cols = ["series", "devices", "requests", "jobs", "build s", "sim s", "sim CPU s", "total s", "sim req/s", "served"]
    keys = ("devices", "requests", "jobs", "workload_build_s", "sim_s", "sim_cpu_s", "total_s", "sim_requests_per_s",
            "served_share")
    rows = [["headline", *[head[c] for c in keys]]]
    for name, series in (("by devices", by_devices), ("by requests", by_requests)):
        rows += [[name, *[r[c] for c in keys]] for r in series]
    print_table(f"simulator speed ({a.policy}); goal: 1,000 devices x 1M requests <= 60 s", cols, rows)
    print(f"headline: {head['requests']:,} requests on {head['devices']} devices in {head['total_s']:.1f} s "
          f"(goal <= 60 s): {'MET' if head['total_s'] <= 60 else 'NOT MET'}")
    write_json(a.json, {"policy": a.policy, "headline": head, "by_devices": by_devices, "by_requests": by_requests,
                        "goal_met": head["total_s"] <= 60})


if __name__ == "__main__":
    main()
