"""`Route`: where one model's requests go now, and what is still in flight at each worker (so an old one drains).

The supervisor of a model's workers moves a route (`switch`) once a new worker is healthy, then waits for the
old one to drain (`drained`) before stopping it; the gateway sends every attempt to `current`.

Admission: `predicted_wait_ms` is the requests outstanding times the measured service time per request: the
gap between consecutive completions while requests kept waiting (an EWMA), i.e. 1 / the throughput the worker
sustains when it has work queued, whatever limits it (the model, HTTP handling, a busy machine). Gaps that
include idle time are not counted, and nothing is refused before a queue has been seen. A request whose
predicted wait is over the model's SLO is refused at once (429), so answered requests keep to about the SLO
under overload.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

SwitchReason = Literal["start", "switch", "restart"]
SERVICE_SMOOTHING = 0.05  # EWMA weight of one completion (batches complete many requests at once)


@dataclass
class Route:
    name: str
    slo_ms: float | None = None
    current: str | None = None
    in_flight: Counter = field(default_factory=Counter)
    on_switch: Callable[[str, SwitchReason], None] | None = None  # the gateway counts switches and restarts
    service_s: float | None = None  # measured seconds per completed request while busy (EWMA)
    _moved: asyncio.Event | None = None
    _last_event: float = 0.0
    _queued_at_last: bool = False  # were requests still outstanding at the previous completion?

    def begin(self, url: str) -> None:
        self.in_flight[url] += 1

    def end(self, url: str, answered: bool) -> None:
        self.in_flight[url] -= 1
        if not answered:
            return
        now = time.perf_counter()
        if self._queued_at_last:  # busy without a break since the previous completion: the gap is service time
            dt = now - self._last_event
            self.service_s = dt if self.service_s is None else (1 - SERVICE_SMOOTHING) * self.service_s + SERVICE_SMOOTHING * dt
        self._last_event, self._queued_at_last = now, self.outstanding > 0

    def predicted_wait_ms(self) -> float:
        """How long a request arriving now would take, from the outstanding ones and the measured service time."""
        return (self.outstanding + 1) * (self.service_s or 0.0) * 1e3

    def switch(self, url: str, reason: SwitchReason = "switch") -> None:
        self.current = url
        if reason == "switch":
            self.service_s, self._queued_at_last = None, False  # a new decision: its service time is measured afresh
        if self.on_switch is not None:
            self.on_switch(self.name, reason)
        if self._moved is not None:
            self._moved.set()

    async def wait_for_worker(self, timeout_s: float) -> str | None:
        """The current worker's URL, waiting up to `timeout_s` for one to be set."""
        if self.current is None:
            self._moved = self._moved or asyncio.Event()
            try:
                await asyncio.wait_for(self._moved.wait(), max(timeout_s, 0.0))
            except TimeoutError:
                pass
        return self.current

    @property
    def outstanding(self) -> int:
        return sum(self.in_flight.values())

    async def drained(self, url: str, timeout_s: float) -> bool:
        """Wait until no request is in flight at `url`; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight[url] > 0:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True
