"""One control interval of a serving worker -> one `Measurement` for the learner (plus the client's view)."""

from __future__ import annotations

from typing import Any

import httpx

from oltunes.launchers.traffic import Window
from oltunes.worker.stats import LatencyHistogram
from oltunes.telemetry import TelemetryReport
from oltunes.types import Decision, Measurement


async def read_window(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """The worker's metrics window, then a new window (``reset=true``: never retried, a retry would lose it).

    An unreachable worker (it just died; the supervisor restarts it) yields an empty window.
    """
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            r = await client.get(f"{url}/window", params={"reset": "true"})
            r.raise_for_status()
            return r.json()
    except httpx.HTTPError:
        return {}


def served_window(wm: dict[str, Any]) -> Window:
    """The clients' view of an interval when the service replays no trace: what the worker answered its real
    clients (requests, errors and request latencies from its window; an empty window: nothing served)."""
    hdr = wm.get("request_latency_hdr")
    latency = LatencyHistogram.from_encoded(hdr) if hdr else LatencyHistogram()
    requests, failed = int(wm.get("requests") or 0), int(wm.get("errors") or 0)  # requests: every answer, errors too
    return Window(float(wm.get("window_s") or 0.0), requests, requests - failed, failed, 0, latency)


def capacity_items_per_s(wm: dict[str, Any]) -> float | None:
    """Items per second the worker sustains while busy: items / (batches x mean batch latency / lanes).

    The served rate of a streaming interval only says what arrived; the learner predicts what the
    configuration can do, which is what batch jobs measure too.
    """
    batches, mean_ms, items = wm.get("batches"), wm.get("latency_mean_ms"), wm.get("items")
    lanes = max(int(wm.get("concurrency") or 1), 1)
    if not batches or not mean_ms or not items:
        return None
    busy_s = batches * mean_ms / 1000.0 / lanes
    return items / busy_s if busy_s > 0 else None


def interval_measurement(
    service_id: str, decision: Decision, wm: dict[str, Any], client: Window, telemetry: TelemetryReport
) -> Measurement | None:
    """None when nothing was answered in the interval (nothing to learn from).

    Latency is the worker's per-batch latency (the learner's target, as in batch jobs), falling back to the
    client's request latency when the worker's window is unavailable (it was just restarted); the request's
    end-to-end p99 and its queueing delay are reported beside it.
    """
    keys = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")
    if all(wm.get(k) is not None for k in keys):
        p50, p95, p99 = (float(wm[k]) for k in keys)
    elif client.latency.count:
        p50, p95, p99 = client.percentile(50), client.percentile(95), client.percentile(99)
    else:
        return None
    items = int(wm.get("items") or client.ok)
    if items <= 0 or client.seconds <= 0:
        return None
    served = items / client.seconds
    req_mean, batch_mean = wm.get("request_latency_mean_ms"), wm.get("batch_latency_mean_ms")
    queueing = max(0.0, float(req_mean) - float(batch_mean)) if req_mean is not None and batch_mean is not None else None
    return Measurement(
        job_id=service_id,
        decision_id=decision.decision_id,
        kind="streaming",
        arrival_rate_rps=client.offered / client.seconds,
        candidate=decision.candidate,
        items=items,
        wall_s=client.seconds,
        latency_p50_ms=p50,
        latency_p95_ms=p95,
        latency_p99_ms=p99,
        throughput_items_per_s=capacity_items_per_s(wm) or served,
        energy_j_per_item=telemetry.energy_j / items,
        energy_source=telemetry.energy_source,
        gpu_util=telemetry.gpu_util,
        request_latency_p99_ms=client.percentile(99),  # end to end, as the client saw it (HTTP included)
        queueing_delay_ms=queueing,  # server side: request time beyond its batch's run time
    )
