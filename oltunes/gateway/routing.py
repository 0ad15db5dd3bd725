"""`Route`: where one model's requests go now, and what is still in flight at each worker (so an old one drains).

The supervisor of a model's workers moves a route (`switch`) once a new worker is healthy, then waits for the
old one to drain (`drained`) before stopping it; the gateway sends every attempt to `current`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

SwitchReason = Literal["start", "switch", "restart"]


@dataclass
class Route:
    name: str
    slo_ms: float | None = None
    current: str | None = None
    in_flight: Counter = field(default_factory=Counter)
    on_switch: Callable[[str, SwitchReason], None] | None = None  # the gateway counts switches and restarts
    _moved: asyncio.Event | None = None

    def switch(self, url: str, reason: SwitchReason = "switch") -> None:
        self.current = url
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
