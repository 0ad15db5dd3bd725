"""Compile, or load from the cache, the tuner's kernels (``oltunes.jit``) before a request needs them.

The first fit and the first decisions of a process compile the kernels (~15 s of CPU when their cache is cold: the
first start after an install or an upgrade, every start of a read-only install without a writable home) or load them
(~0.3 s). The tuning service runs this before it serves (``service.create_app``), so no client's first ``observe`` or
``recommend`` waits for a compiler past its timeout. A throwaway tuner takes every kernel's path with the types a
tuner passes: learning from batch and streaming measurements, deciding a feasible job (the grid, the runner-ups), a
running one beside a co-runner, and one nothing can serve; ``tests/tuner/test_warmup.py`` checks that a simulated run
compiles nothing after it. (The decision side itself is plain numpy: nothing of it is compiled.)
"""

from __future__ import annotations

from oltunes.inventory import CATALOG
from oltunes.tuner.core import Tuner
from oltunes.types import (
    Candidate,
    ClusterState,
    JobSpec,
    Measurement,
    Placement,
    Pool,
    Variant,
)

__all__ = ["warm_up"]


def warm_up() -> None:
    """Learn and decide once down every compiled path, on a throwaway tuner."""
    variants = [Variant(family="warm", name=f"warm-{s}", size=s, accuracy=a, params=p, gflops=g)
                for s, a, p, g in (("s", 0.7, 10**6, 0.5), ("l", 0.8, 10**7, 4.0))]
    tuner = Tuner(variants, seed=0, explore_rate=0.0)
    pools = [Pool(name="t4", accelerator=CATALOG["t4"], count=2), Pool(name="cpu", accelerator=CATALOG["cpu"], count=1)]
    stream = JobSpec(job_id="warm-stream", kind="streaming", family="warm", slo_ms=1e4, arrival_rate_rps=20.0)
    batch = JobSpec(job_id="warm-batch", family="warm", slo_ms=1e4, items=100)
    for i, (job, lat) in enumerate(((stream, 20.0), (batch, 30.0), (stream, 25.0), (batch, 35.0))):
        c = tuner.decide(job, ClusterState(pools=pools)).candidate
        for b in (c.batch_size, 1):
            tuner.observe(_measured(job, c.model_copy(update={"batch_size": b}), lat, f"warm-{i}-{b}"))
    first = tuner.decide(stream, ClusterState(pools=pools)).candidate
    running = Placement(job_id=stream.job_id, pool=first.pool, device=0, candidate=first, slo_ms=stream.slo_ms,
                        arrival_rate_rps=stream.arrival_rate_rps)
    busy = ClusterState(pools=pools, placements=[running])
    tuner.decide(stream, busy, current=running)  # a re-tune: staying weighed
    tuner.decide(stream.model_copy(update={"job_id": "warm-other"}), busy)  # beside a co-runner
    for job in (stream, batch):  # nothing feasible
        tuner.decide(job.model_copy(update={"job_id": f"{job.job_id}-late", "slo_ms": 1e-3}), busy)


def _measured(job: JobSpec, c: Candidate, latency_ms: float, mid: str) -> Measurement:
    streaming = job.kind == "streaming"
    return Measurement(measurement_id=mid, job_id=job.job_id, kind=job.kind, candidate=c, items=100, wall_s=1.0,
                       arrival_rate_rps=job.arrival_rate_rps, latency_p50_ms=0.8 * latency_ms,
                       latency_p95_ms=0.95 * latency_ms, latency_p99_ms=latency_ms,
                       throughput_items_per_s=1000.0 * c.batch_size / latency_ms, energy_j_per_item=0.5,
                       energy_source="estimated", request_latency_p99_ms=2 * latency_ms if streaming else None,
                       queueing_delay_ms=latency_ms / 2 if streaming else None)
