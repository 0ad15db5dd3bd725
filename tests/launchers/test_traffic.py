"""Arrival traces and the interval -> Measurement fold (pure functions; the flows test the traffic for real)."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.errors import DataError
from oltunes.launchers.serve_metrics import capacity_items_per_s, interval_measurement
from oltunes.launchers.traffic import BUNDLED_TRACE, Window, load_arrivals
from oltunes.telemetry import TelemetryReport
from oltunes.types import Candidate, Decision, Explanation, Prediction, Variant


def test_bundled_azure_trace_replays_faster_and_loops_to_fill_the_duration():
    raw = load_arrivals(BUNDLED_TRACE)
    assert raw.size == 600 and raw[0] == 0 and np.all(np.diff(raw) >= 0)
    fast = load_arrivals(BUNDLED_TRACE, speedup=10)
    assert fast[-1] == pytest.approx(raw[-1] / 10)
    looped = load_arrivals(BUNDLED_TRACE, speedup=10, duration_s=3 * fast[-1])
    assert looped.size > 2 * raw.size and looped.max() < 3 * fast[-1]


def test_proteus_twitter_trace_is_read_at_run_time(shared_data):
    t = load_arrivals(shared_data / "proteus/twitter/medium-normal_load_1x/resnet.csv.gz", speedup=2)
    assert t.size > 1000 and 100 < t[-1] < 200  # ~290 s of arrivals at 2x


def test_unknown_trace_format_is_named(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("a;b;c\n1;2;3\n")
    with pytest.raises(DataError, match="unknown format.*known: azure, proteus"):
        load_arrivals(bad)


V = Variant(family="cnn", name="cnn-s", size="s", accuracy=0.9)
C = Candidate(pool="p", accelerator="cpu", variant=V, batch_size=8, concurrency=2)
D = Decision(job_id="svc", candidate=C, explanation=Explanation(
    predicted=Prediction(latency_p99_ms=1, energy_j_per_item=0.1, throughput_items_per_s=10), n_candidates=1, n_feasible=1))
TEL = TelemetryReport(wall_s=5, cpu_time_s=2, energy_j=30, energy_source="estimated", energy_meter="cpu_time_x_watts_per_core")


def test_capacity_is_items_per_busy_second_not_the_served_rate():
    wm = {"batches": 100, "latency_mean_ms": 10.0, "items": 400, "concurrency": 2}
    assert capacity_items_per_s(wm) == pytest.approx(400 / (100 * 0.010 / 2))
    assert capacity_items_per_s({"batches": 0, "items": 0}) is None


def test_interval_measurement_uses_worker_batch_latency_and_client_counts():
    wm = {"latency_p50_ms": 1.0, "latency_p95_ms": 2.0, "latency_p99_ms": 3.0, "items": 300, "batches": 50,
          "latency_mean_ms": 1.2, "concurrency": 2, "request_latency_mean_ms": 2.0, "batch_latency_mean_ms": 1.2}  # fmt: skip
    w = Window(seconds=5.0, offered=320, ok=300, failed=0, shed=20)
    for _ in range(300):
        w.latency.record(5.0)
    m = interval_measurement("svc", D, wm, w, TEL)
    assert (m.kind, m.items, m.latency_p99_ms, m.decision_id) == ("streaming", 300, 3.0, D.decision_id)
    assert m.arrival_rate_rps == pytest.approx(64.0) and m.energy_j_per_item == pytest.approx(0.1)
    assert m.energy_source == "estimated" and not m.simulated
    assert m.request_latency_p99_ms == pytest.approx(5.0, rel=1e-3) and m.queueing_delay_ms == pytest.approx(0.8)
    # worker window lost (restarted): client latency stands in; nothing answered: no measurement
    m2 = interval_measurement("svc", D, {}, w, TEL)
    assert m2.latency_p99_ms == pytest.approx(5.0, rel=1e-3)  # HDR histogram: 3 significant digits
    assert interval_measurement("svc", D, {}, Window(5.0, 10, 0, 10, 0), TEL) is None
