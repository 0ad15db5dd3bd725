"""Exploration in the simulator (`oltunes.sim.exploration`): the trials ``oltunes`` asks for run as shadows and probe
shards; they cost energy within the budget, never touch the job's own requests, and the work they do counts once."""

from __future__ import annotations

import pytest

from oltunes.policies import Policy
from oltunes.sim.exploration import EXPLORATION_BUDGET
from oltunes.sim.metrics import compute
from oltunes.sim.scenario import load_scenario
from oltunes.simulation import context, prepare, run_policy, simulator


@pytest.fixture(scope="module")
def explored(shared_data):
    """tiny, two minutes, with three batch jobs large enough to be probed."""
    sc = load_scenario("tiny")
    wl = sc.workload.model_copy(update={"batch": [sc.workload.batch[0].model_copy(
        update={"jobs": 3, "min_items": 40_000, "max_items": 40_000})]})
    return prepare(sc.model_copy(update={"duration_s": 120.0, "workload": wl}))


class _Recording:
    """A policy whose measurements and decisions are kept, with where each trial ran and where its job ran then."""

    def __init__(self, inner, sim):
        self.inner, self.sim = inner, sim
        self.measured = []
        self.redecided: dict[str, int] = {}
        self.trial_beside: list[tuple[tuple[str, int], tuple[str, int] | None]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decide(self, job, state, current=None):
        if current is not None:
            self.redecided[job.job_id] = self.redecided.get(job.job_id, 0) + 1
        return self.inner.decide(job, state, current)

    def observe_many(self, ms):
        self.measured += ms
        for tr in self.sim._exploring:
            own = tr.of.placement
            self.trial_beside.append(((tr.placement.pool, tr.placement.device),
                                      None if own is None else (own.pool, own.device)))
        self.inner.observe_many(ms)


def _run(prep, trials=True):
    sim = simulator(prep)
    pol = _Recording(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster), trials=trials), sim)
    res = sim.run(pol)
    return res, pol


def test_trials_run_as_shadows_and_probes_within_the_budget_and_teach_the_tuner(explored):
    res, pol = _run(explored)
    purposes = {m.purpose for m in pol.measured}
    assert purposes == {"serve", "shadow", "probe"}
    assert res.shadows > 0 and res.probes > 0
    m = compute(res)
    assert 0 < m["exploration_energy_share"] <= EXPLORATION_BUDGET * 1.2
    assert m["shadows_per_job"] == res.shadows / 3 and m["probes_per_job"] == res.probes / 3
    # a trial's measurement is its own (the job's memory stays the job's), of its own kind
    jobs = {r.job.spec.job_id for r in res.runs}
    for x in pol.measured:
        assert (x.job_id in jobs) == (x.purpose == "serve")
        if x.purpose != "serve":
            assert x.kind == "batch" and x.items > 0 and x.energy_j_per_item > 0
    # a shadow reports once, over its whole run (a p99 of one or two batches per interval would flatter)
    shadows = [x.job_id for x in pol.measured if x.purpose == "shadow"]
    assert len(shadows) == len(set(shadows)) <= res.shadows
    # never on the device of the job it explores for
    assert pol.trial_beside and all(here != own for here, own in pol.trial_beside)


def test_probed_items_count_once_and_the_job_is_redecided_after_its_probes(explored):
    res, pol = _run(explored)
    batch = [r for r in res.runs if not r.streaming]
    assert all(r.finished_s is not None for r in batch)
    for r in batch:
        assert r.items_done == r.job.spec.items and r.remaining == 0 and r.probes_open == 0
    last_probe: dict[str, float] = {}
    for x in pol.measured:
        if x.purpose == "probe":
            j = x.job_id.rsplit("-probe", 1)[0]
            last_probe[j] = max(last_probe.get(j, 0.0), x.timestamp)
    assert last_probe
    # re-decided after its first interval, and after its probes (unless it finished before the tick after them)
    dt = explored.scenario.control_interval_s
    running = [r.job.spec.job_id for r in batch if r.job.spec.job_id in last_probe
               and r.finished_s > last_probe[r.job.spec.job_id] + 2 * dt]
    assert all(pol.redecided.get(j, 0) >= 2 for j in running)


def test_the_streams_requests_never_go_to_a_shadow(explored):
    res, _ = _run(explored)
    assert res.shadows > 0
    for r in res.runs:
        if r.streaming:  # every request served by the job itself or dropped, exactly once
            assert r.i == len(r.arr)
            served = ~r.dropped
            assert (r.done[served] >= r.arr[served]).all() and (r.done[~served] != r.done[~served]).all()


def test_a_shadow_is_a_co_runner_on_its_device(explored):
    _, pol = _run(explored)
    seen = [c for x in pol.measured if x.purpose == "serve" for c in x.candidate.co_runners if "-shadow" in c.job_id]
    assert seen, "no job measured beside a shadow"


def test_without_trials_and_for_the_baselines_nothing_is_explored(explored):
    res, pol = _run(explored, trials=False)
    assert {m.purpose for m in pol.measured} == {"serve"}
    for r in (res, run_policy(explored, "oracle"), run_policy(explored, "least-loaded")):
        assert (r.shadows, r.probes, r.exploration_energy_j) == (0, 0, 0.0)
        assert compute(r)["exploration_energy_share"] == 0.0


def test_a_shadow_reports_the_energy_per_item_its_stream_would_pay_there(explored):
    """At 2 % of a stream's requests, the device's idle draw is the stream's to pay, not the shadow's alone: a
    shadow's energy per item carries at least the stream's share of its device's idle draw at the stream's rate
    (busy energy alone made a shadowed candidate look cheaper than the one serving, which pays that share)."""
    sim = simulator(explored)
    pol = _Recording(Policy.make("oltunes", ctx=context(explored, sim.model, sim.cluster), trials=True), sim)
    where: dict[str, tuple[str, float, int]] = {}  # a shadow: its pool, its stream's rate, most jobs on its device
    inner = pol.observe_many

    def observe_many(ms):
        for tr in sim._exploring:
            if tr.purpose == "shadow":
                n = len(sim.cluster.members(tr.placement.pool, tr.placement.device))
                most = max(n, where.get(tr.job.spec.job_id, ("", 0.0, 0))[2])
                where[tr.job.spec.job_id] = (tr.placement.pool, tr.of.job.spec.arrival_rate_rps, most)
        inner(ms)

    pol.observe_many = observe_many
    sim.run(pol)
    shadows = [x for x in pol.measured if x.purpose == "shadow"]
    assert shadows
    for x in shadows:
        pool, rate, most = where[x.job_id]
        assert x.energy_j_per_item >= sim.cluster.pool(pool).accelerator.idle_w / (most * rate)
