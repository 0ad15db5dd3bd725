"""HTTP client of the tuning service: `TunerLike` (decide / expect / observe / save) over HTTP, plus a fallback and
an outbox.

When the service cannot be reached (connection refused, timeout, or a 5xx answer):

- `TunerClient.decide` returns `safe_default(...)` (rule in its docstring; ``source="fallback"``).
- `TunerClient.observe` appends the measurement to a local outbox: one JSON file per measurement, written
  atomically and named by its ``measurement_id``. The outbox is sent (`TunerClient.flush`) after the next
  successful call. The service observes each ``measurement_id`` at most once, so a resend after a crash between
  "sent" and "deleted" never counts a measurement twice; files are deleted only after the service answered.

A wrong token (401/403) or a request the service rejects (4xx) is not "unreachable": it raises
`ConfigError`/`DataError` with the service's reason, because falling back would hide a misconfiguration.
A measurement refused that way is still kept: queued (wrong token) or moved to ``outbox/rejected/`` (4xx).

The parts, one module each: the requests and their failures (`oltunes.client.transport`), the outbox
(`oltunes.client.outbox`) and the fallback decision (`oltunes.client.fallback`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx

from oltunes.errors import ConfigError, DataError, TunerUnavailable
from oltunes.service.api import (
    ExpectResponse,
    HealthResponse,
    ObserveResponse,
    RecommendRequest,
    RecommendResponse,
    VariantsRequest,
    VariantsResponse,
)
from oltunes.client.fallback import safe_default
from oltunes.client.outbox import Outbox
from oltunes.client.transport import ServiceTransport, ServiceUnreachable, observe_batches
from oltunes.types import ClusterState, Decision, JobSpec, Measurement, Placement, Prediction, Variant

log = logging.getLogger(__name__)


class TunerClient:
    """Talk to a tuning service like a local `Tuner` (`oltunes.tuner.protocol.TunerLike`).

    Parameters
    ----------
    url
        Base URL of the service, e.g. ``http://127.0.0.1:8765``.
    token
        Bearer token (``OLTUNES_TUNER_TOKEN``); None sends no Authorization header.
    timeout_s
        Connect/read/write/pool timeout of every request (default: ``settings.tuner_timeout_s``).
    outbox_dir
        Where unsent measurements wait (default: ``settings.buffer_dir / "tuner-outbox"``).
    variants
        Variants known for the fallback decision; the client also caches the service's list on first contact.
    retry_after_s
        After a failed contact, calls within this many seconds skip the network and fall back at once, so a
        down service costs one timeout, not one per call. 0 retries every call.
    transport
        httpx transport override (tests).

    Examples
    --------
    >>> with TunerClient("http://127.0.0.1:8765", token="s3cret") as tuner:  # doctest: +SKIP
    ...     decision = tuner.decide(job, cluster)
    ...     tuner.observe(measurement)
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout_s: float | None = None,
        outbox_dir: str | Path | None = None,
        variants: Iterable[Variant] = (),
        retry_after_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ):
        from oltunes.config import get_settings

        settings = get_settings()
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s if timeout_s is not None else settings.tuner_timeout_s)
        self.outbox = Outbox(Path(outbox_dir) if outbox_dir is not None else settings.buffer_dir / "tuner-outbox")
        self._variants: dict[str, Variant] = {v.name: v for v in variants}
        self._variants_fetched = False
        self.transport = ServiceTransport(self.url, token, timeout_s=self.timeout_s, retry_after_s=retry_after_s,
                                          transport=transport)

    # -- the Tuner interface ---------------------------------------------------------------------------------

    def decide(self, job: JobSpec, cluster: ClusterState | None, current: Placement | None = None) -> Decision:
        """The service's decision (route ``/recommend``); `safe_default` (``source="fallback"``) when it is
        unreachable. ``cluster=None``: the service's own inventory (``oltunes tuner serve --inventory``);
        unreachable, it then has no cluster to fall back on and raises `TunerUnavailable`."""
        body = RecommendRequest(job=job, cluster=cluster, current=current).model_dump_json()
        try:
            r = self.transport.request("POST", "/recommend", content=body)
        except ServiceUnreachable as e:
            if cluster is None:
                raise TunerUnavailable(f"{e}; without a cluster of its own (--cluster/--inventory) this request "
                                       "has no safe default to fall back on") from None
            log.warning("tuning service unreachable (%s): using the safe default decision", e)
            return safe_default(job, cluster, self._known_variants(cluster), reason=str(e))
        decision = RecommendResponse.model_validate_json(r.content).decision
        self._after_success()
        return decision

    def observe(self, m: Measurement) -> bool:
        """Send one measurement; False if the service had already observed it.

        When the service is unreachable the measurement goes to the outbox and this returns True (it will be
        delivered by a later `flush`; the service drops it then if it was a duplicate).
        """
        if self.outbox.nonempty:
            # keep arrival order: older queued measurements go first, in the same flush
            self.outbox.put(m)
            self.flush()
            return True
        try:
            r = self.transport.request("POST", "/observe", content=m.model_dump_json())
        except ServiceUnreachable as e:
            log.warning("tuning service unreachable (%s): measurement %s queued in %s",
                        e, m.measurement_id, self.outbox.directory)
            self.outbox.put(m)
            return True
        except ConfigError:
            self.outbox.put(m)  # e.g. wrong token: keep it for when the configuration is fixed
            raise
        except DataError as e:
            # the service refused this measurement: keep it for inspection (outbox/rejected), never drop it
            self.outbox.put(m)
            self.outbox.quarantine(self.outbox.path(m.measurement_id), str(e))
            raise
        accepted = ObserveResponse.model_validate_json(r.content).accepted == 1
        self._after_success()
        return accepted

    def observe_many(self, ms: Sequence[Measurement]) -> list[bool]:
        """Send several (history, a control interval) in batches; per measurement, whether the service learnt it.

        Measurements the service already has are skipped by it (exactly-once). When it is unreachable, the
        rest are queued in the outbox (True here, as `observe` says) and delivered by a later `flush`.
        """
        ms = list(ms)
        bodies = [m.model_dump_json() for m in ms]
        learnt: set[str] = set()
        for i, j in observe_batches(bodies):
            try:
                r = self.transport.request("POST", "/observe", content="[" + ",".join(bodies[i:j]) + "]")
            except ServiceUnreachable as e:
                log.warning("tuning service unreachable (%s): %d measurements queued", e, len(ms) - i)
                for m in ms[i:]:
                    self.outbox.put(m)
                queued = {m.measurement_id for m in ms[i:]}
                return [m.measurement_id in learnt or m.measurement_id in queued for m in ms]
            learnt.update(ObserveResponse.model_validate_json(r.content).accepted_ids)
        self._after_success()
        return [m.measurement_id in learnt for m in ms]

    def expect(self, job: JobSpec, cluster: ClusterState) -> Prediction:
        """The service's prediction for `job` where it would decide, without deciding (route ``/expect``);
        raises `TunerUnavailable` when it cannot be reached (there is no model here to fall back on)."""
        body = RecommendRequest(job=job, cluster=cluster).model_dump_json()
        r = self._without_fallback("POST", "/expect", content=body)
        return ExpectResponse.model_validate_json(r.content).predicted

    @property
    def n_observed(self) -> None:
        """Not counted here: the service's own count is in `health` (``n_observed_total``)."""
        return None

    def save(self) -> None:
        """Nothing to do here: the service keeps its own state (it saves what it acknowledged)."""
        return None

    # -- outbox ----------------------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Measurements waiting in the outbox."""
        return len(self.outbox.files())

    def flush(self) -> int:
        """Send the outbox (oldest first, in batches); return how many measurements the service confirmed.

        Stops quietly at the first batch the service does not answer (the rest stays queued). Files that are
        not valid measurements are moved to ``outbox/rejected/`` with a warning instead of blocking the queue.
        """
        queued = self.outbox.queued()
        bodies = [m.model_dump_json() for _, m in queued]
        sent = 0
        for i, j in observe_batches(bodies):
            chunk = queued[i:j]
            body = "[" + ",".join(bodies[i:j]) + "]"
            try:
                self.transport.request("POST", "/observe", content=body)
            except ServiceUnreachable:
                return sent
            except DataError:
                sent += self._flush_one_by_one(chunk)
                continue
            for path, _ in chunk:
                path.unlink(missing_ok=True)
            sent += len(chunk)
        self.outbox.recheck()
        return sent

    def _flush_one_by_one(self, chunk: Sequence[tuple[Path, Measurement]]) -> int:
        """A batch was rejected: find the bad measurement(s), quarantine them, deliver the rest."""
        sent = 0
        for path, m in chunk:
            try:
                self.transport.request("POST", "/observe", content=m.model_dump_json())
            except ServiceUnreachable:
                return sent
            except DataError as e:
                self.outbox.quarantine(path, str(e))
                continue
            path.unlink(missing_ok=True)
            sent += 1
        return sent

    # -- other routes ----------------------------------------------------------------------------------------

    def health(self) -> HealthResponse:
        """The service's health; raises `TunerUnavailable` when it cannot be reached."""
        r = self._without_fallback("GET", "/health")
        return HealthResponse.model_validate_json(r.content)

    def state(self) -> dict[str, Any]:
        """The service's tuner state snapshot (``Tuner.state_dict()``)."""
        r = self._without_fallback("GET", "/state")
        return json.loads(r.content)

    def variants(self) -> list[Variant]:
        """The variants the service's tuner knows (also cached for the fallback)."""
        r = self._without_fallback("GET", "/variants")
        variants = VariantsResponse.model_validate_json(r.content).variants
        self._variants.update((v.name, v) for v in variants)
        self._variants_fetched = True
        return variants

    def add_variants(self, variants: Iterable[Variant]) -> int:
        """Add variants to the service's catalogue (like ``Tuner.add_variants``); returns how many were sent."""
        variants = list(variants)
        body = VariantsRequest(variants=variants).model_dump_json()
        r = self._without_fallback("POST", "/variants", content=body)
        self._variants.update((v.name, v) for v in VariantsResponse.model_validate_json(r.content).variants)
        return len(variants)

    # -- plumbing --------------------------------------------------------------------------------------------

    def _without_fallback(self, method: str, path: str, *, content: str | None = None) -> httpx.Response:
        """A request of a route that has no fallback, so it always tries (no circuit breaker) and an unreachable
        service raises `TunerUnavailable`."""
        try:
            return self.transport.request(method, path, content=content, breaker=False)
        except ServiceUnreachable as e:
            raise TunerUnavailable(f"tuning service at {self.url} unreachable: {e}") from None

    def _known_variants(self, cluster: ClusterState) -> list[Variant]:
        # variants already running on the cluster are known to exist too
        known = dict(self._variants)
        known.update((pl.candidate.variant.name, pl.candidate.variant) for pl in cluster.placements)
        return list(known.values())

    def _after_success(self) -> None:
        if not self._variants_fetched:
            try:
                self.variants()
            except (TunerUnavailable, ConfigError, DataError) as e:
                log.warning("could not cache the service's variants for the fallback: %s", e)
                self._variants_fetched = True  # do not retry on every call
        if self.outbox.nonempty:
            self.flush()

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> TunerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
