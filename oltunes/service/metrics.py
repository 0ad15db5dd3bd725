"""Prometheus metrics of the tuning service (``GET /metrics``, text format; with the service's token when it has one,
like every route but health: a scraper sends it as ``authorization: {credentials: <token>}``).

``oltunes_tuner_decisions_total{source,feasible}`` (recommend answers), ``oltunes_tuner_recommend_latency_seconds``
(histogram), ``oltunes_tuner_observations_total{outcome}`` (accepted / duplicate measurements) and
``oltunes_tuner_observed`` (measurements the tuner has learnt, all time).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from oltunes.types import Decision

RECOMMEND_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class TunerMetrics:
    def __init__(self, observed_total: Callable[[], float]) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.decisions = Counter("oltunes_tuner_decisions", "recommend answers by decision source and feasibility",
                                 ["source", "feasible"], registry=r)  # fmt: skip
        self.recommend_latency = Histogram("oltunes_tuner_recommend_latency_seconds", "time to decide one job",
                                           buckets=RECOMMEND_BUCKETS_S, registry=r)  # fmt: skip
        self.observations = Counter("oltunes_tuner_observations", "measurements received, by outcome", ["outcome"],
                                    registry=r)  # fmt: skip
        Gauge("oltunes_tuner_observed", "measurements the tuner has learnt (all time)",
              registry=r).set_function(observed_total)  # fmt: skip

    def decided(self, decision: Decision, seconds: float) -> None:
        self.decisions.labels(decision.source, str(decision.feasible).lower()).inc()
        self.recommend_latency.observe(seconds)

    def observed(self, accepted: int, duplicates: int) -> None:
        self.observations.labels("accepted").inc(accepted)
        self.observations.labels("duplicate").inc(duplicates)

    def exposition(self) -> tuple[bytes, str]:
        """The text format body and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
