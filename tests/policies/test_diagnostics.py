"""The diagnostic policies behind ``benchmarks/gap_analysis.py``: the same selection code with other knowledge."""

from __future__ import annotations

import pytest

from benchmarks.gap_analysis import gap_one
from oltunes.policies import Policy
from oltunes.sim.scenario import load_scenario
from oltunes.simulation import context, prepare
from oltunes.types import ClusterState, JobSpec


@pytest.fixture(scope="module")
def tiny(shared_data):
    return prepare(load_scenario("tiny"))


def _batch_job(p):
    return JobSpec(job_id="j", kind="batch", family="resnet", slo_ms=5000, items=100,
                   accuracy_floor=p.model.best_accuracy("resnet") - 0.04)


def test_oracle_public_predicts_from_the_table_the_oracle_from_the_truth(tiny):
    table, truth = tiny.model, tiny.truth()
    ctx, cluster, job = context(tiny, truth), ClusterState(pools=tiny.scenario.pool_list()), _batch_job(tiny)
    for name, model, other in (("oracle-public", table, truth), ("oracle", truth, table)):
        d = Policy.make(name, ctx=ctx).decide(job, cluster)
        pred = d.explanation.predicted.latency_p99_ms
        assert pred == pytest.approx(model.truth(job, d.candidate).latency_p99_ms, rel=1e-6), name
        assert pred != pytest.approx(other.truth(job, d.candidate).latency_p99_ms, rel=1e-3), name


def test_true_table_profiles_the_truth_and_profiled_the_public_table(tiny):
    truth = tiny.truth()
    ctx = context(tiny, truth)
    rows = {name: {(r["accelerator"], r["variant"], r["batch_size"]): r["latency_ms"]
                   for r in Policy.make(name, ctx=ctx).profile_rows()}
            for name in ("oltunes-true-table", "oltunes-profiled")}
    assert rows["oltunes-true-table"].keys() == rows["oltunes-profiled"].keys()
    acc, variant, _ = next(iter(rows["oltunes-profiled"]))
    factor = truth.truth_factor(truth.variant_index(variant), acc)
    assert factor != pytest.approx(1.0, abs=1e-3)
    ratios = {k: rows["oltunes-true-table"][k] / rows["oltunes-profiled"][k] for k in rows["oltunes-profiled"]
              if k[:2] == (acc, variant)}
    assert all(r == pytest.approx(factor, rel=1e-6) for r in ratios.values()), (factor, ratios)


def test_the_warm_pass_starts_from_what_the_cold_pass_learned(shared_data):
    out = gap_one("tiny", 0)
    v = out["violation_rate"]
    assert set(v) == {"cold", "warm", "table", "oracle", "public"}
    # learning shows: the cold run's first quarter is its worst, and a warm start removes most of that regret
    cold, warm = out["regret_per_quarter"]["cold"], out["regret_per_quarter"]["warm"]
    assert cold[0] > warm[0]
