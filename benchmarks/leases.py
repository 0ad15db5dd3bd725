"""What allocation costs: a lease acquire (the tuner's decision included) and its release over HTTP, against a plain
``recommend`` on the same service, alternating; and the book at a given number of running leases.

Each round: one recommend, then one acquire + release (the book is written durably on both), and between them a
move of the new lease to the next device of its pool (what a streaming re-tune that switches device costs).
Medians and p99 in milliseconds; the ratio is acquire ÷ recommend (what a lease adds to a decision).

    python -m benchmarks.leases --calls 200 --running 0,32 --json benchmarks/results/leases.json
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
    args = ap.parse_args()

    from oltunes.config import apply_offline_env

    apply_offline_env()
    tmp = Path(tempfile.mkdtemp(prefix="oltunes-bench-leases-"))
    os.environ.setdefault("OLTUNES_HOME", str(tmp / "home"))
    import httpx
    import numpy as np

    from oltunes.inventory import CATALOG
    from oltunes.tuner import Tuner
    from oltunes.tuner.lease_types import LeaseRequest
    from oltunes.tuner.service import create_app, serve_in_thread
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
    write_json(args.json, {"calls": args.calls, "pools": len(pools), **out})


if __name__ == "__main__":
    main()
