"""HTTP client of the tuning service: the same `recommend`/`observe` as `Tuner`, plus a fallback and an outbox.

When the service cannot be reached (connection refused, timeout, or a 5xx answer):

- `TunerClient.recommend` returns `safe_default(...)` (rule in its docstring; ``source="fallback"``).
- `TunerClient.observe` appends the measurement to a local outbox: one JSON file per measurement, written
  atomically and named by its ``measurement_id``. The outbox is sent (`TunerClient.flush`) after the next
  successful call. The service observes each ``measurement_id`` at most once, so a resend after a crash between
  "sent" and "deleted" never counts a measurement twice; files are deleted only after the service answered.

A wrong token (401/403) or a request the service rejects (4xx) is not "unreachable": it raises
`ConfigError`/`DataError` with the service's reason, because falling back would hide a misconfiguration.
A measurement refused that way is still kept: queued (wrong token) or moved to ``outbox/rejected/`` (4xx).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from oltunes.atomic import atomic_write_text
from oltunes.errors import ConfigError, DataError, TunerUnavailable
from oltunes.tuner.api import (
    API_PREFIX,
    MAX_BODY_BYTES,
    MAX_OBSERVE_BATCH,
    HealthResponse,
    ObserveResponse,
    RecommendRequest,
    RecommendResponse,
    VariantsRequest,
    VariantsResponse,
)
from oltunes.types import (
    Candidate,
    ClusterState,
    Decision,
    Explanation,
    JobSpec,
    Measurement,
    Placement,
    Prediction,
    Variant,
)

log = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")


def safe_default(job: JobSpec, cluster: ClusterState, variants: Iterable[Variant], reason: str) -> Decision:
    """The decision used when the tuning service is unreachable: conservative, and explainable without a model.

    Rule
    ----
    1. Variant: among the known variants of ``job.family`` that meet ``job.accuracy_floor``, the smallest one
       (fewest ``params``, then fewest ``bytes``; a variant of unknown size, 0, counts as largest), ties broken
       by higher accuracy then name. The floor is the user's hard requirement; anything above it is acceptable,
       and the smallest such model has the best chance of meeting the latency SLO that cannot be checked here.
       If none meets the floor: the most accurate variant of the family, and ``feasible=False``.
    2. Pool: the pool with the most free slots (ties: more accelerator memory, then name), so the job is least
       likely to be slowed by co-runners. If no pool has a free slot, that pool anyway and ``feasible=False``.
    3. Batch size 1, concurrency 1, no co-location group: the lowest per-request latency and memory.

    The explanation says the service was unreachable and why, and carries no prediction (all zeros).

    Raises
    ------
    TunerUnavailable
        When no variant of ``job.family`` or no pool is known: there is nothing safe to pick.
    """
    family = sorted({v.name: v for v in variants if v.family == job.family}.values(), key=lambda v: v.name)
    if not family:
        raise TunerUnavailable(
            f"tuning service unreachable ({reason}) and no variant of family {job.family!r} is known for a safe "
            "default: pass variants= to TunerClient (or reach the service once so it caches them)"
        )
    if not cluster.pools:
        raise TunerUnavailable(f"tuning service unreachable ({reason}) and the cluster has no pools")

    meeting = [v for v in family if v.accuracy >= job.accuracy_floor]

    def size(v: Variant) -> tuple[float, float, float, str]:
        return (v.params or math.inf, v.bytes or math.inf, -v.accuracy, v.name)

    variant = min(meeting, key=size) if meeting else max(family, key=lambda v: (v.accuracy, v.name))
    free = {p.name: cluster.free_slots(p.name) for p in cluster.pools}
    pool = min(cluster.pools, key=lambda p: (-free[p.name], -p.accelerator.memory_gb, p.name))

    problems = []
    if not meeting:
        problems.append(
            f"no {job.family} variant meets accuracy floor {job.accuracy_floor:g} (best {variant.accuracy:g})"
        )
    if free[pool.name] <= 0:
        problems.append("no pool has a free slot")
    note = (
        f"tuning service unreachable ({reason}); safe default: smallest {job.family} variant meeting the accuracy "
        f"floor, batch 1, concurrency 1, on the pool with most free slots ({free[pool.name]}); SLO not checked"
        + (f"; infeasible: {'; '.join(problems)}" if problems else "")
    )
    return Decision(
        job_id=job.job_id,
        candidate=Candidate(
            pool=pool.name, accelerator=pool.accelerator.name, variant=variant, batch_size=1, concurrency=1
        ),
        source="fallback",
        feasible=not problems,
        explanation=Explanation(
            predicted=Prediction(latency_p99_ms=0.0, energy_j_per_item=0.0, throughput_items_per_s=0.0),
            n_candidates=len(family) * len(cluster.pools),
            n_feasible=0,
            note=note,
        ),
    )


class _Unreachable(Exception):
    """Internal: the service did not answer usefully (transport error, timeout, 5xx)."""


class TunerClient:
    """Talk to a tuning service like a local `Tuner`: ``recommend(job, cluster)`` and ``observe(m)``.

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
    ...     decision = tuner.recommend(job, cluster)
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
        self.outbox = Path(outbox_dir) if outbox_dir is not None else settings.buffer_dir / "tuner-outbox"
        self.retry_after_s = retry_after_s
        self._variants: dict[str, Variant] = {v.name: v for v in variants}
        self._variants_fetched = False
        self._down_until = 0.0
        self._pending = self._outbox_files() != []  # left by an earlier process
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.url + API_PREFIX, headers=headers, timeout=httpx.Timeout(self.timeout_s), transport=transport
        )

    # -- the Tuner interface ---------------------------------------------------------------------------------

    def decide(self, job: JobSpec, cluster: ClusterState, current: Placement | None = None) -> Decision:
        """The service's decision; `safe_default` (``source="fallback"``) when it is unreachable."""
        return self.recommend(job, cluster, current=current)

    def recommend(self, job: JobSpec, cluster: ClusterState, *, current: Placement | None = None) -> Decision:
        """The same as :meth:`decide` (the name the first API used)."""
        body = RecommendRequest(job=job, cluster=cluster, current=current).model_dump_json()
        try:
            r = self._request("POST", "/recommend", content=body)
        except _Unreachable as e:
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
        if self._pending:
            # keep arrival order: older queued measurements go first, in the same flush
            self._enqueue(m)
            self.flush()
            return True
        try:
            r = self._request("POST", "/observe", content=m.model_dump_json())
        except _Unreachable as e:
            log.warning("tuning service unreachable (%s): measurement %s queued in %s",
                        e, m.measurement_id, self.outbox)
            self._enqueue(m)
            return True
        except ConfigError:
            self._enqueue(m)  # e.g. wrong token: keep it for when the configuration is fixed
            raise
        except DataError as e:
            # the service refused this measurement: keep it for inspection (outbox/rejected), never drop it
            self._enqueue(m)
            self._quarantine(self._outbox_path(m.measurement_id), str(e))
            raise
        accepted = ObserveResponse.model_validate_json(r.content).accepted == 1
        self._after_success()
        return accepted

    def replay(self, measurements: Iterable[Measurement]) -> int:
        """Send history in batches (like ``Tuner.replay``); returns how many the service learnt from.

        Measurements the service already has are skipped by it (exactly-once). When it is unreachable, the
        rest are queued in the outbox (counted as 0 here) and delivered by a later `flush`.
        """
        ms = list(measurements)
        bodies = [m.model_dump_json() for m in ms]
        learnt = 0
        for i, j in _batches(bodies):
            try:
                r = self._request("POST", "/observe", content="[" + ",".join(bodies[i:j]) + "]")
            except _Unreachable as e:
                log.warning("tuning service unreachable (%s): %d measurements queued", e, len(ms) - i)
                for m in ms[i:]:
                    self._enqueue(m)
                return learnt
            learnt += ObserveResponse.model_validate_json(r.content).accepted
        self._after_success()
        return learnt

    # -- outbox ----------------------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Measurements waiting in the outbox."""
        return len(self._outbox_files())

    def flush(self) -> int:
        """Send the outbox (oldest first, in batches); return how many measurements the service confirmed.

        Stops quietly at the first batch the service does not answer (the rest stays queued). Files that are
        not valid measurements are moved to ``outbox/rejected/`` with a warning instead of blocking the queue.
        """
        queued: list[tuple[float, Path, Measurement]] = []
        for path in self._outbox_files():
            try:
                m = Measurement.model_validate_json(path.read_bytes())
            except FileNotFoundError:  # another client flushed it meanwhile
                continue
            except (ValidationError, OSError) as e:
                self._quarantine(path, f"not a valid measurement: {e}")
                continue
            queued.append((m.timestamp, path, m))
        queued.sort(key=lambda t: (t[0], t[1].name))
        bodies = [m.model_dump_json() for _, _, m in queued]
        sent = 0
        for i, j in _batches(bodies):
            chunk = queued[i:j]
            body = "[" + ",".join(bodies[i:j]) + "]"
            try:
                self._request("POST", "/observe", content=body)
            except _Unreachable:
                return sent
            except DataError:
                sent += self._flush_one_by_one(chunk)
                continue
            for _, path, _ in chunk:
                path.unlink(missing_ok=True)
            sent += len(chunk)
        self._pending = self._outbox_files() != []
        return sent

    def _flush_one_by_one(self, chunk: Sequence[tuple[float, Path, Measurement]]) -> int:
        """A batch was rejected: find the bad measurement(s), quarantine them, deliver the rest."""
        sent = 0
        for _, path, m in chunk:
            try:
                self._request("POST", "/observe", content=m.model_dump_json())
            except _Unreachable:
                return sent
            except DataError as e:
                self._quarantine(path, str(e))
                continue
            path.unlink(missing_ok=True)
            sent += 1
        return sent

    def _outbox_files(self) -> list[Path]:
        try:
            return [p for p in self.outbox.iterdir() if p.suffix == ".json" and not p.name.startswith(".")]
        except FileNotFoundError:
            return []

    def _outbox_path(self, measurement_id: str) -> Path:
        # ids that are not safe file names (slashes, dots first, very long) are stored under their hash
        safe = _SAFE_NAME.match(measurement_id)
        name = measurement_id if safe else hashlib.sha256(measurement_id.encode()).hexdigest()
        return self.outbox / f"{name}.json"

    def _enqueue(self, m: Measurement) -> None:
        """Write `m` to the outbox atomically and durably (temp file, fsync, rename)."""
        atomic_write_text(self._outbox_path(m.measurement_id), m.model_dump_json(), durable=True)
        self._pending = True

    def _quarantine(self, path: Path, reason: str) -> None:
        rejected = self.outbox / "rejected"
        rejected.mkdir(parents=True, exist_ok=True)
        log.warning("tuner outbox: moving %s to %s: %s", path.name, rejected, reason)
        try:
            os.replace(path, rejected / path.name)
        except FileNotFoundError:
            pass

    # -- other routes ----------------------------------------------------------------------------------------

    def health(self) -> HealthResponse:
        """The service's health; raises `TunerUnavailable` when it cannot be reached."""
        try:
            r = self._request("GET", "/health", breaker=False)
        except _Unreachable as e:
            raise TunerUnavailable(f"tuning service at {self.url} unreachable: {e}") from None
        return HealthResponse.model_validate_json(r.content)

    def state(self) -> dict[str, Any]:
        """The service's tuner state snapshot (``Tuner.state_dict()``)."""
        try:
            r = self._request("GET", "/state", breaker=False)
        except _Unreachable as e:
            raise TunerUnavailable(f"tuning service at {self.url} unreachable: {e}") from None
        return json.loads(r.content)

    def variants(self) -> list[Variant]:
        """The variants the service's tuner knows (also cached for the fallback)."""
        try:
            r = self._request("GET", "/variants", breaker=False)
        except _Unreachable as e:
            raise TunerUnavailable(f"tuning service at {self.url} unreachable: {e}") from None
        variants = VariantsResponse.model_validate_json(r.content).variants
        self._variants.update((v.name, v) for v in variants)
        self._variants_fetched = True
        return variants

    def add_variants(self, variants: Iterable[Variant]) -> int:
        """Add variants to the service's catalogue (like ``Tuner.add_variants``); returns how many were sent."""
        variants = list(variants)
        body = VariantsRequest(variants=variants).model_dump_json()
        try:
            r = self._request("POST", "/variants", content=body, breaker=False)
        except _Unreachable as e:
            raise TunerUnavailable(f"tuning service at {self.url} unreachable: {e}") from None
        self._variants.update((v.name, v) for v in VariantsResponse.model_validate_json(r.content).variants)
        return len(variants)

    # -- plumbing --------------------------------------------------------------------------------------------

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
        if self._pending:
            self.flush()

    def _request(self, method: str, path: str, *, content: str | None = None, breaker: bool = True) -> httpx.Response:
        """One request; raises `_Unreachable` (transport error, timeout, 5xx), `ConfigError` (401/403) or
        `DataError` (other 4xx, with the service's reason)."""
        if breaker and time.monotonic() < self._down_until:
            raise _Unreachable(f"{self.url} failed less than {self.retry_after_s:g}s ago")
        try:
            r = self._http.request(
                method, path, content=content, headers={"Content-Type": "application/json"} if content else None
            )
        except httpx.TransportError as e:  # connect errors and timeouts both
            self._down_until = time.monotonic() + self.retry_after_s
            raise _Unreachable(f"{self.url}: {type(e).__name__}: {e}") from None
        if r.status_code >= 500:
            self._down_until = time.monotonic() + self.retry_after_s
            raise _Unreachable(f"{self.url}: HTTP {r.status_code}: {_detail(r)}")
        self._down_until = 0.0
        if r.status_code in (401, 403):
            raise ConfigError(
                f"tuning service at {self.url} refused the token (HTTP {r.status_code}): set OLTUNES_TUNER_TOKEN"
            )
        if r.status_code >= 400:
            raise DataError(f"tuning service rejected {method} {path} (HTTP {r.status_code}): {_detail(r)}")
        return r

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TunerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _batches(bodies: Sequence[str]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` ranges of `bodies` whose JSON array stays within the service's count and size limits
    (a single body over the size limit goes alone, and the service answers 413 for it)."""
    start, size = 0, 2
    for k, b in enumerate(bodies):
        n = len(b.encode())
        if k > start and (k - start >= MAX_OBSERVE_BATCH or size + n + 1 > MAX_BODY_BYTES):
            yield start, k
            start, size = k, 2
        size += n + 1
    if start < len(bodies):
        yield start, len(bodies)


def _detail(r: httpx.Response) -> str:
    try:
        return json.dumps(r.json().get("detail"))[:2000]
    except (ValueError, AttributeError):
        return r.text[:2000]
