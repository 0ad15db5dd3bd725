"""A trial's measurement weighs what it holds (``tuner.model.estimate_learning.evidence_weight``): a shadow's few
batches move the pooled correction less than a served interval does, and as much once it holds enough."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.tuner.model.correction import PooledCorrection
from oltunes.tuner.model.estimate_learning import TRIAL_FULL_BATCHES, evidence_weight
from oltunes.types import Candidate, Measurement, Variant

V = Variant(family="cnn", name="cnn-s", size="s", accuracy=0.7, params=5_000_000)
W = Variant(family="cnn", name="cnn-m", size="m", accuracy=0.75, params=25_000_000)


def _measurement(purpose: str, items: int, batch: int = 4) -> Measurement:
    c = Candidate(pool="t4-pool", accelerator="t4", variant=V, batch_size=batch, concurrency=1)
    return Measurement(job_id="j", decision_id="d", kind="batch", candidate=c, items=items, wall_s=10.0,
                       latency_p50_ms=5.0, latency_p95_ms=6.0, latency_p99_ms=7.0, throughput_items_per_s=100.0,
                       energy_j_per_item=0.5, energy_source="simulated", purpose=purpose)


def test_a_served_interval_weighs_one_and_a_trial_its_batches_up_to_one():
    assert evidence_weight(_measurement("serve", 4)) == 1.0  # a served interval, however short
    assert evidence_weight(_measurement("shadow", 3 * 4)) == pytest.approx(3 / TRIAL_FULL_BATCHES)
    assert evidence_weight(_measurement("probe", 2 * TRIAL_FULL_BATCHES * 4)) == 1.0
    assert evidence_weight(_measurement("shadow", 1, batch=8)) == pytest.approx(1 / TRIAL_FULL_BATCHES)  # (a partial batch)


def test_a_part_of_a_measurement_moves_the_correction_by_its_part():
    on = np.array([True])
    full, part, none = (PooledCorrection(n_targets=1, root_k=1.0) for _ in range(3))
    for pc in (full, part, none):  # the same history: w served on t4
        pc.learn("t4", W, 4, 1, np.array([1.0]), on)
    full.learn_many([("t4", V, 4, 1, np.array([-1.0]), on, None, True, 1.0)])
    part.learn_many([("t4", V, 4, 1, np.array([-1.0]), on, None, True, 0.2)])
    moved = [float(pc.predict("t4", V, 4, 1)[0]) for pc in (none, part, full)]
    assert moved[0] > moved[1] > moved[2]  # towards the measured -1, the less the less evidence it holds
    # the variant's other configurations too (the shared effects take a fifth of the measurement's weight)
    other = [float(pc.predict("t4", V, 16, 1)[0]) for pc in (none, part, full)]
    assert other[0] > other[1] > other[2]
