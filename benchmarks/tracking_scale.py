"""MLflow tracking at the scale of a long-running service (issue 10), on a real SQLite MLflow store.

1. Streaming: one service logs ``--steps`` control intervals through `ServiceRun` (held run id, steps in chunks of
   10: one ``log_batch`` + one JSON-lines artifact per chunk). ``step_cost_ratio`` = mean cost of the last 100
   steps / the first 100 (goal <= 1.2: the cost per step does not grow with the run).
   The stores live in tmpfs (``--dir``) so that the shared disk's fsync latency does not drown what is measured.
2. Flow start-up with ``--few`` and ``--many`` prior batch runs in the store (run end times spread over the last
   30 days, as history accumulates): build a `Tracker`, load the tuner state, warm start from the cursor.
   Both stores alternate, ``--repeats`` rounds, medians. ``start_ratio_1000_vs_10`` (goal <= 1.5). For
   comparison, the pre-cursor start-up (read the whole history and replay it into the tuner) is timed the
   same way (``full_replay_ratio``), and the one-off full rebuild of a tuner with no state (``rebuild_s``).

Run: ``.venv/bin/python -m benchmarks.tracking_scale --json benchmarks/results/tracking_scale.json``
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import alternate, median, parser, print_table, write_json
from oltunes.config import apply_offline_env
from oltunes.tracking import Tracker, warm_start
from oltunes.tracking import conventions as cv
from oltunes.tuner import Tuner
from oltunes.types import Candidate, Measurement, Variant

VARIANTS = [Variant(family="cnn", name=f"cnn-{s}-fp32", size=s, accuracy=a) for s, a in (("s", 0.9), ("m", 0.94))]
DAY_MS = 24 * 3600 * 1000


def measurement(i: int, kind: str = "batch") -> Measurement:
    v = VARIANTS[i % 2]
    cand = Candidate(pool="cpu-1core", accelerator="cpu", variant=v, batch_size=2 ** (i % 5), concurrency=1)
    return Measurement(job_id=f"job-{i}", kind=kind, candidate=cand, items=100 + i, wall_s=1.0 + i % 7,
                       latency_p50_ms=5.0 + i % 11, latency_p95_ms=7.0 + i % 11, latency_p99_ms=9.0 + i % 11,
                       throughput_items_per_s=50.0 + i % 13, energy_j_per_item=0.1 + (i % 5) / 50,
                       energy_source="estimated", accuracy=0.9)  # fmt: skip


def streaming(root: Path, steps: int) -> dict[str, float]:
    tracker = Tracker(uri=f"sqlite:///{root / 'stream.db'}", buffer_dir=root / "sbuf", artifact_root=root / "sart")
    warm = tracker.service("svc-warm-up", candidate=measurement(0).candidate, system_metrics_s=None)
    for i in range(50):  # first use of the store, imports, caches: not what "the first 100 steps" should measure
        warm.log_step(i, measurement(i, "streaming"))
    warm.end()
    svc = tracker.service("svc-bench", candidate=measurement(0).candidate, system_metrics_s=None)
    costs = []
    for i in range(steps):
        m = measurement(i, "streaming")
        t0 = time.perf_counter()
        svc.log_step(i, m, slo_ms=20.0, extra_metrics={"offered_rps": 10.0, "requests_ok": 100.0})
        costs.append(time.perf_counter() - t0)
    svc.end()
    first, last = statistics.fmean(costs[:100]), statistics.fmean(costs[-100:])
    return {"steps": steps, "step_ms_first_100": first * 1e3, "step_ms_last_100": last * 1e3,
            "step_cost_ratio": last / first}  # fmt: skip


def seed_store(root: Path, n: int) -> tuple[Tracker, Path]:
    """A store with `n` finished batch runs by the conventions, ended over the last 30 days; a tuner state
    that has absorbed them (the full rebuild is timed here)."""
    from mlflow.entities import Metric, Param, RunTag

    tracker = Tracker(uri=f"sqlite:///{root / 'mlflow.db'}", buffer_dir=root / "buf", artifact_root=root / "art")
    c = tracker._client()
    eid = tracker._experiment_id(cv.experiment_for("batch"))
    now = int(time.time() * 1000)
    for i in range(n):
        m = measurement(i)
        end = now - DAY_MS * 30 + i * (DAY_MS * 30 // max(n, 1))
        rid = c.create_run(eid, start_time=end - 60_000, tags={cv.TAG_KEY: m.measurement_id}).info.run_id
        c.log_batch(rid, metrics=[Metric(k, v, end, 0) for k, v in cv.measurement_metrics(m, 20.0).items()],
                    params=[Param(k, v) for k, v in cv.decision_params(m.candidate).items()],
                    tags=[RunTag(k, v) for k, v in cv.measurement_tags(m).items()])  # fmt: skip
        c.set_terminated(rid, end_time=end)
    state = root / "tuner" / "state.json"
    return tracker, state


def start_up(tracker: Tracker, state: Path) -> float:
    t0 = time.perf_counter()
    fresh = Tracker(uri=tracker.uri, buffer_dir=tracker.buffer.root, artifact_root=tracker.artifact_root)
    warm_start(fresh, Tuner.load(state), state, ("batch", "streaming"), simulated=False)
    return time.perf_counter() - t0


def full_replay(tracker: Tracker, state: Path) -> float:
    """What every flow start did before the cursor: read the whole history, replay it into the tuner."""
    t0 = time.perf_counter()
    fresh = Tracker(uri=tracker.uri, buffer_dir=tracker.buffer.root, artifact_root=tracker.artifact_root)
    Tuner.load(state).replay(fresh.history())
    return time.perf_counter() - t0


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--few", type=int, default=10)
    p.add_argument("--many", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dir", type=Path, default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None,
                   help="where the stores live (default tmpfs: a shared disk's fsync latency would drown the growth "
                        "measured here, and seeding 1,000 runs would take minutes)")  # fmt: skip
    a = p.parse_args()
    apply_offline_env()
    with tempfile.TemporaryDirectory(prefix="oltunes-bench-", dir=a.dir) as tmp:
        root = Path(tmp)
        stream = streaming(root / "stream", a.steps)
        stores, rebuild = {}, {}
        for n in (a.few, a.many):
            tracker, state = seed_store(root / f"prior-{n}", n)
            t0 = time.perf_counter()
            warm_start(tracker, Tuner(VARIANTS, seed=0), state, ("batch", "streaming"), simulated=False)
            rebuild[n] = time.perf_counter() - t0
            stores[n] = (tracker, state)
        starts = alternate({n: (lambda n=n: start_up(*stores[n])) for n in stores}, a.repeats)
        fulls = alternate({n: (lambda n=n: full_replay(*stores[n])) for n in stores}, a.repeats)
    res = {
        **stream,
        "start_s": {str(n): median(v) for n, v in starts.items()},
        "start_ratio_1000_vs_10": median(starts[a.many]) / median(starts[a.few]),
        "full_replay_s": {str(n): median(v) for n, v in fulls.items()},
        "full_replay_ratio": median(fulls[a.many]) / median(fulls[a.few]),
        "rebuild_s": {str(n): v for n, v in rebuild.items()},
        "prior_runs": [a.few, a.many],
        "repeats": a.repeats,
        "store_dir": str(a.dir or tempfile.gettempdir()),
    }
    print_table(
        "MLflow tracking at scale (SQLite store)",
        ["measure", "value", "goal"],
        [
            ["streaming: ms/step, first 100", stream["step_ms_first_100"], ""],
            [f"streaming: ms/step, last 100 (of {a.steps})", stream["step_ms_last_100"], ""],
            ["step_cost_ratio", stream["step_cost_ratio"], "<= 1.2"],
            [f"flow start-up, {a.few} prior runs (s, median)", res["start_s"][str(a.few)], ""],
            [f"flow start-up, {a.many} prior runs (s, median)", res["start_s"][str(a.many)], ""],
            ["start_ratio_1000_vs_10", res["start_ratio_1000_vs_10"], "<= 1.5"],
            ["before (full history replay each start): ratio", res["full_replay_ratio"], "(comparison)"],
            [f"full rebuild, no tuner state, {a.many} runs (s)", rebuild[a.many], "(one-off)"],
        ],
    )
    write_json(a.json, res)


if __name__ == "__main__":
    main()
