"""`ConcurrencyLimit`: how many requests a model's worker may have outstanding so that new ones meet the SLO.

Little's law: a queue served at throughput ``X`` answers ``N`` outstanding requests in about ``b + N / X`` (``b``
the batching delay and the round trip). The most a route may hold is then ``L = X (T - b)`` for a latency
target ``T`` (the SLO). Neither ``X`` nor ``b`` is known, and both move (another decision, a busy machine), so
the limit is measured, not fitted: answers are collected in windows of about half the limit; at the end of a
window, with ``N`` the mean queue position its requests were admitted at and ``q`` their 95th latency
percentile, the limit moves to ``N T / q``. Saturated, that has exactly ``X (T - b)`` as its fixed point
(``q = b + N / X``); below saturation ``q`` stays near ``b`` and the limit stays well above what is in use, so
bursts are not refused. Steps are clamped to ``[0.5x, 2x]``, and steps down are damped (halfway, in log space): the
answers of one window were admitted under an earlier limit. A throughput figure, not a line through noisy single latencies,
decides, so one slow answer moves the limit a little, and a stall moves it down at once.

Until the first window closes nothing is limited; a request that finds nothing outstanding is always admitted
(a limit learnt from a stall cannot refuse forever: its answer feeds the next window).
"""

from __future__ import annotations

import math

TAIL_QUANTILE = 0.95  # the window's latency that has to meet the SLO
MIN_WINDOW = 8  # answers in a window at least (fewer make the tail quantile noise)
MAX_WINDOW = 512  # ... and at most (a bounded list per route)
STEP_CLAMP = 2.0  # the limit moves by at most this factor per window
DAMPING = 0.5  # the share of the step (in log space) taken at once


class ConcurrencyLimit:
    def __init__(self, slo_s: float) -> None:
        self.slo_s = slo_s
        self.limit: float | None = None  # None: not measured yet, nothing refused
        self.windows = 0
        self._latencies: list[float] = []
        self._positions = 0

    def record(self, position: int, seconds: float) -> None:
        """An answer: the request was admitted at queue `position` (itself included) and took `seconds`."""
        self._latencies.append(seconds)
        self._positions += position
        size = MIN_WINDOW if self.limit is None else min(max(MIN_WINDOW, int(self.limit / 2)), MAX_WINDOW)
        if len(self._latencies) >= size:
            self._close_window()

    def _close_window(self) -> None:
        lat = sorted(self._latencies)
        q = lat[min(len(lat) - 1, int(TAIL_QUANTILE * len(lat)))]
        mean_position = self._positions / len(lat)
        self._latencies, self._positions = [], 0
        self.windows += 1
        target = mean_position * self.slo_s / max(q, 1e-6)
        if self.limit is None:
            self.limit = max(target, 1.0)
            return
        step = min(max(target / self.limit, 1 / STEP_CLAMP), STEP_CLAMP)
        # down damped (these answers were admitted under an earlier limit), up at once: after a stall the limit
        # is back within a few windows, while the worker idles otherwise
        self.limit = max(self.limit * (step**DAMPING if step < 1 else step), 1.0)

    def admits(self, outstanding: int) -> bool:
        """Whether one more request may join `outstanding` (those admitted and not yet answered)."""
        return outstanding == 0 or self.limit is None or outstanding < math.floor(self.limit)

    def retry_after_s(self, outstanding: int) -> int:
        """A hint for a refused client: about how long until what is outstanding now has been answered."""
        if not self.limit:
            return 1
        return max(1, math.ceil(outstanding / self.limit * self.slo_s))
