"""Engine: conservation, determinism per seed, and the oracle as the physical limit."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.policies import Policy
from oltunes.sim.metrics import compute, regret, request_arrays, warmup
from oltunes.sim.scenario import load_scenario
from oltunes.simulation import context, prepare, run_policy, simulator
from oltunes.types import Candidate


@pytest.fixture(scope="module")
def tiny(shared_data):
    return prepare(load_scenario("tiny"))


@pytest.fixture(scope="module")
def all_runs(tiny):
    return {name: run_policy(tiny, name) for name in Policy.known()}


def test_every_request_is_served_or_dropped_never_lost(tiny, all_runs):
    total = tiny.n_requests
    assert total > 500
    for name, res in all_runs.items():
        req = request_arrays(res)
        assert len(req["arrival"]) == total, name
        for r in res.runs:
            if not r.streaming:
                continue
            served = ~np.isnan(r.done)
            assert np.all(served ^ r.dropped), name  # exactly one of the two
            assert np.all(r.done[served] >= r.job.arrivals[served]), name  # served after arrival
            assert np.all(r.start[served] >= r.job.arrivals[served]), name
        m = compute(res)
        assert 0 <= m["slo_violation_rate"] <= 1 and m["dropped_rate"] <= m["slo_violation_rate"] + 1e-12
        # batch jobs: no item lost either
        for r in res.runs:
            if not r.streaming:
                assert r.items_done + r.remaining == r.job.spec.items


def test_same_seed_same_result_other_seed_differs(shared_data):
    sc = load_scenario("tiny")
    a, b = (prepare(sc) for _ in range(2))
    for name in ("random", "oracle", "oltunes"):
        ra, rb = run_policy(a, name), run_policy(b, name)
        la, lb = request_arrays(ra)["latency"], request_arrays(rb)["latency"]
        assert np.array_equal(la, lb, equal_nan=True), name
        ma, mb = compute(ra), compute(rb)
        ma.pop("sim_wall_s"), mb.pop("sim_wall_s")
        assert ma == mb, name
    other = prepare(sc.model_copy(update={"seed": 7}))
    assert not np.array_equal(
        request_arrays(run_policy(other, "random"))["latency"], request_arrays(run_policy(a, "random"))["latency"],
        equal_nan=True,
    )


def test_oracle_is_never_beaten_by_more_than_noise(all_runs):
    viol = {name: compute(res)["slo_violation_rate"] for name, res in all_runs.items()}
    others = min(v for k, v in viol.items() if k != "oracle")
    assert viol["oracle"] <= others + 0.03, viol


def test_device_energy_and_utilisation_are_physical(tiny, all_runs):
    sc = tiny.scenario
    max_power = sum(p.count * p.accelerator.max_w for p in sc.pool_list())
    for name, res in all_runs.items():
        assert all(0 <= u <= 1 for u in res.util), name
        assert all(0 <= e <= max_power * sc.control_interval_s + 1e-6 for e in res.energy_j), name
        assert all(0 <= f <= 1 for f in res.fragmentation), name


def test_warmup_and_regret_against_the_oracle(tiny, all_runs):
    orc = all_runs["oracle"]
    assert warmup(orc, orc, 15.0) == (0.0, 1.0)
    assert regret(orc, orc) == [0.0, 0.0, 0.0, 0.0]
    worst = max(all_runs, key=lambda n: compute(all_runs[n])["slo_violation_rate"])
    _, att = warmup(all_runs[worst], orc, 15.0)
    assert att < 1.0 and regret(all_runs[worst], orc)[-1] > 0


def test_streaming_measurements_carry_request_level_latency(tiny):
    """What the learner sees: batch p99 plus, for streaming jobs, the request p99 (queueing included) and the
    mean wait before a batch starts; batch jobs report neither."""
    from oltunes.policies import PolicyContext

    sc = tiny.scenario
    ctx = PolicyContext(profile=tiny.model, variants=tuple(tiny.model.variants()), batch_sizes=tuple(sc.batch_sizes),
                        concurrencies=tuple(sc.concurrencies), seed=sc.seed)
    policy = Policy.make("oltunes", ctx=ctx)
    seen = []
    learn = policy.observe_many  # the engine reports each control interval's measurements together
    policy.observe_many = lambda ms: (seen.extend(ms), learn(ms))
    run_policy(tiny, policy)
    stream = [m for m in seen if m.kind == "streaming"]
    assert stream and any(m.kind == "batch" for m in seen)
    for m in stream:
        assert m.request_latency_p99_ms is not None and m.queueing_delay_ms is not None
        # a request's latency includes its batch's, so the request p99 cannot sit below the fastest batch
        assert m.request_latency_p99_ms >= m.latency_p50_ms * 0.5 and m.queueing_delay_ms >= 0
    assert all(m.request_latency_p99_ms is None for m in seen if m.kind == "batch")


@pytest.mark.parametrize("early", [False, True])
def test_a_policy_that_retunes_early_is_re_decided_after_a_jobs_first_measurement(tiny, early):
    """``Policy.retunes_early``: a job is re-decided at the tick after its first measurement reached the policy
    (then at every re-tune interval as before); without it, the first re-decision waits for the interval."""
    from collections import Counter

    from oltunes.policies import PolicyContext

    sc = tiny.scenario
    ctx = PolicyContext(profile=tiny.model, variants=tuple(tiny.model.variants()), batch_sizes=tuple(sc.batch_sizes),
                        concurrencies=tuple(sc.concurrencies), seed=sc.seed)
    policy = Policy.make("least-loaded", ctx=ctx)
    policy.adaptive = policy.learns = True
    policy.retunes_early = early
    seen: Counter[str] = Counter()
    first: dict[str, int] = {}  # job -> its measurements the policy had at its first re-decision
    policy.observe = lambda m: seen.update([m.job_id])
    decide = policy.decide

    def recording(job, state, current=None):
        if current is not None:
            first.setdefault(job.job_id, seen[job.job_id])
        return decide(job, state, current)

    policy.decide = recording
    run_policy(tiny, policy)
    assert len(first) >= 3
    if early:
        assert set(first.values()) == {1}
    else:  # the streams placed at t = 0 measured three 5 s intervals before the 15 s re-tune
        assert max(first.values()) == sc.retune_interval_s / sc.control_interval_s


class _Checking:
    """A policy whose observations are checked against a candidate built from scratch (the decided one, with the
    co-runners the cluster shows now): the engine reuses last interval's when nothing changed."""

    def __init__(self, inner, sim):
        self.inner, self.sim = inner, sim
        self.checked = self.reused = self.with_co_runners = 0
        self._seen: set[int] = set()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def observe_many(self, ms):  # the engine reports each control interval's measurements together
        for m in ms:
            self._check(m)
        self.inner.observe_many(ms)

    def _check(self, m):
        if m.purpose == "shadow":  # reported once the shadow has ended (tests/sim/test_sim_exploration.py)
            return
        run = next(r for r in self.sim._active + self.sim._exploring if r.job.spec.job_id == m.job_id)
        c = run.decision.candidate
        co = self.sim.cluster.co_runners(c.pool, run.placement.device, exclude=m.job_id)
        assert m.candidate == Candidate(pool=c.pool, accelerator=c.accelerator, variant=c.variant,
                                        batch_size=c.batch_size, concurrency=c.concurrency, co_runners=co)
        self.checked += 1
        self.reused += id(m.candidate) in self._seen
        self.with_co_runners += bool(co)
        self._seen.add(id(m.candidate))


def test_a_measurement_reports_the_decided_candidate_with_the_co_runners_seen(shared_data):
    from benchmarks.sim_speed import scenario

    prep = prepare(scenario(40, 20_000))
    sim = simulator(prep)
    pol = _Checking(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)), sim)
    sim.run(pol)
    assert pol.reused > 50 and pol.with_co_runners > 50 and pol.checked > 300


def _collector_probe(look):
    """A policy class that calls ``look()`` at every decision (to see the collector mid-run) and decides nothing."""

    class Probe:
        name, adaptive, learns, retunes_early = "probe", False, False, False

        def decide(self, job, state, current=None):
            look()

    return Probe


def test_a_run_keeps_what_was_alive_out_of_collections_and_restores_the_collector(tiny):
    """While a run lasts, what was alive at its start (the workload, the job runs) is frozen out of the garbage
    collector's passes; afterwards nothing is left frozen, and a caller's own freeze is left as it was."""
    import gc

    seen = []
    Probe = _collector_probe(lambda: seen.append(gc.get_freeze_count()))
    assert gc.get_freeze_count() == 0
    simulator(tiny).run(Probe())
    assert seen and min(seen) > 0 and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        simulator(tiny).run(Probe())
        assert 0 < gc.get_freeze_count() <= before  # still frozen, nothing added (a frozen object may be freed)
    finally:
        gc.unfreeze()


def test_a_run_collects_young_objects_less_often_and_restores_the_thresholds(tiny):
    """While a run lasts the youngest generation's threshold is the engine's (a decision's snapshot is not walked
    every 700 allocations); afterwards the caller's thresholds are back, and a threshold of 0 (no automatic
    collection) is left as it is."""
    import gc

    from oltunes.sim.engine import _YOUNG_EVERY

    seen = []
    Probe = _collector_probe(lambda: seen.append(gc.get_threshold()))
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 11, 12)
        simulator(tiny).run(Probe())
        assert seen and set(seen) == {(_YOUNG_EVERY, 11, 12)} and gc.get_threshold() == (700, 11, 12)
        seen.clear()
        gc.set_threshold(0, 11, 12)
        simulator(tiny).run(Probe())
        assert seen and set(seen) == {(0, 11, 12)} and gc.get_threshold() == (0, 11, 12)
    finally:
        gc.set_threshold(*before)


def test_every_measurement_has_an_id_of_its_own_in_new_ids_form(tiny):
    """An interval's ids come from one draw of random bytes, cut in 32 hex digits per measurement."""
    import re

    seen = []

    class Recording:
        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def observe_many(self, ms):
            seen.extend(m.measurement_id for m in ms)
            return self.inner.observe_many(ms)

    sim = simulator(tiny)
    sim.run(Recording(Policy.make("oltunes", ctx=context(tiny, sim.model, sim.cluster))))
    assert len(seen) > 20 and len(set(seen)) == len(seen)
    assert all(re.fullmatch("[0-9a-f]{32}", i) for i in seen)
