"""Every registered policy (``Policy.known()``) through the same invariants (river's test_estimators pattern)."""

from __future__ import annotations

import pytest

from oltunes.errors import ConfigError
from oltunes.policies import Policy, PolicyContext
from oltunes.simulation import prepare, run_policy
from oltunes.sim.scenario import load_scenario
from oltunes.types import Candidate, ClusterState, JobSpec, Placement

ALL = Policy.known()


def test_the_policies_the_report_compares_are_registered():
    assert {"oltunes", "oltunes-profiled", "round-robin", "least-loaded", "random", "static-profile", "gavel-like",
            "oracle"} <= set(ALL)
    with pytest.raises(ConfigError, match="round-robin"):
        Policy.lookup("no-such-policy")


@pytest.fixture(scope="module")
def tiny(shared_data):
    return prepare(load_scenario("tiny"))


@pytest.fixture(scope="module")
def ctx(tiny):
    sc = tiny.scenario
    return PolicyContext(profile=tiny.model, truth=tiny.truth(), variants=tuple(tiny.model.variants()), batch_sizes=tuple(sc.batch_sizes),
                         concurrencies=tuple(sc.concurrencies), seed=0)


@pytest.mark.parametrize("name", ALL)
def test_policy_respects_capacity_and_accuracy_floor(name, tiny):
    res = run_policy(tiny, name)
    assert res.decisions > 0
    assert res.capacity_violations == 0 and res.floor_violations == 0 and res.invalid_decisions == 0
    for r in res.runs:
        if r.decision is not None:
            v = r.decision.candidate.variant
            assert v.family == r.job.spec.family and v.accuracy >= r.job.spec.accuracy_floor - 1e-12


@pytest.mark.parametrize("name", ALL)
def _full(tiny) -> ClusterState:
    filler = tiny.model.variant("resnet18_v1")
    placements = []
    for p in tiny.scenario.pool_list():
        for d in range(p.count):
            for k in range(p.slots_per_device):
                cand = Candidate(pool=p.name, accelerator=p.accelerator.name, variant=filler, batch_size=1)
                placements.append(Placement(job_id=f"f-{p.name}-{d}-{k}", pool=p.name, device=d, candidate=cand,
                                            slo_ms=300))
    return ClusterState(pools=tiny.scenario.pool_list(), placements=placements)


@pytest.mark.parametrize("name", ALL)
def test_policy_waits_when_the_cluster_is_full(name, tiny, ctx):
    policy = Policy.make(name, ctx=ctx)
    job = JobSpec(job_id="new", kind="streaming", family="bert", slo_ms=300, arrival_rate_rps=5,
                  accuracy_floor=tiny.model.best_accuracy("bert") - 0.04)
    d = policy.decide(job, _full(tiny))
    assert d is None, f"{name} placed a job on a full cluster: {d.candidate.key if d else None}"


@pytest.mark.parametrize("name", ALL)
def test_a_decision_names_a_real_device_with_a_free_slot(name, tiny, ctx):
    """On a full cluster but for one empty device, every policy places the job on that device."""
    state = _full(tiny)
    freed = state.placements[-1]
    state.placements = [pl for pl in state.placements if (pl.pool, pl.device) != (freed.pool, freed.device)]
    job = JobSpec(job_id="new", kind="batch", family="resnet", slo_ms=2000, items=100,
                  accuracy_floor=tiny.model.best_accuracy("resnet") - 0.04)
    d = Policy.make(name, ctx=ctx).decide(job, state)
    assert d is not None, name
    assert d.pool == freed.pool and (d.group is None or d.group.device == freed.device), name
    assert d.candidate.accelerator == state.pool(freed.pool).accelerator.name


def test_oltunes_keeps_its_current_placement_when_re_decided(tiny, ctx):
    """Re-deciding a running job passes its placement as ``current``; the tuner keeps a near-best placement
    (same device) instead of moving the job."""
    pools = tiny.scenario.pool_list()
    policy = Policy.make("oltunes", ctx=ctx, explore_rate=0.0)
    job = JobSpec(job_id="s", kind="streaming", family="bert", slo_ms=300, arrival_rate_rps=5,
                  accuracy_floor=tiny.model.best_accuracy("bert") - 0.04)
    d = policy.decide(job, ClusterState(pools=pools))
    dev = d.group.device if d.group else 0
    pl = Placement(job_id="s", pool=d.pool, device=dev, candidate=d.candidate, slo_ms=300, arrival_rate_rps=5)
    again = policy.decide(job, ClusterState(pools=pools), current=pl)
    assert "kept the current placement" in again.explanation.note
    assert again.group is not None and (again.group.pool, again.group.device) == (d.pool, dev)


def test_oltunes_profiled_starts_from_the_offline_profile(ctx):
    """Its prior is the same isolated profile the static baselines read: cold predictions match it."""
    policy = Policy.make("oltunes-profiled", ctx=ctx)
    rows = policy.profile_rows()
    r = next(r for r in rows if r["accelerator"] == "a100" and r["batch_size"] == 4)
    v = ctx.profile.variant(r["variant"])
    cand = Candidate(pool="x", accelerator="a100", variant=v, batch_size=4)
    pred = policy.tuner.predict(JobSpec(family=v.family, slo_ms=100), [cand])[0]
    assert pred.latency_p99_ms == pytest.approx(r["latency_ms"], rel=1e-6)
