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
