"""Tuner state at scale: save time and file size after 100,000 observations, and what a durable observe costs.

1. A tuner observes ``--n`` synthetic measurements (the generators of ``tuner_latency``; ids are uuid hex like
   the real ones), then ``Tuner.save`` (state_dict + JSON + temp file + fsync + rename) is timed ``--saves``
   times. The same state with the seen ids stored the old way (a JSON list of every id, up to a million) is
   written side by side, alternating, so the ratio is measured under the same machine noise.
2. Observe over HTTP, one measurement per request through `TunerClient`, against a service with a state file
   (every answer waits for the journal's fsync) and one without (nothing durable until shutdown), alternating
   in rounds: the price of "an answered observe survives SIGKILL".

Targets (issue 10): ``save_ms_100k`` <= 50 ms, ``state_bytes_100k`` <= 5 MB. ``save_cpu_ms_100k`` (CPU time of the
save, fsync wait excluded) and the load average are reported too: on a shared, oversubscribed machine the wall
time mostly measures the wait for a core.

Run: ``.venv/bin/python -m benchmarks.tuner_state --json benchmarks/results/tuner_state.json``
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from benchmarks.common import alternate, median, parser, print_table, write_json
from benchmarks.tuner_latency import BATCHES, CONCURRENCIES, synthetic_cluster, synthetic_measurement, synthetic_variants
from oltunes.tuner import Tuner
from oltunes.tuner.client import TunerClient
from oltunes.tuner.service import create_app, serve_in_thread
from oltunes.tuner.state import write_json_atomic

GOALS = {"save_ms_100k": 50.0, "state_bytes_100k": 5_000_000}


def _timed_ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _cpu_ms(fn) -> float:
    """CPU time of this process (what a loaded, shared machine inflates least; excludes waiting for fsync)."""
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) * 1e3


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000, help="observations before the saves are timed")
    p.add_argument("--saves", type=int, default=7, help="timed saves per format")
    p.add_argument("--http-observes", type=int, default=200, help="observes over HTTP per service (in rounds)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    rng = np.random.default_rng(args.seed)
    variants = synthetic_variants()
    cluster = synthetic_cluster(rng, variants)
    tuner = Tuner(variants, batch_sizes=BATCHES, concurrencies=CONCURRENCIES, seed=args.seed)
    ids = [uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i).hex for i in range(args.n)]
    t0 = time.perf_counter()
    for i, mid in enumerate(ids):
        tuner.observe(synthetic_measurement(rng, cluster, variants, i).model_copy(update={"measurement_id": mid}))
    observe_s = time.perf_counter() - t0

    with tempfile.TemporaryDirectory(prefix="oltunes-bench-") as tmp:
        new_path, old_path = Path(tmp) / "state.json", Path(tmp) / "state-list-of-ids.json"

        def save_old() -> None:  # the format before: every id as a JSON string
            write_json_atomic(old_path, {**tuner.state_dict(), "seen": ids[-1_000_000:]})

        load_before = os.getloadavg()[0]
        times = alternate({"new": lambda: _timed_ms(lambda: tuner.save(new_path)),
                           "old": lambda: _timed_ms(save_old),
                           "new_cpu": lambda: _cpu_ms(lambda: tuner.save(new_path))}, args.saves)
        state_dict_ms = median([_timed_ms(tuner.state_dict) for _ in range(args.saves)])
        encode_ms = median([_timed_ms(lambda d=tuner.state_dict(): json.dumps(d, allow_nan=False,
                                                                             separators=(",", ":")))
                            for _ in range(args.saves)])
        new_bytes, old_bytes = new_path.stat().st_size, old_path.stat().st_size
        parts = {k: len(json.dumps(v)) for k, v in tuner.state_dict().items()}
        assert Tuner.load(new_path).has_seen(ids[-1])

        http = _durable_observe_rates(args, rng, cluster, variants, Path(tmp))

    res = {
        "n_observations": args.n,
        "save_ms_100k": median(times["new"]),
        "save_ms_100k_list_of_ids": median(times["old"]),
        "save_speedup": median(times["old"]) / median(times["new"]),
        "save_cpu_ms_100k": median(times["new_cpu"]),
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "state_bytes_100k": new_bytes,
        "state_bytes_100k_list_of_ids": old_bytes,
        "state_dict_ms": state_dict_ms,
        "json_encode_ms": encode_ms,
        "state_part_bytes": parts,
        "observe_per_s_inprocess": args.n / observe_s,
        **http,
        "goals": GOALS,
        "goals_met": {"save_ms_100k": median(times["new"]) <= GOALS["save_ms_100k"],
                      "state_bytes_100k": new_bytes <= GOALS["state_bytes_100k"]},
    }
    print_table(f"tuner state after {args.n:,} observations (medians of {args.saves})", ["metric", "value"], [
        ["save ms (hashed seen ids)", res["save_ms_100k"]], ["save CPU ms (hashed seen ids)", res["save_cpu_ms_100k"]],
        ["save ms (JSON list of ids)", res["save_ms_100k_list_of_ids"]],
        ["state bytes (hashed)", new_bytes], ["state bytes (list of ids)", old_bytes],
        ["state_dict ms", state_dict_ms], ["JSON encode ms", encode_ms],
        ["observe/s over HTTP, journaled (fsync per answer)", http["observe_http_per_s_durable"]],
        ["observe/s over HTTP, no state file", http["observe_http_per_s_volatile"]],
    ])
    write_json(args.json, res)


def _durable_observe_rates(args, rng, cluster, variants, tmp: Path) -> dict[str, float]:
    """Observe rate over HTTP with the journal (fsync before each answer) and without a state file."""
    apps = {
        "durable": create_app(Tuner(variants, seed=args.seed), token="t", state_path=tmp / "svc" / "state.json",
                              persist_every_s=0),
        "volatile": create_app(Tuner(variants, seed=args.seed), token="t", persist_every_s=0),
    }
    ms = [synthetic_measurement(rng, cluster, variants, i).model_copy(update={"measurement_id": f"h{i}"})
          for i in range(args.http_observes)]
    out: dict[str, list[float]] = {k: [] for k in apps}
    with serve_in_thread(apps["durable"]) as u1, serve_in_thread(apps["volatile"]) as u2:
        clients = {"durable": TunerClient(u1, token="t", outbox_dir=tmp / "ob1", retry_after_s=0, timeout_s=10),
                   "volatile": TunerClient(u2, token="t", outbox_dir=tmp / "ob2", retry_after_s=0, timeout_s=10)}
        rounds = 10
        per = max(1, len(ms) // rounds)
        for r in range(rounds):
            for name, client in clients.items():
                chunk = ms[r * per:(r + 1) * per]
                t0 = time.perf_counter()
                for m in chunk:
                    if not client.observe(m) or client.pending:
                        raise SystemExit(f"{name}: observe over HTTP was not accepted")
                out[name].append(len(chunk) / (time.perf_counter() - t0))
        for c in clients.values():
            c.close()
    return {"observe_http_per_s_durable": median(out["durable"]), "observe_http_per_s_volatile": median(out["volatile"])}


if __name__ == "__main__":
    main()
