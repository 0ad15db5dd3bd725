"""The main job (``oltunes demo`` / ``make demo``): on embedded defaults, a newcomer watches the learner improve.

Embedded defaults: Prefect's ephemeral API (SQLite under ``settings.prefect_home``), MLflow on a SQLite file
under ``settings.home``, the local launcher on ``infra/inventory.local.yaml`` (CPU-set pools). Steps:

1. build the model zoo (cached after the first run) and an input dataset;
2. run a sequence of batch jobs through the batch flow — each consults the tuner, runs real workers, logs an
   MLflow run and feeds the measurement back;
3. run a short streaming session that replays a real arrival trace and re-tunes every control interval;
4. print first vs last decisions, predicted vs measured, and how to open the MLflow UI on these runs.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from oltunes.config import get_settings

FAMILY = "cnn"


def use_embedded_prefect() -> None:
    """Prefect's ephemeral API under OLTunes' home, unless the user points at a real server (PREFECT_API_URL)."""
    s = get_settings()
    os.environ.setdefault("PREFECT_HOME", str(s.prefect_home))
    if not os.environ.get("PREFECT_API_URL"):
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_ENABLED", "true")
        # The first start creates the SQLite schema: far slower than Prefect's 20 s default on a busy 2-core box.
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the demo prints its own summary
    s.prefect_home.mkdir(parents=True, exist_ok=True)


def _err(pred: float, meas: float) -> float:
    """Prediction error as a factor (1.0 = exact): exp|log(pred / measured)|."""
    return math.exp(abs(math.log(max(pred, 1e-9) / max(meas, 1e-9))))


def _learning_summary(out: Console, results: list[Any]) -> None:
    """How well the learner now predicts the configurations it ran, against its prediction before running them.

    In-sample by construction (it has learnt from these very measurements): it shows the feedback loop closing,
    not generalisation — the simulator's benchmarks measure that.
    """
    from oltunes.tuner import Tuner

    settings = get_settings()
    if settings.tuner_url or not settings.tuner_state_path.is_file():
        return  # the learner is a tuning service's: its model is not read from here
    predict = Tuner.load(settings.tuner_state_path).predict
    before, after = [], []
    for res in results:
        m = res.measurement
        job = res.decision.explanation  # predictions at decision time
        now = predict(res.job, [m.candidate])[0]
        before.append(_err(job.predicted.latency_p99_ms, m.latency_p99_ms) * _err(job.predicted.energy_j_per_item, m.energy_j_per_item))
        after.append(_err(now.latency_p99_ms, m.latency_p99_ms) * _err(now.energy_j_per_item, m.energy_j_per_item))
    gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))  # noqa: E731
    out.print(
        f"learner: on these {len(results)} configurations its (p99 × energy) prediction error was ×{gm(before):.2f} "
        f"before each ran and is ×{gm(after):.2f} now (geometric means; 1.0 = exact)"
    )


def run_demo(batch_jobs: int = 6, items: int = 4000, stream_seconds: float = 40.0, console: Console | None = None) -> dict[str, Any]:
    use_embedded_prefect()
    from flows.batch_inference import batch_inference
    from flows.streaming_inference import streaming_inference
    from oltunes.zoo import build_zoo, make_dataset

    out = console or Console()
    if not out.is_terminal:  # piped (make demo | tee): keep the tables readable
        out = Console(width=150)
    s = get_settings()
    t_start = time.monotonic()
    out.rule("OLTunes demo")
    out.print(f"home: {s.home}\nMLflow: {s.mlflow_uri}\nPrefect: ephemeral API, PREFECT_HOME={os.environ['PREFECT_HOME']}")
    out.print("building the model zoo (cached after the first run)…")
    variants = build_zoo(families=[FAMILY], progress=lambda msg: out.print(f"  {msg}", highlight=False))
    out.print(f"zoo: {len(variants)} variants ({', '.join(v.name for v in variants if v.family == FAMILY)})")
    data = make_dataset(FAMILY, items, s.home / "demo" / f"input-{FAMILY}-{items}.parquet", seed=s.seed)

    table = Table(title="Batch jobs: decision, predicted vs measured (p99 per batch, energy per item)")
    for col in ("#", "decision", "source", "p99 pred", "p99 meas", "J/item pred", "J/item meas", "err×", "SLO"):
        table.add_column(col)
    results = []
    slo_ms = 20.0
    for k in range(batch_jobs):
        t0 = time.monotonic()
        first = " (the first also starts Prefect's local API and compiles the learner: a minute or two)" if k == 0 else ""
        out.print(f"  job {k + 1}/{batch_jobs}: asking the tuner, then running {items} items in real workers…{first}")
        with out.status(f"batch job {k + 1}/{batch_jobs}…"):
            res = asyncio.run(
                batch_inference(family=FAMILY, dataset=str(data), output=str(s.home / "demo" / "outputs" / f"job-{int(time.time())}-{k}"),
                                slo_ms=slo_ms, accuracy_floor=0.95, items_per_worker=items // 2, shard_size=500)
            )  # fmt: skip
        m, p = res.measurement, res.decision.explanation.predicted
        err = max(_err(p.latency_p99_ms, m.latency_p99_ms), _err(p.energy_j_per_item, m.energy_j_per_item))
        results.append((res, err))
        table.add_row(
            str(k + 1), res.decision.candidate.key, res.decision.source, f"{p.latency_p99_ms:.2f}", f"{m.latency_p99_ms:.2f}",
            f"{p.energy_j_per_item:.4f}", f"{m.energy_j_per_item:.4f} ({m.energy_source})", f"{err:.2f}",
            "met" if m.latency_p99_ms <= slo_ms else "missed",
        )  # fmt: skip
        out.print(f"  job {k + 1}: {res.decision.candidate.key} in {time.monotonic() - t0:.1f} s")
    out.print(table)
    first, last = results[0], results[-1]
    out.print(
        f"decisions: first {first[0].decision.candidate.key} ({first[0].decision.source}) → last "
        f"{last[0].decision.candidate.key} ({last[0].decision.source}); energy/item "
        f"{first[0].measurement.energy_j_per_item:.4f} J → {last[0].measurement.energy_j_per_item:.4f} J "
        f"({first[0].measurement.energy_source}: CPU time × {s.cpu_watts_per_core:g} W/core unless RAPL/NVML is readable)"
    )
    _learning_summary(out, [r[0] for r in results])

    out.print(f"streaming service for {stream_seconds:.0f} s: a gateway and serving workers under a replayed real "
              "arrival trace, re-tuned every control interval…")
    with out.status(f"streaming service for {stream_seconds:.0f} s (replaying a real arrival trace)…"):
        st = asyncio.run(
            streaming_inference(family=FAMILY, slo_ms=50.0, speedup=4.0, duration_s=stream_seconds,
                                control_interval_s=max(stream_seconds / 5, 4.0))
        )  # fmt: skip
    stable = Table(title=f"Streaming service {st.service_id} ({os.path.basename(st.trace)})")
    for col in ("step", "config", "offered req/s", "batch p99 ms", "J/item"):
        stable.add_column(col)
    for i, m in enumerate(st.measurements):
        stable.add_row(str(i), m.candidate.key, f"{m.arrival_rate_rps:.1f}", f"{m.latency_p99_ms:.2f}", f"{m.energy_j_per_item:.4f} ({m.energy_source})")
    out.print(stable)
    r = st.requests
    out.print(
        f"requests: {r['sent']} sent, {r['ok']} answered, {r['failed']} failed ({r.get('refused', 0)} of them refused "
        f"by admission control: 429), {r['shed']} shed by the generator's bound; "
        f"{st.switches} live switch(es), {st.restarts} restart(s)"
    )
    out.print(f"decisions: first {st.decisions[0].candidate.key} → last {st.decisions[-1].candidate.key}")
    out.rule("Where to look")
    db = s.mlflow_uri
    bindir = Path(sys.executable).parent  # the environment the demo ran in has both CLIs
    out.print(
        f"MLflow UI:   {bindir / 'mlflow'} ui --backend-store-uri {db} --host 127.0.0.1 --port 5000\n"
        f"             then open http://127.0.0.1:5000/#/experiments?workflowType=machine_learning (the sidebar's\n"
        f"             'Model training' view) — experiments oltunes-batch and oltunes-streaming; compare runs by\n"
        f"             latency_p99_ms, energy_mj_per_item; each run's decision: Artifacts → oltunes/decisions/;\n"
        f"             models: oltunes.<family>@preferred (conventions: mlflow/README.md)\n"
        f"Prefect UI:  PREFECT_HOME={os.environ['PREFECT_HOME']} {bindir / 'prefect'} server start   then open http://127.0.0.1:4200\n"
        f"done in {time.monotonic() - t_start:.0f} s"
    )
    return {"batch": [r[0] for r in results], "streaming": st}
