"""The synthetic set-up the tuner benchmarks share (``tuner_latency``, ``tuner_state``): seeded variants, clusters,
jobs and measurements from a simple performance model (the ground truth here, not the tuner's prior).

* ``synthetic_tuner`` / ``synthetic_cluster``: 10 pools (each catalogue accelerator once, A100 and T4 twice), two
  jobs placed on each, 18 variants (2 families x 3 sizes x 3 precisions), batch sizes 1-16, concurrencies 1-4;
* ``scale_cluster``: ``SCALE_POOLS`` pools of 1,000 or 10,000 devices in all, a share of them running one job;
* ``synthetic_measurement`` / ``synthetic_jobs``: what the tuner learns from and is asked about.
"""

from __future__ import annotations

import numpy as np

from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.types import (
    Candidate,
    ClusterState,
    CoRunner,
    JobSpec,
    Measurement,
    Placement,
    Pool,
    Variant,
)

SCALE_POOLS = 40
SCALE_DEVICES = {"1k": 1_000, "10k": 10_000}

# family -> size -> (parameters, fp32 accuracy); precision -> (relative compute, accuracy loss)
FAMILIES = {
    "cnn": {"s": (1_200_000, 0.90), "m": (5_000_000, 0.94), "l": (22_000_000, 0.97)},
    "vit": {"s": (2_000_000, 0.92), "m": (9_000_000, 0.95), "l": (30_000_000, 0.98)},
}
PRECISIONS = {"fp32": (1.0, 0.0), "fp16": (0.6, 0.002), "int8": (0.45, 0.012)}
# effective TFLOP/s of the synthetic ground truth (not the tuner's prior)
SPEED = {"cpu": 0.4, "p100": 6.0, "t4": 7.0, "l4": 14.0, "a10": 14.0, "v100": 14.0, "a100": 30.0, "h100": 60.0}
BATCHES = (1, 2, 4, 8, 16)
CONCURRENCIES = (1, 2, 3, 4)


def synthetic_variants() -> list[Variant]:
    return [
        Variant(family=f, name=f"{f}-{s}-{p}", size=s, precision=p, accuracy=round(acc - loss, 3),
                params=params, bytes=int(params * {"fp32": 4, "fp16": 2, "int8": 1}[p]))
        for f, sizes in FAMILIES.items()
        for s, (params, acc) in sizes.items()
        for p, (_, loss) in PRECISIONS.items()
    ]


def synthetic_tuner(seed: int) -> tuple[np.random.Generator, list[Variant], ClusterState, Tuner]:
    """The generator, variants, cluster and a cold tuner every tuner benchmark starts from."""
    rng = np.random.default_rng(seed)
    variants = synthetic_variants()
    cluster = synthetic_cluster(rng, variants)
    return rng, variants, cluster, Tuner(variants, batch_sizes=BATCHES, concurrencies=CONCURRENCIES, seed=seed)


def synthetic_cluster(rng: np.random.Generator, variants: list[Variant], per_pool: int = 2) -> ClusterState:
    kinds = [*CATALOG, "a100", "t4"]
    pools = [Pool(name=f"{k}-{i}", accelerator=CATALOG[k], count=int(rng.integers(2, 9)), slots_per_device=4)
             for i, k in enumerate(kinds)]
    placements = [
        Placement(job_id=f"running-{p.name}-{j}", pool=p.name, device=j % p.count,
                  candidate=_candidate(p, variants[int(rng.integers(len(variants)))], rng),
                  slo_ms=100.0, arrival_rate_rps=float(rng.choice([0.0, 50.0])))
        for p in pools for j in range(per_pool)
    ]
    return ClusterState(pools=pools, placements=placements)


def _candidate(pool: Pool, v: Variant, rng: np.random.Generator, co: tuple[CoRunner, ...] = ()) -> Candidate:
    return Candidate(pool=pool.name, accelerator=pool.accelerator.name, variant=v,
                     batch_size=int(rng.choice(BATCHES)), concurrency=int(rng.choice(CONCURRENCIES)), co_runners=co)


def scale_cluster(rng: np.random.Generator, variants: list[Variant], devices: int,
                  occupied_share: float = 0.25) -> ClusterState:
    """``devices`` spread over ``SCALE_POOLS`` pools; ``occupied_share`` of them run one job (random devices)."""
    kinds = list(CATALOG)
    per_pool = [devices // SCALE_POOLS + (i < devices % SCALE_POOLS) for i in range(SCALE_POOLS)]
    pools = [Pool(name=f"{kinds[i % len(kinds)]}-{i}", accelerator=CATALOG[kinds[i % len(kinds)]], count=n,
                  slots_per_device=4) for i, n in enumerate(per_pool)]
    placements = [
        Placement(job_id=f"running-{p.name}-{int(d)}", pool=p.name, device=int(d),
                  candidate=_candidate(p, variants[int(rng.integers(len(variants)))], rng),
                  slo_ms=100.0, arrival_rate_rps=float(rng.choice([0.0, 50.0])))
        for p in pools for d in rng.choice(p.count, size=round(p.count * occupied_share), replace=False)
    ]
    return ClusterState(pools=pools, placements=placements)


def true_latency_ms(c: Candidate) -> float:
    """Synthetic ground truth: compute-bound batch cost + fixed overhead, slowed by concurrency and co-runners."""
    compute, _ = PRECISIONS[c.variant.precision]
    gflop = 2e-9 * c.variant.params * 60 * compute * c.batch_size**0.85
    base = (0.2 if c.accelerator == "cpu" else 0.8) + gflop / SPEED[c.accelerator]
    load = sum(r.load for r in c.co_runners)
    return base * (1 + 0.35 * (c.concurrency - 1)) * (1 + 0.6 * load)


def synthetic_measurement(
    rng: np.random.Generator, cluster: ClusterState, variants: list[Variant], i: int
) -> Measurement:
    pool = cluster.pools[int(rng.integers(len(cluster.pools)))]
    co = tuple(CoRunner(job_id=pl.job_id, family=pl.candidate.variant.family, variant=pl.candidate.variant.name,
                        size=pl.candidate.variant.size, precision=pl.candidate.variant.precision,
                        batch_size=pl.candidate.batch_size, load=0.5)
               for pl in cluster.jobs_on(pool.name, 0))
    c = _candidate(pool, variants[int(rng.integers(len(variants)))], rng, co if rng.random() < 0.5 else ())
    p99 = true_latency_ms(c) * float(np.exp(rng.normal(0, 0.08)))
    thr = 1000.0 * c.batch_size * c.concurrency / p99
    energy = CATALOG[c.accelerator].max_w * 0.7 / thr
    streaming = rng.random() < 0.5
    return Measurement(
        measurement_id=f"bench-{i}", job_id=f"job-{i}", kind="streaming" if streaming else "batch",
        arrival_rate_rps=50.0 if streaming else 0.0, candidate=c, items=1000, wall_s=1000 / thr,
        latency_p50_ms=p99 * 0.7, latency_p95_ms=p99 * 0.9, latency_p99_ms=p99, throughput_items_per_s=thr,
        energy_j_per_item=energy, energy_source="simulated", accuracy=c.variant.accuracy, simulated=True,
    )


def synthetic_jobs(rng: np.random.Generator, n: int) -> list[JobSpec]:
    jobs = []
    for i in range(n):
        streaming = bool(i % 2)
        jobs.append(JobSpec(
            job_id=f"bench-job-{i}", kind="streaming" if streaming else "batch", family=("cnn", "vit")[i % 4 // 2],
            slo_ms=float(rng.choice([5.0, 20.0, 50.0, 200.0])), accuracy_floor=float(rng.choice([0.0, 0.9, 0.95])),
            objective="energy", arrival_rate_rps=float(rng.choice([10.0, 100.0])) if streaming else 0.0,
            items=0 if streaming else 10_000,
        ))
    return jobs
