"""Latency statistics shared by batch mode and serve mode (same keys in both records)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def latency_summary(ms: Sequence[float] | np.ndarray, prefix: str = "latency") -> dict[str, float | None]:
    """p50/p95/p99/mean/max of latencies in milliseconds; None values when there are none."""
    a = np.asarray(ms, dtype=np.float64)
    keys = ("p50", "p95", "p99", "mean", "max")
    if a.size == 0:
        return {f"{prefix}_{k}_ms": None for k in keys}
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    values = (p50, p95, p99, a.mean(), a.max())
    return {f"{prefix}_{k}_ms": round(float(v), 4) for k, v in zip(keys, values, strict=True)}


class LatencyHistogram:
    """Latencies in bounded memory (an HDR histogram: 3 significant digits from 1 µs to 10 min), mergeable exactly.

    Replaces keeping every sample: the load generator, the serving windows and the parts of a batch job each
    record into one of these, and `merge` (or `from_encoded` across processes) gives the same percentiles as
    recording every sample into one histogram.

    >>> h = LatencyHistogram()
    >>> for ms in (1.0, 2.0, 3.0, 100.0):
    ...     h.record(ms)
    >>> h.count, round(h.percentile(50), 1), round(h.percentile(100), 0)
    (4, 2.0, 100.0)
    """

    LOWEST_US, HIGHEST_US, DIGITS = 1, 600_000_000, 3

    def __init__(self) -> None:
        from hdrh.histogram import HdrHistogram

        self._h = HdrHistogram(self.LOWEST_US, self.HIGHEST_US, self.DIGITS)

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    def record(self, ms: float) -> None:
        self._h.record_value(min(max(int(round(ms * 1e3)), self.LOWEST_US), self.HIGHEST_US))

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        self._h.add(other._h)
        return self

    def percentile(self, q: float) -> float | None:
        return self._h.get_value_at_percentile(q) / 1e3 if self.count else None

    def encode(self) -> str:
        """A compact text form (HdrHistogram's base64 codec) for passing between processes."""
        return self._h.encode().decode()

    @classmethod
    def from_encoded(cls, text: str) -> LatencyHistogram:
        h = cls()
        h._h.decode_and_add(text.encode())
        return h

    def summary(self, prefix: str = "latency") -> dict[str, float | None]:
        """The same keys as `latency_summary`."""
        keys = ("p50", "p95", "p99", "mean", "max")
        if not self.count:
            return {f"{prefix}_{k}_ms": None for k in keys}
        values = (*(self.percentile(q) for q in (50, 95, 99)), self._h.get_mean_value() / 1e3, self._h.get_max_value() / 1e3)
        return {f"{prefix}_{k}_ms": round(float(v), 4) for k, v in zip(keys, values, strict=True)}
