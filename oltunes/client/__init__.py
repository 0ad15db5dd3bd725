"""The tuning service's client: `TunerClient` (a `TunerLike` over HTTP), its fallback decision and its outbox.

``transport`` (timeouts and what a failure means), ``fallback`` (the decision when the service is unreachable),
``outbox`` (observations waiting for the service, delivered exactly once).
"""

from oltunes.client.tuner_client import TunerClient

__all__ = ["TunerClient"]
