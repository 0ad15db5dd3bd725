"""Co-runner checks re-plan only the members whose device changed: the per-member memo gives exactly what a
cold start gives, after any sequence of cluster changes (jobs moving between devices, joining, leaving)."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.tuner import Tuner
from oltunes.tuner.candidates import placement_options
from oltunes.tuner.corunners import member_checks
from oltunes.tuner.occupancy import Occupancy
from oltunes.types import ClusterState, JobSpec, Measurement

from tests.tuner.test_placement_scale import random_cluster
from tests.tuner.variants import make_variants


def _checks(tuner: Tuner, cluster: ClusterState, job: JobSpec):
    est = tuner.estimator
    options = placement_options(cluster.pools, Occupancy.of(cluster.placements), load_of=est.load_of)
    return member_checks(est, options, tuner.catalogue.family(job.family), job)


def _moved(rng, cluster: ClusterState) -> ClusterState:
    """One job moves to another device of its pool (its old and new co-runners see a different device)."""
    placements = list(cluster.placements)
    if len(placements) < 2:
        return cluster
    i = int(rng.integers(len(placements)))
    pool = cluster.pool(placements[i].pool)
    placements[i] = placements[i].model_copy(update={"device": int(rng.integers(pool.count))})
    if rng.random() < 0.3:
        del placements[int(rng.integers(len(placements)))]
    return ClusterState.model_construct(pools=cluster.pools, placements=placements)


def _measured(rng, cluster: ClusterState, k: int) -> Measurement:
    """A measurement of one placed job (it moves the margins, visits and correction the checks read)."""
    p = cluster.placements[int(rng.integers(len(cluster.placements)))]
    p99 = float(rng.uniform(5.0, 300.0))
    return Measurement(measurement_id=f"m{k}", job_id=p.job_id, candidate=p.candidate, items=100, wall_s=1.0,
                       latency_p50_ms=p99 / 2, latency_p95_ms=p99 * 0.9, latency_p99_ms=p99,
                       throughput_items_per_s=100.0, energy_j_per_item=0.5, energy_source="simulated")


@pytest.mark.parametrize("seed", range(8))
def test_member_checks_after_changes_equal_a_cold_start(seed):
    rng = np.random.default_rng(seed)
    variants = make_variants()
    cluster = random_cluster(rng, variants, max_count=4)  # small pools: devices shared by several jobs
    job = JobSpec(family="cnn", kind="streaming", slo_ms=150.0, arrival_rate_rps=60.0)
    warm = Tuner(variants, seed=seed)
    seen: list[Measurement] = []
    for step in range(25):
        cluster = _moved(rng, cluster)
        if step % 4 == 3 and cluster.placements:  # observations between decisions
            seen.append(_measured(rng, cluster, step))
            warm.observe(seen[-1])
        got = _checks(warm, cluster, job)
        cold = Tuner(variants, seed=seed)
        cold.replay(seen)
        want = _checks(cold, cluster, job)
        assert got.by_option == want.by_option and got.sizes == want.sizes
        assert np.array_equal(got.ok, want.ok)
        assert (got.slow is None) == (want.slow is None)
        if got.slow is not None:
            assert np.array_equal(got.slow, want.slow)
