"""Every registered policy through the same invariants (river's test_estimators pattern)."""

from __future__ import annotations

import pytest

from oltunes.errors import ConfigError
from oltunes.policies import Policy, PolicyContext
from oltunes.sim.cluster import SimCluster
from oltunes.sim.run import prepare, run_policy
from oltunes.sim.scenario import load_scenario
from oltunes.types import JobSpec, Placement

EXPECTED = {"oltunes", "oltunes-profiled", "round-robin", "least-loaded", "random", "static-profile", "gavel-like", "oracle"}


def test_all_seven_policies_are_registered():
    assert EXPECTED <= set(Policy.known())
    with pytest.raises(ConfigError, match="round-robin"):
        Policy.lookup("no-such-policy")


@pytest.fixture(scope="module")
def tiny(shared_data):
    return prepare(load_scenario("tiny"))


@pytest.fixture(scope="module")
def ctx(tiny):
    sc = tiny.scenario
    return PolicyContext(model=tiny.model, variants=tuple(tiny.model.variants()), batch_sizes=tuple(sc.batch_sizes),
                         concurrencies=tuple(sc.concurrencies), seed=0)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_policy_respects_capacity_and_accuracy_floor(name, tiny):
    res = run_policy(tiny, name)
    assert res.decisions > 0
    assert res.capacity_violations == 0 and res.floor_violations == 0 and res.invalid_decisions == 0
    for r in res.runs:
        if r.decision is not None:
            v = r.decision.candidate.variant
            assert v.family == r.job.spec.family and v.accuracy >= r.job.spec.accuracy_floor - 1e-12


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_policy_waits_when_the_cluster_is_full(name, tiny, ctx):
    cluster = SimCluster(tiny.scenario.pool_list())
    filler = tiny.model.variant("resnet18_v1")
    from oltunes.types import Candidate

    k = 0
    for p in cluster.pools:
        for d in range(p.count):
            for _ in range(p.slots_per_device):
                cand = Candidate(pool=p.name, accelerator=p.accelerator.name, variant=filler, batch_size=1)
                cluster.place(Placement(job_id=f"f{k}", pool=p.name, device=d, candidate=cand, slo_ms=300))
                k += 1
    policy = Policy.make(name, ctx=ctx)
    job = JobSpec(job_id="new", kind="streaming", family="bert", slo_ms=300, arrival_rate_rps=5,
                  accuracy_floor=tiny.model.best_accuracy("bert") - 0.04)
    d = policy.decide(job, cluster)
    assert d is None, f"{name} placed a job on a full cluster: {d.candidate.key if d else None}"


def test_oltunes_retune_passes_the_current_placement_and_stays(tiny, ctx):
    """The engine names the job's old placement while re-tuning; the tuner then keeps a near-best placement
    (same device) instead of moving the job."""
    cluster = SimCluster(tiny.scenario.pool_list())
    policy = Policy.make("oltunes", ctx=ctx, explore_rate=0.0)
    job = JobSpec(job_id="s", kind="streaming", family="bert", slo_ms=300, arrival_rate_rps=5,
                  accuracy_floor=tiny.model.best_accuracy("bert") - 0.04)
    d = policy.decide(job, cluster)
    dev = d.group.device if d.group else cluster.least_loaded_device(d.pool)
    pl = Placement(job_id="s", pool=d.pool, device=dev, candidate=d.candidate, slo_ms=300, arrival_rate_rps=5)
    cluster.place(pl)
    cluster.remove("s", keep_load=True)
    cluster.retuning = pl
    again = policy.decide(job, cluster)
    assert "kept the current placement" in again.explanation.note
    assert again.group is not None and (again.group.pool, again.group.device) == (d.pool, dev)


def test_oltunes_profiled_starts_from_the_offline_profile(ctx):
    """Its prior is the same isolated profile the static baselines read: cold predictions match it."""
    policy = Policy.make("oltunes-profiled", ctx=ctx)
    rows = policy.profile_rows()
    r = next(r for r in rows if r["accelerator"] == "a100" and r["batch_size"] == 4)
    v = ctx.model.variant(r["variant"])
    from oltunes.types import Candidate

    cand = Candidate(pool="x", accelerator="a100", variant=v, batch_size=4)
    pred = policy.tuner.predict(JobSpec(family=v.family, slo_ms=100), [cand])[0]
    assert pred.latency_p99_ms == pytest.approx(r["latency_ms"], rel=1e-6)
