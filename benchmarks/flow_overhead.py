"""Flow overhead: the batch flow vs the bare worker on the same job, and the streaming path's added p99.

Batch: each round runs the batch flow (tuner, Prefect tasks, MLflow run, telemetry, observe; the Prefect
ephemeral API already up) and then the bare worker CLI with the very candidate the flow chose, same dataset,
same single part; the ratio flow wall / bare wall is taken per round and the median reported. Goal: <= 1.10
for a 60 s job (``--items`` sets the job length; the default is a shorter job, so overhead weighs more).

Streaming: a constant-rate arrival trace replayed (a) by the streaming flow and (b) by the same load generator
against a bare serving worker with the flow's candidate; added p99 = flow p99 - bare p99 (client side, HTTP
included), median over rounds. Goal: <= 2 ms.

    .venv/bin/python -m benchmarks.flow_overhead --json benchmarks/results/flow_overhead.json
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import median, parser, print_table, write_json


def _bare_batch(candidate, data: Path, out: Path, shard_size: int) -> float:
    import subprocess

    from oltunes.inventory import load_inventory
    from oltunes.config import REPO_ROOT
    from oltunes.launchers import pool_cores

    pool = {p.name: p for p in load_inventory(REPO_ROOT / "infra/inventory.local.yaml")}[candidate.pool]
    cores = pool_cores(pool)
    argv = ["taskset", "-c", ",".join(map(str, cores)), sys.executable, "-m", "oltunes.worker", "batch",
            "--model", candidate.variant.path, "--input", str(data), "--output", str(out),
            "--batch-size", str(candidate.batch_size), "--concurrency", str(candidate.concurrency),
            "--threads", str(len(cores)), "--shard-size", str(shard_size), "--report", str(out / "report.json")]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


async def _bare_stream(candidate, trace: Path, duration_s: float, workdir: Path) -> dict[str, float]:
    import httpx

    from oltunes.config import REPO_ROOT
    from oltunes.inventory import load_inventory
    from oltunes.launchers import Launcher, WorkerSpec
    from oltunes.launchers.gateway_serving import request_inputs
    from oltunes.launchers.traffic import LoadGenerator, load_arrivals, oip_payloads
    from oltunes.types import JobSpec

    pool = {p.name: p for p in load_inventory(REPO_ROOT / "infra/inventory.local.yaml")}[candidate.pool]
    launcher = Launcher.make("local")
    spec = WorkerSpec(mode="serve", job=JobSpec(family=candidate.variant.family, slo_ms=100), candidate=candidate,
                      pool=pool, run_dir=workdir / "_run", max_delay_ms=2.0)  # fmt: skip
    h = launcher.start(spec)
    try:
        launcher.ready(h, 90)
        family = candidate.variant.family
        meta = httpx.get(f"{h.url}/v2/models/{family}", timeout=30).json()
        gen = LoadGenerator(h.url, family, load_arrivals(trace, duration_s=duration_s), oip_payloads(request_inputs(family, workdir), meta))
        await gen.run(asyncio.Event())
        return gen.latency_summary()
    finally:
        launcher.stop(h, 10)


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=150_000, help="batch job size (the goal is stated for a 60 s job)")
    ap.add_argument("--family", default="transformer", help="batch job's model family")
    ap.add_argument("--accuracy-floor", type=float, default=0.965,
                    help="batch job's floor (0.965 admits only the large transformer: a job of about a minute)")
    ap.add_argument("--stream-family", default="cnn")
    ap.add_argument("--skip-batch", action="store_true", help="only the streaming comparison")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=50.0, help="streaming request rate (req/s)")
    ap.add_argument("--stream-seconds", type=float, default=20.0)
    args = ap.parse_args()

    from oltunes.config import apply_offline_env, get_settings

    apply_offline_env()
    tmp = Path(tempfile.mkdtemp(prefix="oltunes-bench-"))
    os.environ.setdefault("OLTUNES_HOME", str(tmp / "home"))
    get_settings.cache_clear()
    from flows.demo import use_embedded_prefect

    use_embedded_prefect()
    from flows.batch_inference import batch_inference
    from flows.streaming_inference import streaming_inference
    from oltunes.zoo import build_zoo, make_dataset

    build_zoo(families=sorted({args.family, args.stream_family}))
    if args.skip_batch:
        args.items = 2000  # the warm-up job only
    data = make_dataset(args.family, args.items, tmp / "in.parquet", seed=0)

    # warm-up: starts Prefect's ephemeral API and creates the MLflow store (one-time costs, reported apart)
    t0 = time.perf_counter()
    asyncio.run(batch_inference(family=args.family, dataset=str(data), output=str(tmp / "warm"), slo_ms=1000.0,
                                accuracy_floor=args.accuracy_floor, items_per_worker=args.items, shard_size=5000))  # fmt: skip
    startup_s = time.perf_counter() - t0

    rows, ratios, extra_s, bare_walls = [], [], [], []
    for k in range(0 if args.skip_batch else args.rounds):
        t0 = time.perf_counter()
        res = asyncio.run(batch_inference(family=args.family, dataset=str(data), output=str(tmp / f"flow-{k}"), slo_ms=1000.0,
                                          accuracy_floor=args.accuracy_floor, items_per_worker=args.items, shard_size=5000))  # fmt: skip
        flow_s = time.perf_counter() - t0
        bare_s = _bare_batch(res.decision.candidate, data, tmp / f"bare-{k}", 5000)
        ratios.append(flow_s / bare_s)
        extra_s.append(flow_s - bare_s)
        bare_walls.append(bare_s)
        rows.append(["batch wall s", k, res.decision.candidate.key, round(bare_s, 3), round(flow_s, 3), round(flow_s / bare_s, 4)])

    # constant-rate trace, proteus format (arrival_ms,count,slo_ms)
    trace = tmp / "constant.csv"
    n = int(args.rate * args.stream_seconds)
    trace.write_text("".join(f"{int(i * 1000 / args.rate)},1,100\n" for i in range(n)))
    added = []
    for k in range(args.rounds):
        # The bare worker serves the very candidate the flow chose (the tuner may choose another each round).
        st = asyncio.run(streaming_inference(family=args.stream_family, slo_ms=100.0, trace=str(trace), speedup=1.0,
                                             duration_s=args.stream_seconds, control_interval_s=args.stream_seconds,
                                             service_id=f"bench-{k}-{int(time.time())}"))  # fmt: skip
        bare = asyncio.run(_bare_stream(st.decisions[0].candidate, trace, args.stream_seconds, tmp / f"serve-{k}"))
        d = st.request_latency["p99_ms"] - bare["p99_ms"]
        added.append(d)
        rows.append(["stream p99 ms", k, st.decisions[0].candidate.key, round(bare["p99_ms"], 3), round(st.request_latency["p99_ms"], 3), round(d, 3)])

    print_table("Flow overhead: bare worker vs flow (batch: wall s, ratio; streaming: client p99 ms, added ms)",
                ["path", "round", "candidate", "bare", "flow", "ratio / added"], rows)  # fmt: skip
    summary = {
        "batch_items": args.items,
        "batch_family": args.family,
        "batch_accuracy_floor": args.accuracy_floor,
        "batch_bare_wall_s_median": median(bare_walls) if bare_walls else None,
        "batch_overhead_ratio_median": median(ratios) if ratios else None,
        "batch_overhead_s_median": median(extra_s) if extra_s else None,
        "batch_projected_ratio_60s_job": 1 + median(extra_s) / 60.0 if extra_s else None,
        "batch_goal": "<= 1.10 for a 60 s job",
        "stream_rate_rps": args.rate,
        "stream_added_p99_ms_median": median(added),
        "stream_goal_ms": 2.0,
        "one_time_startup_s": startup_s,
        "rows": rows,
    }
    if ratios:
        print(f"batch flow/bare median ratio {summary['batch_overhead_ratio_median']:.3f} ({args.items} items, bare "
              f"{summary['batch_bare_wall_s_median']:.1f} s; +{summary['batch_overhead_s_median']:.2f} s -> "
              f"{summary['batch_projected_ratio_60s_job']:.3f} projected for a 60 s job)")  # fmt: skip
    print(f"streaming added p99 median {summary['stream_added_p99_ms_median']:.2f} ms at {args.rate:g} req/s; "
          f"one-time start-up {startup_s:.1f} s")  # fmt: skip
    write_json(args.json, summary)


if __name__ == "__main__":
    main()
