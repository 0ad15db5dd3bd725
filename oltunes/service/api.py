"""Request/response models of the tuning service, shared by the server (`service.py`) and the client (`client.py`).

The payloads are the shared types of `oltunes.types` wrapped in small envelopes, so a field added to a shared
type travels over HTTP with no change here. Every envelope forbids unknown fields: a typo in a request is a 422
naming the field, never a silently ignored setting.

Routes (all under ``/v1``; every route but ``health`` needs ``Authorization: Bearer <token>`` when the service
has a token):

======================  ==================  ================================================
route                   request             response
======================  ==================  ================================================
``POST /v1/recommend``  `RecommendRequest`  `RecommendResponse` (``TunerLike.decide``)
``POST /v1/expect``     `RecommendRequest`  `ExpectResponse` (``TunerLike.expect``: no decision made)
``POST /v1/observe``    `ObserveRequest`    `ObserveResponse` (idempotent by measurement_id)
``GET  /v1/health``     --                  `HealthResponse` (no token needed)
``GET  /v1/state``      --                  the tuner's ``state_dict()`` (JSON snapshot)
``GET  /v1/variants``   --                  `VariantsResponse`
``POST /v1/variants``   `VariantsRequest`   `VariantsResponse` (all variants after adding)
======================  ==================  ================================================
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from oltunes.types import MAX_LIST, ClusterState, Decision, JobSpec, Measurement, Placement, Prediction, Variant

API_PREFIX = "/v1"

# One request may carry a whole outbox; the cap bounds the time the tuner lock is held by one request.
MAX_OBSERVE_BATCH = 1000
# Bodies over this are refused (413) before they are read; a full observe batch is ~1-2 MB.
MAX_BODY_BYTES = 8 * 1024 * 1024


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecommendRequest(_Envelope):
    """A job and the cluster it should run on.

    ``cluster`` may be omitted when the service was started with an inventory (``--inventory``); it then uses
    those pools with nothing placed on them. ``current`` (re-tuning a running job): where it runs now, so the
    service prefers staying put exactly as an in-process ``Tuner.decide(..., current=...)`` does.
    """

    job: JobSpec
    cluster: ClusterState | None = None
    current: Placement | None = None


class RecommendResponse(_Envelope):
    decision: Decision


class ExpectResponse(_Envelope):
    predicted: Prediction


class ObserveRequest(_Envelope):
    """One or more measurements. The body may also be a bare Measurement object or a bare list of them."""

    measurements: list[Measurement] = Field(min_length=1, max_length=MAX_OBSERVE_BATCH)

    @model_validator(mode="before")
    @classmethod
    def _accept_bare(cls, data: Any) -> Any:
        # Accept the natural shapes a caller would send, so that `curl -d @measurement.json` works too.
        if isinstance(data, list):
            return {"measurements": data}
        if isinstance(data, dict) and "measurements" not in data:
            return {"measurements": [data]}
        return data


class ObserveResponse(_Envelope):
    accepted: int = Field(ge=0, description="measurements learnt from by this request")
    duplicates: int = Field(ge=0, description="measurements already observed before (ignored: exactly-once)")
    accepted_ids: list[str] = Field(default=[], description="measurement ids learnt from by this request")


class HealthResponse(_Envelope):
    status: Literal["ok"] = "ok"
    version: str
    n_variants: int = Field(ge=0)
    n_observed: int = Field(ge=0, description="measurements observed by this service process since it started")
    n_observed_total: int = Field(ge=0, description="measurements the tuner has learnt from, restored state included")
    uptime_s: float = Field(ge=0)
    auth: bool = Field(description="whether the service requires a bearer token")


class VariantsRequest(_Envelope):
    """Variants to add to the tuner's catalogue (a known name replaces that variant)."""

    variants: list[Variant] = Field(min_length=1, max_length=MAX_LIST)


class VariantsResponse(_Envelope):
    variants: list[Variant]


class ErrorResponse(_Envelope):
    """Body of every 4xx/5xx the service sends: ``detail`` says what was wrong and, for bad input, where."""

    detail: Any
