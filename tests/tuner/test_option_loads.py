"""Placement options keep their members' loads while nothing ``load_of`` reads moved (``loads_version``): after
any sequence of cluster changes and measurements (which move measured loads), the kept options equal options
built from a fresh index with every load read again."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.tuner import Tuner
from oltunes.tuner.candidates import placement_options
from oltunes.tuner.cluster_options import ClusterOptions
from oltunes.tuner.occupancy import Occupancy
from oltunes.types import Measurement
from tests.tuner.test_member_rows import _moved
from tests.tuner.test_placement_scale import random_cluster
from tests.tuner.variants import make_variants


def _measured(rng, cluster, k: int) -> Measurement:
    """A streaming measurement of one placed job with a device utilisation (its measured load moves)."""
    p = cluster.placements[int(rng.integers(len(cluster.placements)))]
    p99 = float(rng.uniform(5.0, 300.0))
    return Measurement(measurement_id=f"m{k}", job_id=p.job_id, candidate=p.candidate, items=100, wall_s=1.0,
                       latency_p50_ms=p99 / 2, latency_p95_ms=p99 * 0.9, latency_p99_ms=p99,
                       throughput_items_per_s=100.0, energy_j_per_item=0.5, energy_source="simulated",
                       kind="streaming", arrival_rate_rps=40.0, gpu_util=float(rng.uniform(0.05, 1.0)))


@pytest.mark.parametrize("seed", range(8))
def test_kept_option_loads_equal_loads_read_again(seed):
    rng = np.random.default_rng(seed)
    variants = make_variants()
    cluster = random_cluster(rng, variants, max_count=4)
    while not any(m.arrival_rate_rps for o in placement_options(cluster.pools, Occupancy.of(cluster.placements))
                  for m in o.members):
        cluster = random_cluster(rng, variants, max_count=4)  # drawn until a streaming job shares a device
    tuner = Tuner(variants, seed=seed)
    kept = ClusterOptions(tuner.estimator, tuner.catalogue)
    n_loaded = 0
    for step in range(30):
        cluster = _moved(rng, cluster)
        if step % 3 == 2 and cluster.placements:
            tuner.observe(_measured(rng, cluster, step))
        got, _ = kept.of(cluster, None, None)
        want = placement_options(cluster.pools, Occupancy.of(cluster.placements), load_of=tuner.estimator.load_of)
        assert got == want, step
        n_loaded += sum(ld != 1.0 for o in got for ld in o.loads)
    assert n_loaded  # measured loads other than the default reached the options
