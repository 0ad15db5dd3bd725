"""What allocation costs: a lease acquire (the tuner's decision included) and its release over HTTP, against a plain
``recommend`` on the same service, alternating; and the book at a given number of running leases.

Each round: one recommend, then one acquire + release (the book is written durably on both), and between them a
move of the new lease to the next device of its pool (what a streaming re-tune that switches device costs).
Medians and p99 in milliseconds; the ratio is acquire ÷ recommend (what a lease adds to a decision).

    python -m benchmarks.leases --calls 200 --running 0,32 --json benchmarks/results/leases.json

With ``--waiting N`` it also fills the cluster, queues N jobs (the book durable on disk, as served), and times
over HTTP what a long queue costs each acquire: a waiting job asking again (what every queued holder does every
few seconds) and a new job joining the queue; issue 31's target is a p99 <= 50 ms at 10,000 waiting.

    python -m benchmarks.leases --calls 200 --running 0 --waiting 10000 --json benchmarks/results/leases.json
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import median, parser, print_table, write_json


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--running", default="0,32", help="leases already held, comma-separated")
    ap.add_argument("--waiting", type=int, default=0, help="also time acquires with this many jobs queued (0: no)")
    args = ap.parse_args()

    from oltunes.config import apply_offline_env

    apply_offline_env()
    tmp = Path(tempfile.mkdtemp(prefix="oltunes-bench-leases-"))
    os.environ.setdefault("OLTUNES_HOME", str(tmp / "home"))
    import httpx
    import numpy as np

    from oltunes.inventory import CATALOG
    from oltunes.tuner import Tuner
    from oltunes.allocator.types import LeaseRequest
    from oltunes.service.app import create_app, serve_in_thread
    from oltunes.types import JobSpec, Pool
    from tests.tuner.variants import make_variants

    pools = [Pool(name=f"{a}-{i}", accelerator=CATALOG[a], count=8, slots_per_device=4)
             for i in range(2) for a in ("t4", "a100", "cpu")]
    rows, out = [], {}
    for running in [int(x) for x in args.running.split(",")]:
        app = create_app(Tuner(make_variants(), seed=0), state_path=tmp / f"state-{running}.json", pools=pools,
                         persist_every_s=0)
        with serve_in_thread(app) as url, httpx.Client(base_url=url + "/v1", timeout=30) as http:
            for i in range(running):
                job = JobSpec(job_id=f"held-{i}", family="cnn", slo_ms=5_000.0, items=1000)
                http.post("/leases", json=LeaseRequest(job=job, ttl_s=3600).model_dump(mode="json")).raise_for_status()
            rec, lease, move = [], [], []
            for i in range(args.calls):
                job = JobSpec(job_id=f"bench-{i}", family="cnn", slo_ms=5_000.0, items=1000)
                t0 = time.perf_counter()
                http.post("/recommend", json={"job": job.model_dump(mode="json")}).raise_for_status()
                t1 = time.perf_counter()
                answer = http.post("/leases", json=LeaseRequest(job=job, ttl_s=60).model_dump(mode="json"))
                held = answer.raise_for_status().json()["lease"]
                own = {"X-Lease-Secret": held["secret"]}  # only the holder may move or release it
                t2 = time.perf_counter()
                group = {"pool": held["pool"], "device": (held["device"] + 1) % 8, "members": [job.job_id]}
                moved = http.post(f"/leases/{held['lease_id']}/move", json={"decision": {**held["decision"], "group": group}},
                                  headers=own)
                t3 = time.perf_counter()
                http.delete(f"/leases/{held['lease_id']}", headers=own).raise_for_status()
                t4 = time.perf_counter()
                rec.append((t1 - t0) * 1e3)
                lease.append((t2 - t1 + t4 - t3) * 1e3)
                if moved.raise_for_status().json()["status"] == "moved":  # refused only when that device is full
                    move.append((t3 - t2) * 1e3)
        r = {"recommend_p50_ms": median(rec), "recommend_p99_ms": float(np.percentile(rec, 99)),
             "lease_p50_ms": median(lease), "lease_p99_ms": float(np.percentile(lease, 99)),
             "ratio_p50": median(lease) / median(rec), "moves": len(move),
             "move_p50_ms": median(move), "move_p99_ms": float(np.percentile(move, 99))}
        out[f"running_{running}"] = r
        rows.append([running, f"{r['recommend_p50_ms']:.2f}", f"{r['recommend_p99_ms']:.2f}",
                     f"{r['lease_p50_ms']:.2f}", f"{r['lease_p99_ms']:.2f}", f"{r['ratio_p50']:.2f}",
                     f"{r['move_p50_ms']:.2f}", f"{r['move_p99_ms']:.2f}"])
    print_table(f"lease acquire + release vs recommend over HTTP ({args.calls} calls, {len(pools)} pools)",
                ["running leases", "recommend p50", "recommend p99", "acquire+release p50", "acquire+release p99",
                 "ratio p50", "move p50", "move p99"], rows)
    if args.waiting:
        out["queue"] = queue_costs(args.waiting, args.calls, tmp)
    write_json(args.json, {"calls": args.calls, "pools": len(pools), **out})


def queue_costs(waiting: int, calls: int, tmp: Path) -> dict:
    """Acquire latency over HTTP with `waiting` jobs queued behind a full cluster: re-asks and new arrivals."""
    import random

    import httpx
    import numpy as np

    from oltunes.inventory import CATALOG
    from oltunes.tuner import Tuner
    from oltunes.allocator.types import MAX_WAITING, LeaseRequest
    from oltunes.service.app import create_app, serve_in_thread
    from oltunes.types import JobSpec, Pool
    from tests.tuner.variants import make_variants

    pools = [Pool(name="t4-q", accelerator=CATALOG["t4"], count=4, slots_per_device=1)]
    app = create_app(Tuner(make_variants(), seed=0), state_path=tmp / "state-queue.json", pools=pools,
                     persist_every_s=0)
    book = app.state.service.leases
    joiners = min(calls // 2, MAX_WAITING - 1)
    queued = max(min(waiting, MAX_WAITING) - joiners, 1)

    def req(name: str) -> LeaseRequest:
        return LeaseRequest(job=JobSpec(job_id=name, family="cnn", slo_ms=5_000.0, items=1000), ttl_s=3600)

    t0 = time.perf_counter()
    i = 0
    while book.acquire(req(f"run-{i}")).status == "granted":  # fill every slot
        i += 1
    secrets = {f"run-{i}": book.acquire(req(f"run-{i}")).secret}
    for k in range(queued - 1):  # in-process: the book's own path, only faster than HTTP to set up
        secrets[f"wait-{k}"] = book.acquire(req(f"wait-{k}")).secret
    fill_s = time.perf_counter() - t0
    rng = random.Random(0)
    again, join = [], []
    with serve_in_thread(app) as url, httpx.Client(base_url=url + "/v1", timeout=30) as http:
        names = list(secrets)
        for c in range(calls):
            if c % 2 == 0 or len(join) >= joiners:
                name = rng.choice(names)
                body, into = req(name).model_copy(update={"secret": secrets[name]}), again
            else:
                body, into = req(f"new-{c}"), join
            t1 = time.perf_counter()
            r = http.post("/leases", content=body.model_dump_json(), headers={"Content-Type": "application/json"})
            into.append((time.perf_counter() - t1) * 1e3)
            assert r.raise_for_status().json()["status"] == "waiting", r.text
        n = len(book.waiting)
    res = {"waiting": n, "fill_s": fill_s,
           "ask_again_p50_ms": median(again), "ask_again_p99_ms": float(np.percentile(again, 99)),
           "join_p50_ms": median(join), "join_p99_ms": float(np.percentile(join, 99)),
           "target_p99_ms": 50.0}
    print_table(f"lease acquire over HTTP with {n} jobs waiting (cluster full; {calls} calls)",
                ["waiting", "ask again p50", "ask again p99", "join p50", "join p99"],
                [[n, f"{res['ask_again_p50_ms']:.2f}", f"{res['ask_again_p99_ms']:.2f}",
                  f"{res['join_p50_ms']:.2f}", f"{res['join_p99_ms']:.2f}"]])
    return res


if __name__ == "__main__":
    main()
