"""Latency statistics in bounded memory: HDR histograms agree with the exact percentiles and merge exactly."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.launchers.base import WorkerResult
from oltunes.launchers.batch_job import measurement_from_results
from oltunes.types import Candidate, JobSpec, Variant
from oltunes.worker.stats import LatencyHistogram


def filled(samples: np.ndarray) -> LatencyHistogram:
    h = LatencyHistogram()
    for ms in samples:
        h.record(float(ms))
    return h


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_percentiles_match_the_exact_ones_to_three_digits(seed):
    ms = np.random.default_rng(seed).lognormal(mean=1.0, sigma=1.2, size=20_000)
    h = filled(ms)
    assert h.count == ms.size
    for q in (50, 95, 99, 99.9):
        # the rank convention may differ by one sample: bracket by the neighbouring ranks, then 3 digits
        lo, hi = np.percentile(ms, [q - 0.01, q + 0.01], method="inverted_cdf")
        assert lo * (1 - 2e-3) - 1e-3 <= h.percentile(q) <= hi * (1 + 2e-3) + 1e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merging_parts_equals_recording_everything_in_one(seed):
    rng = np.random.default_rng(seed)
    parts = [rng.lognormal(mean=m, sigma=0.5, size=n) for m, n in ((0.5, 3000), (2.0, 500), (1.0, 8000))]
    whole = filled(np.concatenate(parts))
    merged = LatencyHistogram()
    for p in parts:  # through the text form, as parts cross processes
        merged.merge(LatencyHistogram.from_encoded(filled(p).encode()))
    assert merged.summary() == whole.summary() and merged.count == whole.count


def test_a_batch_jobs_p99_is_the_merged_one_not_the_worst_parts():
    rng = np.random.default_rng(7)
    fast, slow = rng.normal(2.0, 0.1, 9_900).clip(0.1), rng.normal(20.0, 1.0, 100).clip(0.1)
    v = Variant(family="cnn", name="cnn-s", size="s", accuracy=0.9)
    c = Candidate(pool="p", accelerator="cpu", variant=v, batch_size=8)

    def part(ms: np.ndarray) -> WorkerResult:
        h = filled(ms)
        rep = {"items": ms.size * 8, "wall_s": 1.0, **h.summary(), "latency_hdr": h.encode()}
        return WorkerResult(returncode=0, report=rep)

    m = measurement_from_results(JobSpec(family="cnn", slo_ms=100), c, [part(fast), part(slow)])
    both = filled(np.concatenate([fast, slow]))
    assert m.latency_p99_ms == pytest.approx(both.percentile(99))  # 1 % of all batches were slow: p99 sits at their edge
    assert m.latency_p99_ms < 0.9 * float(np.percentile(slow, 99))  # the worst part's p99 would have said ~22 ms
