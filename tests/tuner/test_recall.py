"""Recalled decisions (``tuner.recall``): a question asked again on the same options and model state gets exactly
the decision a full evaluation makes — for another job id (also one of a shared device's members, or a job with a
learned burst backlog), through explorations, observations, fresh placement objects and re-tunes in between."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.tuner.candidates import placement_options
from oltunes.tuner.occupancy import Occupancy
from oltunes.tuner.recall import KEPT_LISTS, DecisionMemo
from oltunes.types import Candidate, ClusterState, JobSpec, Placement, Pool

from tests.tuner.test_decision_caches import _measurement
from tests.tuner.test_placement_scale import random_cluster
from tests.tuner.variants import make_variants

TEMPLATES = [{"family": f, "kind": k, "slo_ms": s, "arrival_rate_rps": r, "items": 500, "accuracy_floor": a,
              "objective": o}
             for f in ("cnn", "vit")
             for k, s, r, a, o in (("batch", 400.0, 0.0, 0.0, "energy"), ("batch", 300.0, 0.0, 0.7, "completion_time"),
                                   ("streaming", 150.0, 60.0, 0.7, "energy"), ("streaming", 80.0, 20.0, 0.0, "energy"))]


def crowded_cluster(rng: np.random.Generator, variants) -> ClusterState:
    """Every device of three pools runs one or two jobs (j0, j1, ...; light ones, so that joining them is
    feasible), the fourth pool is empty: most decisions weigh shared devices."""
    pools = [Pool(name=f"{k}-{i}", accelerator=CATALOG[k], count=int(rng.integers(1, 4)), slots_per_device=4)
             for i, k in enumerate(["t4", "a100", "l4", "cpu"])]
    small = [v for v in variants if v.size == min(x.size for x in variants)] or variants
    placements = [Placement(job_id=f"j{n}", pool=p.name, device=d, slo_ms=500.0,
                            arrival_rate_rps=float(rng.choice([0.0, 5.0])),
                            candidate=Candidate(pool=p.name, accelerator=p.accelerator.name,
                                                variant=small[int(rng.integers(len(small)))], batch_size=1))
                  for p in pools[:3] for d in range(p.count) for n in [0] * int(rng.integers(1, 3))]
    placements = [p.model_copy(update={"job_id": f"j{i}"}) for i, p in enumerate(placements)]
    return ClusterState(pools=pools, placements=placements)


def _dump(d) -> dict:
    x = d.model_dump(mode="json")
    x.pop("decision_id")
    (x.get("group") or {}).pop("group_id", None)
    return x


def _sequence(seed: int, counts: dict[str, int]) -> list[dict]:
    variants = make_variants()
    rng = np.random.default_rng(seed)
    tuner = Tuner(variants, seed=seed, explore_rate=0.3)  # explorations both on recalled and on full questions
    cluster = crowded_cluster(rng, variants) if seed % 2 else random_cluster(rng, variants, max_count=12)
    placed, out = list(cluster.placements), []
    for i in range(240):
        t = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
        # ids: new ones, placed members' (j0, j1, ...: in a group already) and measured jobs' (bursts learned)
        job_id = f"j{int(rng.integers(12))}" if rng.random() < 0.4 else f"new-{i}"
        job = JobSpec(job_id=job_id, **t)
        if i % 23 == 22:
            tuner.observe(_measurement(rng, cluster, variants, int(rng.integers(12))).model_copy(
                update={"measurement_id": f"m{i}"}))
        if i % 31 == 30 and len(placed) > 2:  # a job leaves
            placed.pop(int(rng.integers(len(placed))))
            cluster = ClusterState.model_construct(pools=cluster.pools, placements=list(placed))
        if i % 19 == 18 and placed:  # a placed job's SLO tightens: options equal but for one member's value
            k = int(rng.integers(len(placed)))
            placed[k] = placed[k].model_copy(update={"slo_ms": placed[k].slo_ms * 0.5})
            cluster = ClusterState.model_construct(pools=cluster.pools, placements=list(placed))
        if i % 13 == 0 and placed:
            d = tuner.decide(job, cluster, current=placed[int(rng.integers(len(placed)))].model_copy(
                update={"job_id": job.job_id}))
        elif i % 11 == 0:  # new objects, equal placements (the HTTP service)
            d = tuner.decide(job, ClusterState.model_construct(
                pools=cluster.pools, placements=[p.model_copy() for p in placed]))
        else:
            d = tuner.decide(job, cluster)
        counts["explore"] += d.source == "explore"
        counts["shared"] += d.group is not None
        out.append(_dump(d))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_recalled_decisions_equal_fully_evaluated_ones(monkeypatch, seed):
    counts = {"explore": 0, "shared": 0, "recalled": 0, "recalled_shared": 0}
    recall = DecisionMemo.recall

    def counted(template, job):
        d = recall(template, job)
        counts["recalled"] += 1
        counts["recalled_shared"] += d.group is not None
        return d

    monkeypatch.setattr(DecisionMemo, "recall", staticmethod(counted))
    kept = _sequence(seed, counts)
    # the reference: nothing is ever recalled (a new table on every call)
    monkeypatch.setattr(DecisionMemo, "table", lambda self, options, version: {})
    full = _sequence(seed, dict.fromkeys(counts, 0))
    assert kept == full
    assert counts["recalled"] > 20 and counts["explore"] > 10  # the test can fail: both paths were taken
    if seed % 2:  # the crowded cluster: recalled decisions joined shared devices (groups rebuilt for the new id)
        assert counts["recalled_shared"] > 2


def test_a_recalled_group_names_the_asking_job_last_even_when_it_is_a_member():
    """The asking job's id replaces the template's as the group's last member and its own slowdown entry; a job
    already listed on that device keeps its place in the slowdowns (as the full path's dict update does)."""
    variants = make_variants()
    rng = np.random.default_rng(4)
    cluster = crowded_cluster(rng, variants)
    tuner = Tuner(variants, seed=0, explore_rate=0.0)
    for k in range(60):
        t = TEMPLATES[k % len(TEMPLATES)]
        first = tuner.decide(JobSpec(job_id="first", **t), cluster)
        if first.group is None:
            continue
        member = first.group.members[0]
        again = tuner.decide(JobSpec(job_id=member, **t), cluster)
        assert again.group.members == (*first.group.members[:-1], member)
        want = dict(first.group.predicted_slowdown)
        own = want.pop("first")
        want[member] = own
        assert again.group.predicted_slowdown == want
        assert list(again.group.predicted_slowdown) == list(want)
        return
    pytest.fail("no decision joined a shared device")


def test_a_table_is_found_again_by_equal_options_and_only_by_them():
    """New objects describing the same options find their table; one member's changed value, another model state
    or a list dropped from the kept ones start a new one."""
    variants = make_variants()
    rng = np.random.default_rng(2)
    cluster = crowded_cluster(rng, variants)

    def options(placements):
        return placement_options(cluster.pools, Occupancy.of(placements))

    memo = DecisionMemo()
    first = memo.table(options(cluster.placements), (1, False))
    first[("q",)] = "kept"
    assert memo.table(options([p.model_copy() for p in cluster.placements]), (1, False)) is first
    # a member of an option (a placement on no option's device cannot change a decision, nor the options)
    member = next(m for o in options(cluster.placements) for m in o.members)
    changed = [p.model_copy(update={"slo_ms": p.slo_ms + 1.0}) if p is member else p for p in cluster.placements]
    assert memo.table(options(changed), (1, False)) is not first
    assert memo.table(options(cluster.placements), (2, False)) is not first  # another model state
    for k in range(KEPT_LISTS):
        memo.table(options(cluster.placements), (10 + k, False))  # other tables push it out
    assert memo.table(options(cluster.placements), (1, False)) == {}
