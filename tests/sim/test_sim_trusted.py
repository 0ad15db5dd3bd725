"""What the simulator builds unvalidated (``oltunes.trusted``) is what validation would have left: over a run with
streams, batch jobs and co-located jobs, every measurement, the candidate it reports, its co-runners and every
placement equal a validated model of the same values field by field, type by type, in the model's field order, with
the same fields set."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from oltunes.policies import Policy
from oltunes.sim.scenario import load_scenario
from oltunes.trusted import trusted_model
from oltunes.simulation import context, prepare, simulator
from oltunes.types import Candidate, Measurement, Placement, Variant


def _as_validated(m: BaseModel) -> None:
    cls = type(m)
    given = {k: m.__dict__[k] for k in m.model_fields_set}
    v = cls(**given)
    assert list(m.__dict__) == list(cls.model_fields), cls.__name__  # every field, in order
    assert m.model_fields_set == v.model_fields_set, cls.__name__
    for k in given:
        assert type(m.__dict__[k]) is type(v.__dict__[k]) and m.__dict__[k] == v.__dict__[k], (cls.__name__, k)
    defaulted = set(cls.model_fields) - set(given)  # (a fresh id per model)
    assert m.model_dump(exclude=defaulted) == v.model_dump(exclude=defaulted)


class _Recording:
    """The oltunes policy, keeping every measurement it is shown and every placement the cluster holds."""

    def __init__(self, inner) -> None:
        self.inner, self.measurements, self.placements = inner, [], {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decide(self, job, state, current=None):
        for p in state.placements:
            self.placements[id(p)] = p
        return self.inner.decide(job, state, current)

    def observe_many(self, ms):
        self.measurements += ms
        return self.inner.observe_many(ms)


@pytest.mark.parametrize("name", ["tiny", "overloaded"])
def test_a_runs_measurements_candidates_and_placements_are_the_validated_ones(shared_data, name):
    prep = prepare(load_scenario(name))
    sim = simulator(prep)
    rec = _Recording(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    res = sim.run(rec)
    ms = rec.measurements
    assert {m.kind for m in ms} == {"streaming", "batch"} and any(m.candidate.co_runners for m in ms)
    for m in ms:
        assert m.model_fields_set == set(Measurement.model_fields) - {"measurement_id"}
        _as_validated(m)
        _as_validated(m.candidate)
        for co in m.candidate.co_runners:
            _as_validated(co)
    placed = [r.placement for r in res.runs if r.placement is not None] + list(rec.placements.values())
    assert placed
    for p in placed:
        if not p.job_id.startswith("burst-"):  # (an event's outside tenant: not the engine's decision)
            _as_validated(p)


def test_built_is_model_construct_of_every_field():
    v = Variant(family="f", name="v", size="s", accuracy=0.5)
    fields = {"pool": "p", "accelerator": "a", "variant": v, "batch_size": 2, "concurrency": 1, "co_runners": ()}
    a, b = trusted_model(Candidate, dict(fields)), Candidate.model_construct(**fields)
    assert a == b and a.__dict__ == b.__dict__ and a.model_fields_set == b.model_fields_set and hash(a) == hash(b)
    assert a.__pydantic_extra__ is None and a.__pydantic_private__ is None
    with pytest.raises(Exception, match="frozen"):
        a.pool = "q"
    pl = trusted_model(Placement, {"job_id": "j", "pool": "p", "device": 0, "candidate": a, "slo_ms": 5.0,
                           "arrival_rate_rps": 1.0})
    assert pl == Placement(job_id="j", pool="p", device=0, candidate=a, slo_ms=5.0, arrival_rate_rps=1.0)


def _same_state(a: BaseModel, b: BaseModel) -> None:
    """``a`` and ``b`` hold the very same values (the same objects, in the same order), the same fields set and the
    same (no) extra and private values."""
    assert type(a) is type(b) and list(a.__dict__) == list(b.__dict__)
    assert all(a.__dict__[k] is b.__dict__[k] for k in a.__dict__)
    assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
    assert a.__pydantic_extra__ == b.__pydantic_extra__ and a.__pydantic_private__ == b.__pydantic_private__


@pytest.mark.parametrize("given", [{}, {"arrival_rate_rps": 3.0}, {"kind": "streaming", "items": 7, "deadline_s": 9.0}])
def test_a_specs_observed_rate_is_model_copy_of_it(given):
    from oltunes.sim.engine import with_rate
    from oltunes.types import JobSpec

    spec = JobSpec(job_id="s-1", family="f", slo_ms=50.0, **given)
    for rate in (0.0, 12.5, 1e6):
        a, b = with_rate(spec, rate), spec.model_copy(update={"arrival_rate_rps": rate})
        _same_state(a, b)
        assert a == b and a.arrival_rate_rps == rate and spec.arrival_rate_rps == given.get("arrival_rate_rps", 0.0)


def test_the_cluster_state_is_model_construct_of_the_pools_and_the_snapshot(shared_data):
    from oltunes.types import ClusterState

    prep = prepare(load_scenario("tiny"))
    sim = simulator(prep)
    states = []

    class Keeping:
        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def decide(self, job, state, current=None):
            states.append(state)
            return self.inner.decide(job, state, current)

    sim.run(Keeping(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster))))
    assert len(states) > 10 and any(s.placements for s in states)
    for s in states:
        _same_state(s, ClusterState.model_construct(pools=s.pools, placements=s.placements))
