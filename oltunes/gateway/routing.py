"""`Route`: where one model's requests go now, and what is still in flight at each worker (so an old one drains).

The supervisor of a model's workers moves a route (`switch`) once a new worker is healthy, then waits for the
old one to drain (`drained`) before stopping it; the gateway sends every attempt to `current`.

Admission: `predicted_wait_ms` is what a request arriving now would wait, from a model fitted to what the
gateway saw: each answered request's latency against its position in the queue when it was admitted (the
requests outstanding then, itself included), ``latency = fixed + per_request x position``, a least-squares fit
with exponential forgetting (`WaitModel`). ``per_request`` is 1 / the throughput the worker really sustains
(the model, its HTTP handling, a busy machine: whatever limits it) and ``fixed`` the batching delay and the
round trip. Fitting the latency itself, not only the completion rate, keeps the model honest when the worker
slows down or the machine is busy: the latencies rise and the bound tightens. Admission compares the fit plus
two spreads of its relative residuals (`WaitModel.upper`) with the SLO, since the SLO bounds the p99, not the
mean. A request over it is refused at once (429), so answered requests keep to about the SLO under overload
while the worker stays busy. Until the fit has a few answers nothing is refused, and neither is a request that
finds nothing outstanding (its answer updates the fit, so a model that once saw slow answers cannot refuse
forever).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

SwitchReason = Literal["start", "switch", "restart"]
FORGETTING = 0.02  # weight of the newest answer in the fit (about the last 50 answers count)
MIN_ANSWERS = 8  # answers seen before the fit refuses anything
UPPER_SPREADS = 2.0  # admission compares the fit + this many relative spreads of its residuals with the SLO


@dataclass
class WaitModel:
    """``latency ~ fixed + per_request x position``, fitted by exponentially weighted least squares."""

    answers: int = 0
    _w: float = 0.0  # decayed sums: weight, x, y, x^2, x*y
    _x: float = 0.0
    _y: float = 0.0
    _xx: float = 0.0
    _xy: float = 0.0
    _rr: float = 0.0  # decayed sum of squared relative residuals, and its weight
    _wr: float = 0.0

    def record(self, position: int, seconds: float) -> None:
        keep = 1 - FORGETTING
        expected = self.predict(position)
        if expected > 0:
            self._rr, self._wr = keep * self._rr + ((seconds - expected) / expected) ** 2, keep * self._wr + 1
        self._w, self._x, self._y = keep * self._w + 1, keep * self._x + position, keep * self._y + seconds
        self._xx, self._xy = keep * self._xx + position * position, keep * self._xy + position * seconds
        self.answers += 1

    def coefficients(self) -> tuple[float, float] | None:
        """(fixed s, per_request s); None until `MIN_ANSWERS` answers."""
        if self.answers < MIN_ANSWERS:
            return None
        mx, my = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mx * mx
        if var < 0.25 or var < (0.1 * mx) ** 2:  # positions too close together to fit a slope (a line through
            return 0.0, my / mx  # them extrapolates wildly): latency taken as proportional to the position
        slope = max((self._xy / self._w - mx * my) / var, 0.0)
        fixed = my - slope * mx
        if fixed < 0:  # the line would go below 0 at no queue: through the origin instead
            return 0.0, self._xy / self._xx
        return fixed, slope

    def predict(self, position: int) -> float:
        """The expected latency (s) at queue `position`; 0 until fitted."""
        c = self.coefficients()
        return 0.0 if c is None else c[0] + c[1] * position

    def upper(self, position: int) -> float:
        """A latency (s) at `position` that about 98 % of answers stay under: the fit + 2 relative spreads of its
        residuals (SLOs are p99 targets; on a noisy machine the spread grows and the bound tightens)."""
        spread = (self._rr / self._wr) ** 0.5 if self._wr else 0.0
        return self.predict(position) * (1 + UPPER_SPREADS * spread)


@dataclass
class Route:
    name: str
    slo_ms: float | None = None
    current: str | None = None
    in_flight: Counter = field(default_factory=Counter)
    on_switch: Callable[[str, SwitchReason], None] | None = None  # the gateway counts switches and restarts
    waits: WaitModel = field(default_factory=WaitModel)
    admitted: int = 0  # admitted from their headers, not yet sent to a worker (their bodies are arriving)
    _moved: asyncio.Event | None = None

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
        self.waits.record(position, seconds)

    def predicted_wait_ms(self) -> float:
        """How long a request arriving now would take at most (`WaitModel.upper`, from the requests outstanding)."""
        return self.waits.upper(self.outstanding + 1) * 1e3

    def switch(self, url: str, reason: SwitchReason = "switch") -> None:
        self.current = url
        self.waits = WaitModel()  # a new decision or a restarted worker: its waits are measured afresh
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
