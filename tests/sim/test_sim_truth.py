"""A fair test of the prior: the simulator's truth differs from the public profile table by a seeded
per-(variant, accelerator) log-normal factor; baselines read the table, only the oracle reads the truth."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.errors import ConfigError
from oltunes.policies import Policy
from oltunes.sim.perfmodel import PerformanceModel
from oltunes.simulation import context, prepare
from oltunes.sim.scenario import load_scenario
from oltunes.types import ClusterState, JobSpec

ACCELS = ("cpu", "p100", "t4", "v100", "a100", "h100")


@pytest.fixture(scope="module")
def pm(shared_data):
    return PerformanceModel(shared_data)


def _log_factors(table, truth):
    n = len(table.variants())
    return np.array([[np.log(truth.latency_row(v, a)[4] / table.latency_row(v, a)[4]) for a in ACCELS]
                     for v in range(n)])


def test_truth_differs_from_the_table_by_a_seeded_lognormal_factor(pm):
    before = pm.latency_row(0, "a100").copy()
    f = _log_factors(pm, pm.perturbed(0.5, seed=3))
    # one factor per (variant, accelerator): the same at every batch size
    truth = pm.perturbed(0.5, seed=3)
    vi = pm.variant_index("resnet50_v1")
    ratio = truth.latency_row(vi, "t4")[1:] / pm.latency_row(vi, "t4")[1:]
    assert np.allclose(ratio, ratio[0])
    # log-normal with the scenario's sigma (46 x 6 draws: the sample sd is within 15% of 0.5)
    assert abs(np.median(f)) < 0.15 and 0.42 < f.std() < 0.58
    assert len({round(x, 9) for x in f.ravel()}) == f.size  # every pair has its own factor
    # seeded: same seed, same truth; another seed, another truth; the public table is untouched
    assert np.array_equal(f, _log_factors(pm, pm.perturbed(0.5, seed=3)))
    assert not np.allclose(f, _log_factors(pm, pm.perturbed(0.5, seed=4)))
    assert np.array_equal(pm.latency_row(0, "a100"), before)
    assert np.allclose(_log_factors(pm, pm.perturbed(0.0, seed=3)), 0.0)


def test_a_slowdown_changes_only_the_copy_and_only_its_accelerator(pm):
    truth = pm.perturbed(0.5, seed=1)
    a100, t4 = truth.latency_row(5, "a100").copy(), truth.latency_row(5, "t4").copy()
    truth.slow_down("a100", 2.0)
    truth.slow_down("a100", 1.5)
    assert np.allclose(truth.latency_row(5, "a100"), 3.0 * a100)
    assert np.array_equal(truth.latency_row(5, "t4"), t4)
    assert np.array_equal(pm.perturbed(0.5, seed=1).latency_row(5, "a100"), a100)  # the table keeps no slowdown
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="factor"):
            truth.slow_down("a100", bad)
    with pytest.raises(ConfigError, match="sigma"):
        pm.perturbed(float("nan"), seed=0)


def test_baselines_predict_from_the_table_and_only_the_oracle_from_the_truth(shared_data):
    p = prepare(load_scenario("tiny"))
    table, truth = p.model, p.truth()
    ctx = context(p, truth)
    cluster = ClusterState(pools=p.scenario.pool_list())
    job = JobSpec(job_id="j", kind="batch", family="resnet", slo_ms=5000, items=100,
                  accuracy_floor=table.best_accuracy("resnet") - 0.04)

    for name in ("static-profile", "gavel-like"):
        d = Policy.make(name, ctx=ctx).decide(job, cluster)
        c = d.candidate
        pred = d.explanation.predicted.latency_p99_ms
        assert pred == pytest.approx(table.truth(job, c).latency_p99_ms, rel=1e-6), name
        assert pred != pytest.approx(truth.truth(job, c).latency_p99_ms, rel=1e-3), name
    d = Policy.make("oracle", ctx=ctx).decide(job, cluster)
    c = d.candidate
    vi = truth.variant_index(c.variant.name)
    assert d.explanation.predicted.latency_p99_ms == pytest.approx(truth.truth(job, c).latency_p99_ms, rel=1e-6)
    assert truth.truth_factor(vi, c.accelerator) != pytest.approx(1.0, abs=1e-3)
