"""Simulated streaming at one configuration under rising load: the event engine (what the streaming flow's
``simulated`` environment serves with now) beside the closed-form model it replaced (``PerformanceModel.measure``
per interval, no queue).

resnet at batch 8 on one T4 (`tests.launchers.test_sim_serving.fixed_configuration`), Poisson arrivals at a
multiple of its capacity, SLO 1 s (shed after 5 x SLO); medians over seeds of the per-interval values.

    .venv/bin/python -m benchmarks.sim_serving --json benchmarks/results/sim_serving.json
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import median, parser, print_table, write_json


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--loads", default="0.25,0.5,0.8,1.0,1.5,2.0")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--interval", type=float, default=5.0)
    args = p.parse_args()

    from tests.launchers.test_sim_serving import BATCH, POOL, fixed_configuration, serve_at_load

    from oltunes.types import Candidate, JobSpec

    model, variant, capacity = fixed_configuration()
    cand = Candidate(pool=POOL, accelerator="t4", variant=variant, batch_size=BATCH, concurrency=1)
    rows, out = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for load in (float(x) for x in args.loads.split(",")):
            p99, queue, dropped, closed = [], [], [], []
            for seed in range(args.seeds):
                ivs, report = serve_at_load(load, seed, Path(tmp), args.duration, args.interval)
                p99 += [iv.measurement.request_latency_p99_ms for iv in ivs]
                queue += [iv.measurement.queueing_delay_ms for iv in ivs]
                dropped.append(report.requests["failed"] / max(report.requests["sent"], 1))
                rng = np.random.default_rng(seed)
                job = JobSpec(family="resnet", kind="streaming", slo_ms=1000.0, arrival_rate_rps=load * capacity)
                n = max(1, int(load * capacity * args.interval))
                closed += [model.measure(job, cand, items=n, rng=rng).latency_p99_ms for _ in ivs]
            r = {"load": load, "offered_rps": load * capacity, "engine_request_p99_ms": median(p99),
                 "engine_queueing_ms": median(queue), "engine_dropped": median(dropped), "closed_form_p99_ms": median(closed)}
            out.append(r)
            rows.append([f"{load:.2f}x", f"{r['offered_rps']:.1f}", r["engine_request_p99_ms"], r["engine_queueing_ms"],
                         f"{r['engine_dropped']:.1%}", r["closed_form_p99_ms"]])  # fmt: skip
    print_table(f"resnet b{BATCH} on one T4 (capacity {capacity:.1f} req/s), {args.seeds} seeds, medians",
                ["load", "offered req/s", "engine: request p99 ms", "engine: queueing ms", "engine: shed",
                 "closed form: p99 ms"], rows)  # fmt: skip
    write_json(args.json, {"capacity_rps": capacity, "seeds": args.seeds, "duration_s": args.duration, "rows": out})


if __name__ == "__main__":
    main()
