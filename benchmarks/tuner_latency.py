"""Tuner speed: recommend p50/p99 in-process and over HTTP on loopback, and the observe() rate.

Set-up (synthetic, seeded): 10 pools built from ``inventory.CATALOG`` (each accelerator type once, A100 and T4
twice) with two jobs already placed on each, 18 variants (2 families x 3 sizes x 3 precisions, accuracies
0.89-0.98), batch sizes 1-16 and concurrencies 1-4: 10 x 18 x 5 x 4 = 3,600 configurations. A job names one
family (9 variants) and the tuner considers up to two devices per pool (an empty one and the fullest with a
free slot), so it scores ~3,000 candidates per call (``n_candidates_per_job``). The tuner is warmed with
``--warm`` measurements from a simple synthetic performance model first, so the FM path is timed, not only
the prior.

In-process and HTTP calls alternate in rounds (same tuner, same jobs) so that machine noise hits both alike.
HTTP goes through `TunerClient` (a keep-alive httpx client) to a real uvicorn server running `create_app` in
a thread of this process. The server-side time of each recommend is recorded too, so the HTTP stack's own
cost per call (``http_overhead_*``: client encode + loopback + FastAPI + decode) is reported apart from the
tuner's, and the service app's own share of it (``service_app_overhead_*``: the same requests sent straight
into the ASGI app, no sockets). The 1-minute load average is recorded because the machine is shared: when more
processes are runnable than there are cores, each of the two thread wake-ups per HTTP call can wait for a
scheduler slice, which no code in this process can avoid.

Goals (issue 3): p99 <= 1 ms in-process, <= 5 ms over HTTP, observe >= 2,000/s.

At cluster scale (issue 14) the same tuner recommends on 40 pools (the catalogue's accelerators in turn) of
1,000 and 10,000 devices in all, a quarter of the devices running one job each (placed on random devices):
``recommend_p{50,99}_ms_{1k,10k}_devices`` are medians over ``--scale-repeats`` runs of in-process percentiles.
Goals: <= 2 ms at 1k devices, <= 5 ms at 10k. Alternating with those calls, the same recommends on copies of the
cluster made of new placement objects (``..._fresh_objects``: what the HTTP service sees, so the tuner's occupancy
index is rebuilt from every placement instead of synced by what changed) show what the incremental index saves,
and the same recommends each after a new observation (``..._after_observe``) what a decision costs when nothing
scored before may be reused (the tuner keeps scored grids per family, job kind and rate, and option signature,
until the next observation; the 64 jobs here share six such keys).

Run: ``.venv/bin/python -m benchmarks.tuner_latency --json benchmarks/results/tuner_latency.json``
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

import numpy as np

from benchmarks.common import parser, print_table, write_json
from benchmarks.tuner_workload import (
    BATCHES,
    CONCURRENCIES,
    SCALE_DEVICES,
    SCALE_POOLS,
    scale_cluster,
    synthetic_jobs,
    synthetic_measurement,
    synthetic_tuner,
)
from oltunes.tuner import Tuner
from oltunes.service.api import RecommendRequest, RecommendResponse
from oltunes.client.tuner_client import TunerClient
from oltunes.service.app import create_app, serve_in_thread
from oltunes.types import ClusterState, JobSpec, Measurement

GOALS = {"recommend_p99_ms_inprocess": 1.0, "recommend_p99_ms_http": 5.0, "observe_per_s": 2000.0,
         "recommend_p99_ms_1k_devices": 2.0, "recommend_p99_ms_10k_devices": 5.0}
def scale_latency_ms(tuner: Tuner, cluster: ClusterState, jobs: list[JobSpec], calls: int,
                     repeats: int, learn: list[Measurement], copies: int = 4) -> dict[str, tuple[float, float]]:
    """Medians over ``repeats`` of the in-process recommend (p50, p99) on ``cluster`` (after warm-up calls), side
    by side (alternating calls): ``same`` = the same placement objects every call (a long-lived caller: the
    tuner's occupancy index syncs by what changed, here nothing), ``fresh`` = new objects every call (what the
    HTTP service sees: the index is rebuilt, the cost of grouping every placement), ``observed`` = the same
    objects, but a new observation (untimed) before every call, so nothing scored before it may be reused (what
    a simulator or a busy service that learns between decisions sees). Each path has its own copy of the tuner
    (same learned state), so one path's calls do not disturb another's index or caches."""
    fresh = [ClusterState.model_construct(pools=cluster.pools, placements=[p.model_copy() for p in cluster.placements])
             for _ in range(copies)]
    twin = Tuner.from_state_dict(tuner.state_dict())
    learner = Tuner.from_state_dict(tuner.state_dict())
    for job in jobs:  # warm-up: every job once on each path (first-call memos)
        tuner.decide(job, cluster)
        twin.decide(job, fresh[0])
        learner.decide(job, cluster)
    runs: dict[str, list[list[float]]] = {"same": [], "fresh": [], "same_cpu": [], "observed": []}
    n = 0
    for _ in range(repeats):
        same_t, fresh_t, cpu_t, obs_t = [], [], [], []
        for i in range(calls):
            job = jobs[i % len(jobs)]
            c0 = time.thread_time()
            same_t.append(_timed(lambda: tuner.decide(job, cluster)))
            cpu_t.append((time.thread_time() - c0) * 1e3)  # CPU time: what a loaded machine's queue does not add
            fresh_t.append(_timed(lambda: twin.decide(job, fresh[i % copies])))
            learner.observe(learn[n % len(learn)])
            n += 1
            obs_t.append(_timed(lambda: learner.decide(job, cluster)))
        runs["same"].append(same_t)
        runs["fresh"].append(fresh_t)
        runs["same_cpu"].append(cpu_t)
        runs["observed"].append(obs_t)
    return {k: (float(np.median([pct(r, 50) for r in rs])), float(np.median([pct(r, 99) for r in rs])))
            for k, rs in runs.items()}


class _ServerSideTimer:
    """Serves the real tuner and records how long each recommend takes inside the server, so the HTTP stack's
    own cost (client + network + FastAPI) is measured per call as total minus this."""

    def __init__(self, tuner: Tuner):
        self.tuner, self.times_ms = tuner, []

    def __getattr__(self, name: str):
        return getattr(self.tuner, name)

    def decide(self, job: JobSpec, cluster: ClusterState, current=None):
        t0 = time.perf_counter()
        d = self.tuner.decide(job, cluster, current=current)
        self.times_ms.append((time.perf_counter() - t0) * 1e3)
        return d


async def _asgi_post(app, path: str, body: bytes, token: str) -> int:
    """One POST straight into the ASGI app, no sockets: the service code's own cost (FastAPI, validation,
    auth, serialisation) without the OS scheduling and loopback costs of a real connection."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "state": {},
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"authorization", f"Bearer {token}".encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
    }
    chunks = [{"type": "http.request", "body": body, "more_body": False}]
    status = []

    async def receive():
        return chunks.pop() if chunks else {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


def _asgi_overhead_ms(app, served: _ServerSideTimer, bodies: list[bytes], token: str) -> list[float]:
    async def run() -> list[float]:
        out = []
        for body in bodies:
            t0 = time.perf_counter()
            if await _asgi_post(app, "/v1/recommend", body, token) != 200:
                raise SystemExit("in-memory ASGI recommend failed")
            out.append((time.perf_counter() - t0) * 1e3 - served.times_ms[-1])
        return out

    return asyncio.run(run())


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--warm", type=int, default=500, help="observations before timing (model path, not prior)")
    p.add_argument("--calls", type=int, default=2000, help="recommend calls per path (in rounds)")
    p.add_argument("--observe", type=int, default=3000, help="observations timed for the observe rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--observe-batch", type=int, default=16, help="measurements per observe_many for its rate")
    p.add_argument("--scale-calls", type=int, default=300, help="recommend calls per repeat at cluster scale")
    p.add_argument("--scale-repeats", type=int, default=3)
    args = p.parse_args()

    rng, variants, cluster, tuner = synthetic_tuner(args.seed)
    measurements = [synthetic_measurement(rng, cluster, variants, i) for i in range(args.warm + args.observe)]
    for m in measurements[: args.warm]:
        tuner.observe(m)

    # observe rate: a fresh stream of new measurements, one call each
    t0 = time.perf_counter()
    for m in measurements[args.warm :]:
        tuner.observe(m)
    observe_s = time.perf_counter() - t0
    observe_per_s = args.observe / observe_s
    # the same number of new measurements in requests of --observe-batch, as the service learns a request's
    # measurements (``Tuner.observe_many``); their own stream, so the calls timed below see the same inputs as before
    rng_batched = np.random.default_rng([args.seed, 1])
    batched = [synthetic_measurement(rng_batched, cluster, variants, 10**6 + i) for i in range(args.observe)]
    t0 = time.perf_counter()
    for i in range(0, len(batched), args.observe_batch):
        tuner.observe_many(batched[i : i + args.observe_batch])
    observe_batched_per_s = args.observe / (time.perf_counter() - t0)

    jobs = synthetic_jobs(rng, 64)
    first = tuner.decide(jobs[0], cluster)
    n_candidates = first.explanation.n_candidates
    sources: dict[str, int] = {}
    inproc: list[float] = []
    http: list[float] = []
    encode: list[float] = []
    decode: list[float] = []
    served = _ServerSideTimer(tuner)
    app = create_app(served, token="bench-token", persist_every_s=0)
    load_before = os.getloadavg()[0]
    with serve_in_thread(app) as url, TunerClient(url, token="bench-token", timeout_s=5.0, retry_after_s=0) as client:
        for _ in range(20):  # connection set-up, first-call caches
            client.decide(jobs[0], cluster)
            tuner.decide(jobs[0], cluster)
        served.times_ms.clear()
        rounds, per_round = 10, max(1, args.calls // 10)
        for r in range(rounds):
            for i in range(per_round):
                job = jobs[(r * per_round + i) % len(jobs)]
                t0 = time.perf_counter()
                d = tuner.decide(job, cluster)
                inproc.append((time.perf_counter() - t0) * 1e3)
                sources[d.source] = sources.get(d.source, 0) + 1
            for i in range(per_round):
                job = jobs[(r * per_round + i) % len(jobs)]
                t0 = time.perf_counter()
                d = client.decide(job, cluster)
                http.append((time.perf_counter() - t0) * 1e3)
                if d.source == "fallback":
                    raise SystemExit(f"HTTP call fell back: {d.explanation.note}")
        # the same grid on an empty cluster: no co-runner SLO checks, so the part of the cost they take shows
        empty = ClusterState(pools=cluster.pools)
        inproc_empty = [_timed(lambda j=job: tuner.decide(j, empty)) for job in jobs * 8]
        body = RecommendRequest(job=jobs[1], cluster=cluster).model_dump_json()
        reply = RecommendResponse(decision=tuner.decide(jobs[1], cluster)).model_dump_json()
        for _ in range(200):
            encode.append(_timed(lambda: RecommendRequest(job=jobs[1], cluster=cluster).model_dump_json()))
            decode.append(_timed(lambda: RecommendResponse.model_validate_json(reply)))

    # new observations for the ``observed`` path (ids never seen, so each one changes the model)
    learn = [synthetic_measurement(rng, cluster, variants, args.warm + args.observe + i)
             for i in range(args.scale_calls * args.scale_repeats)]
    scale_both = {k: scale_latency_ms(tuner, scale_cluster(rng, variants, n), jobs, args.scale_calls,
                                      args.scale_repeats, learn) for k, n in SCALE_DEVICES.items()}
    scale_runs = {k: v["same"] for k, v in scale_both.items()}
    scale = {k: p99 for k, (_, p99) in scale_runs.items()}
    overhead = [h - s for h, s in zip(http, served.times_ms, strict=True)]
    bodies = [RecommendRequest(job=j, cluster=cluster).model_dump_json().encode() for j in jobs] * 8
    app_only = _asgi_overhead_ms(app, served, bodies, "bench-token")
    load_after = os.getloadavg()[0]
    res = {
        "recommend_p50_ms_inprocess": pct(inproc, 50),
        "recommend_p99_ms_inprocess": pct(inproc, 99),
        "recommend_p50_ms_http": pct(http, 50),
        "recommend_p99_ms_http": pct(http, 99),
        "recommend_p50_ms_inprocess_empty_cluster": pct(inproc_empty, 50),
        "recommend_p99_ms_inprocess_empty_cluster": pct(inproc_empty, 99),
        "http_overhead_p50_ms": pct(overhead, 50),
        "http_overhead_p99_ms": pct(overhead, 99),
        "service_app_overhead_p50_ms": pct(app_only, 50),
        "service_app_overhead_p99_ms": pct(app_only, 99),
        "server_side_recommend_p50_ms": pct(served.times_ms[: len(http)], 50),
        "observe_per_s": observe_per_s,
        "observe_batched_per_s": observe_batched_per_s,
        "observe_batch": args.observe_batch,
        **{f"recommend_p50_ms_{k}_devices": p50 for k, (p50, _) in scale_runs.items()},
        **{f"recommend_p99_ms_{k}_devices": v for k, v in scale.items()},
        **{f"recommend_p{q}_ms_{k}_devices_{path}": v[key][i] for k, v in scale_both.items()
           for key, path in (("fresh", "fresh_objects"), ("same_cpu", "cpu_time"), ("observed", "after_observe"))
           for i, q in enumerate((50, 99))},
        "observe_mean_ms": observe_s / args.observe * 1e3,
        "client_encode_p50_ms": pct(encode, 50),
        "client_decode_p50_ms": pct(decode, 50),
        "request_bytes": len(body),
        "response_bytes": len(reply),
        "n_pools": len(cluster.pools),
        "n_variants": len(variants),
        "n_placements": len(cluster.placements),
        "n_candidates_per_job": n_candidates,
        "n_calls_per_path": len(inproc),
        "n_warm_observations": args.warm,
        "decision_sources_inprocess": sources,
        "load_average_1min": [load_before, load_after],
        "goals": GOALS,
        "goals_met": {
            "recommend_p99_ms_inprocess": pct(inproc, 99) <= GOALS["recommend_p99_ms_inprocess"],
            "recommend_p99_ms_http": pct(http, 99) <= GOALS["recommend_p99_ms_http"],
            "observe_per_s": observe_per_s >= GOALS["observe_per_s"],
            **{f"recommend_p99_ms_{k}_devices": v <= GOALS[f"recommend_p99_ms_{k}_devices"]
               for k, v in scale.items()},
        },
    }
    print_table(
        f"tuner latency: {len(cluster.pools)} pools x {len(variants)} variants x {len(BATCHES)} batch x "
        f"{len(CONCURRENCIES)} conc ({n_candidates} candidates/job), warm {args.warm}, "
        f"load avg {load_before:.1f}->{load_after:.1f} on {os.cpu_count()} cpus",
        ["metric", "p50", "p99 / rate", "goal", "met"],
        [
            ["recommend in-process (ms)", res["recommend_p50_ms_inprocess"], res["recommend_p99_ms_inprocess"],
             "p99 <= 1", res["goals_met"]["recommend_p99_ms_inprocess"]],
            ["  same, empty cluster (ms)", res["recommend_p50_ms_inprocess_empty_cluster"],
             res["recommend_p99_ms_inprocess_empty_cluster"], "", ""],
            ["recommend HTTP loopback (ms)", res["recommend_p50_ms_http"], res["recommend_p99_ms_http"],
             "p99 <= 5", res["goals_met"]["recommend_p99_ms_http"]],
            *[[f"recommend in-process, {n:,} devices / {SCALE_POOLS} pools (ms)", scale_runs[k][0], scale[k],
               f"p99 <= {GOALS[f'recommend_p99_ms_{k}_devices']:g}", res["goals_met"][f"recommend_p99_ms_{k}_devices"]]
              for k, n in SCALE_DEVICES.items()],
            *[row for k, n in SCALE_DEVICES.items() for row in (
                [f"  {n:,} devices, CPU time of the same calls (ms)", *scale_both[k]["same_cpu"], "", ""],
                [f"  {n:,} devices, new placement objects every call (index rebuilt) (ms)", *scale_both[k]["fresh"],
                 "", ""],
                [f"  {n:,} devices, a new observation before every call (nothing reused) (ms)",
                 *scale_both[k]["observed"], "", ""])],
            ["observe (per s)", res["observe_mean_ms"], observe_per_s, ">= 2000", res["goals_met"]["observe_per_s"]],
            [f"  observe_many, {args.observe_batch} per call (per s)", "", observe_batched_per_s, "", ""],
            ["HTTP stack only: total - server-side tuner (ms)", res["http_overhead_p50_ms"],
             res["http_overhead_p99_ms"], "", ""],
            ["  of which service app, no sockets (ms)", res["service_app_overhead_p50_ms"],
             res["service_app_overhead_p99_ms"], "", ""],
            ["client encode / decode (ms)", res["client_encode_p50_ms"], res["client_decode_p50_ms"], "", ""],
            ["request / response (bytes)", res["request_bytes"], res["response_bytes"], "", ""],
        ],
    )
    write_json(args.json, res)


if __name__ == "__main__":
    main()
