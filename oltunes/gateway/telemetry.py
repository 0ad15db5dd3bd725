"""Prometheus metrics of a serving component (gateway or worker), one registry per app.

Names (all labelled by ``model``): ``oltunes_<component>_requests_total{status}``,
``oltunes_<component>_request_latency_seconds`` (histogram), ``oltunes_<component>_queue_depth`` (items waiting),
``oltunes_<component>_batch_size`` (histogram, worker), ``oltunes_<component>_switches_total`` and
``oltunes_<component>_restarts_total`` (gateway: workers replaced behind a model), ``..._retries_total``, ``..._concurrency_limit`` (gateway: admission's limit),
``oltunes_gateway_shadow_requests{model,outcome}`` (the current shadow's mirrored requests: seen, sent, ok, failed,
dropped, over_budget).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class ServingMetrics:
    def __init__(self, component: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        p = f"oltunes_{component}"
        r = self.registry
        self.requests = Counter(f"{p}_requests", "inference requests by final HTTP status", ["model", "status"], registry=r)
        self.latency = Histogram(f"{p}_request_latency_seconds", "time to answer an inference request", ["model"],
                                 buckets=LATENCY_BUCKETS_S, registry=r)  # fmt: skip
        self.queue_depth = Gauge(f"{p}_queue_depth", "items (worker) or requests (gateway) waiting", ["model"], registry=r)
        self.batch_size = Histogram(f"{p}_batch_size", "items per session call", ["model"], buckets=BATCH_BUCKETS, registry=r)
        self.switches = Counter(f"{p}_switches", "workers replaced by a new decision", ["model"], registry=r)
        self.restarts = Counter(f"{p}_restarts", "workers replaced after they died", ["model"], registry=r)
        self.concurrency_limit = Gauge(f"{p}_concurrency_limit", "requests a model may have outstanding (gateway admission; "
                                       "0 until measured or without an SLO)", ["model"], registry=r)  # fmt: skip
        self.shadow = Gauge(f"{p}_shadow_requests", "requests of the model's current shadow, by outcome (gateway)",
                            ["model", "outcome"], registry=r)  # fmt: skip
        self.retries = Counter(f"{p}_retries", "attempts re-sent to a worker (switch, drain or crash)", ["model"], registry=r)

    def exposition(self) -> tuple[bytes, str]:
        """The text format body and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
