"""`Route`: where one model's requests go now, and what is still in flight at each worker (so an old one drains).

The supervisor of a model's workers moves a route (`switch`) once a new worker is healthy, then waits for the
old one to drain (`drained`) before stopping it; the gateway sends every attempt to `current`.

Admission: a route with an SLO holds at most `limits.limit` requests outstanding (admitted, sent, not yet
answered), a limit measured from the answers themselves (`oltunes.gateway.admission.ConcurrencyLimit`, Little's
law); the gateway refuses the rest at once, except while its worker is gone (`outage`). A new decision or a
restarted worker is measured afresh.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from oltunes.gateway.admission import ConcurrencyLimit

SwitchReason = Literal["start", "switch", "restart"]


@dataclass
class Route:
    name: str
    slo_ms: float | None = None
    current: str | None = None
    in_flight: Counter = field(default_factory=Counter)
    on_switch: Callable[[str, SwitchReason], None] | None = None  # the gateway counts switches and restarts
    admitted: int = 0  # admitted from their headers, not yet sent to a worker (their bodies are arriving)
    limits: ConcurrencyLimit | None = field(init=False, default=None)  # None without an SLO: nothing refused
    outage: bool = False  # the current worker refused a connection: requests wait for the next one (see `admits`)
    _moved: asyncio.Event | None = None

    def __post_init__(self) -> None:
        self._measure_afresh()

    def _measure_afresh(self) -> None:
        self.limits = None if self.slo_ms is None else ConcurrencyLimit(self.slo_ms / 1e3)

    def admit(self) -> int:
        """Count a request admitted now; its position in the queue (itself included)."""
        self.admitted += 1
        return self.outstanding

    def unadmit(self) -> None:
        """The admitted request is being sent (it is in `in_flight` from now) or was given up before."""
        self.admitted -= 1

    def begin(self, url: str) -> None:
        self.in_flight[url] += 1

    def end(self, url: str) -> None:
        self.in_flight[url] -= 1

    def answered(self, position: int, seconds: float) -> None:
        """An inference request admitted at queue `position` (itself included) was answered after `seconds`."""
        if self.limits is not None:
            self.limits.record(position, seconds)

    def admits(self) -> bool:
        """Whether a request arriving now may be admitted: always without an SLO, and during an outage (the limit
        measured a worker that is gone; what waits is answered by the next one, measured afresh: refusing here
        would turn a crash into errors for the clients)."""
        return self.limits is None or self.outage or self.limits.admits(self.outstanding)

    def switch(self, url: str, reason: SwitchReason = "switch") -> None:
        self.current = url
        self.outage = False
        self._measure_afresh()  # a new decision or a restarted worker
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
        return sum(self.in_flight.values()) + self.admitted

    async def drained(self, url: str, timeout_s: float) -> bool:
        """Wait until no request is in flight at `url`; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight[url] > 0:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True
