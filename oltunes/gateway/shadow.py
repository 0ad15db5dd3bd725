"""Shadow requests: a share of a route's live requests mirrored to a candidate's worker, its answers discarded.

The tuner learns a candidate it has never served by watching it answer real requests beside the primary (traffic
mirroring). The client never waits for, and never sees, the shadow:

- `ShadowMirror.offer` is called with a request the primary has already answered (200), before the answer is
  written back, and does no I/O: it counts the request, takes one of every ``1 / share`` (a running sum, so the
  share is exact, not drawn), spends a token of the budget (``max_rps``: a token bucket, at most one second's
  worth banked) and puts the bytes on a bounded queue. A full queue drops the request (counted); nothing waits.
- ``senders`` tasks take from the queue and send over their own keep-alive pool; every outcome, an exception
  included, is counted and then forgotten. No shadow error can reach a client.

`ShadowMirror.window` is the mirror's client-side view of one control interval (what the streaming flow
measures the shadow worker with, as the load generator's is the primary's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from oltunes.gateway.upstream import UpstreamPool
from oltunes.types import SHADOW_SHARE
from oltunes.worker.stats import LatencyHistogram

log = logging.getLogger(__name__)

DEFAULT_SHARE = SHADOW_SHARE
MAX_SHARE = 0.5  # mirroring more than this is load testing, not shadowing


@dataclass(frozen=True)
class ShadowBudget:
    """How much live traffic a shadow may see.

    share
        Fraction of the route's answered requests mirrored (0 < share <= 0.5).
    max_rps
        The exploration budget: mirrored requests per second at most, whatever the live rate.
    queue
        Mirrored requests waiting to be sent at most; more are dropped and counted.
    senders
        Shadow requests in flight at once at most.
    timeout_s
        A shadow request not answered within this is counted failed.
    """

    share: float = DEFAULT_SHARE
    max_rps: float = 20.0
    queue: int = 64
    senders: int = 4
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.share <= MAX_SHARE:
            raise ValueError(f"shadow 'share' must be in (0, {MAX_SHARE}]")
        if not self.max_rps > 0:
            raise ValueError("shadow 'max_rps' must be > 0")
        if self.queue < 1 or self.senders < 1:
            raise ValueError("shadow 'queue' and 'senders' must be >= 1")
        if not self.timeout_s > 0:
            raise ValueError("shadow 'timeout_s' must be > 0")


class ShadowMirror:
    """Mirrors to the worker at ``url`` (``start`` in a running loop, ``close`` after).

    ``counts``: ``seen`` (offered), ``over_budget`` (skipped: no token), ``dropped`` (queue full, or still queued
    at close), ``sent``, ``ok`` (200), ``failed`` (any other status, no answer, or an exception).
    """

    def __init__(self, url: str, budget: ShadowBudget | None = None) -> None:
        self.url = url
        self.budget = budget or ShadowBudget()
        self.counts: Counter = Counter()
        self._pool = UpstreamPool(frozenset(), 15)
        self._queue: asyncio.Queue[tuple[bytes, bytes, list[tuple[bytes, bytes]]]] = asyncio.Queue(self.budget.queue)
        self._due = 0.0  # running sum of `share` over offers: a request is taken each time it reaches 1
        self._tokens = 1.0
        self._refilled = time.monotonic()
        self._tasks: list[asyncio.Task] = []
        self._window = ShadowWindow()

    # -- on the request path: no I/O, no wait ----------------------------------------------------------------
    def offer(self, path: bytes, body: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
        """Mirror this (already answered) request if its share and the budget allow; never blocks."""
        self.counts["seen"] += 1
        self._due += self.budget.share
        if self._due < 1.0:
            return False
        self._due -= 1.0
        now = time.monotonic()
        rate = self.budget.max_rps
        self._tokens = min(max(rate, 1.0), self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        if self._tokens < 1.0:
            self.counts["over_budget"] += 1
            return False
        try:
            self._queue.put_nowait((path, body, headers))
        except asyncio.QueueFull:
            self.counts["dropped"] += 1
            self._window.dropped += 1
            return False
        self._tokens -= 1.0
        return True

    # -- off the request path ------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._sender()) for _ in range(self.budget.senders)]

    async def _sender(self) -> None:
        while True:
            path, body, headers = await self._queue.get()
            self.counts["sent"] += 1
            t0 = time.perf_counter()
            try:
                status, _, _ = await self._pool.request(self.url, b"POST", path, headers, body, self.budget.timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 -- gone, slow, broken: a shadow's failure is only counted
                self._failed(type(e).__name__)
                continue
            if status == 200:
                self.counts["ok"] += 1
                self._window.ok += 1
                self._window.latency.record((time.perf_counter() - t0) * 1e3)
            else:
                self._failed(str(status))

    def _failed(self, reason: str) -> None:
        self.counts["failed"] += 1
        self.counts[f"failed_{reason}"] += 1
        self._window.failed += 1

    def window(self) -> ShadowWindow:
        """The shadow's requests since the last call (its client view: answered, failed, dropped, latency)."""
        w, self._window = self._window, ShadowWindow()
        w.seconds = time.monotonic() - w.t0
        return w

    async def close(self) -> None:
        """Stop sending; what is still queued is dropped (counted), what is in flight is abandoned."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        while not self._queue.empty():
            self._queue.get_nowait()
            self.counts["dropped"] += 1
        self._pool.close()


@dataclass
class ShadowWindow:
    """One interval of a mirror: requests answered (200), failed, dropped (queue full), their latency (ms)."""

    ok: int = 0
    failed: int = 0
    dropped: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    t0: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
