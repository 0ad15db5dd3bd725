"""Requests to the tuning service, and what their failures mean.

A request fails in one of three ways, each handled differently by the caller:

- the service did not answer usefully (transport error, timeout, 5xx): `ServiceUnreachable`, which the client
  turns into a fallback decision or a queued measurement. After such a failure, requests within ``retry_after_s``
  fail at once without touching the network (a circuit breaker), so a down service costs one timeout, not one per
  call;
- it refused the token (401/403): `ConfigError`, because falling back would hide a misconfiguration;
- it rejected the request (other 4xx): `DataError` with the service's reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence

import httpx

from oltunes.errors import ConfigError, DataError
from oltunes.service.api import API_PREFIX, MAX_BODY_BYTES, MAX_OBSERVE_BATCH

__all__ = ["ServiceTransport", "ServiceUnreachable", "observe_batches"]


class ServiceUnreachable(Exception):
    """The service did not answer usefully (transport error, timeout, 5xx)."""


class ServiceTransport:
    """``request(method, path)`` to the service at ``url`` (see the module docstring for its failures)."""

    def __init__(self, url: str, token: str | None, *, timeout_s: float, retry_after_s: float,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url
        self.retry_after_s = retry_after_s
        self._down_until = 0.0
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.url + API_PREFIX, headers=headers, timeout=httpx.Timeout(timeout_s), transport=transport
        )

    def request(self, method: str, path: str, *, content: str | None = None, breaker: bool = True,
                headers: dict[str, str] | None = None) -> httpx.Response:
        """One request; raises `ServiceUnreachable` (transport error, timeout, 5xx; at once while the breaker is
        open, unless ``breaker`` is False), `ConfigError` (401/403) or `DataError` (other 4xx, with the service's
        reason)."""
        if breaker and time.monotonic() < self._down_until:
            raise ServiceUnreachable(f"{self.url} failed less than {self.retry_after_s:g}s ago")
        try:
            sent = {**({"Content-Type": "application/json"} if content else {}), **(headers or {})}
            r = self._http.request(method, path, content=content, headers=sent or None)
        except httpx.TransportError as e:  # connect errors and timeouts both
            self._down_until = time.monotonic() + self.retry_after_s
            raise ServiceUnreachable(f"{self.url}: {type(e).__name__}: {e}") from None
        if r.status_code >= 500:
            self._down_until = time.monotonic() + self.retry_after_s
            raise ServiceUnreachable(f"{self.url}: HTTP {r.status_code}: {_detail(r)}")
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


def observe_batches(bodies: Sequence[str]) -> Iterator[tuple[int, int]]:
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
