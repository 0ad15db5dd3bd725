"""The simulator's fast model maker builds exactly what ``model_construct`` builds (and what validation gives for
valid values): the same fields in the same order, the same fields set, defaults filled."""

from __future__ import annotations

from oltunes.inventory import CATALOG
from oltunes.sim.trusted import maker
from oltunes.types import Candidate, CoRunner, Measurement, Placement, Pool
from tests.tuner.variants import make_variants


def _same(a, b) -> None:
    assert type(a) is type(b) and a == b
    assert list(a.__dict__) == list(b.__dict__)  # field order (repr, iteration)
    assert a.model_fields_set == b.model_fields_set
    assert [type(v) for v in a.__dict__.values()] == [type(v) for v in b.__dict__.values()]


def test_maker_builds_what_model_construct_and_validation_build():
    v = make_variants()[0]
    pool = Pool(name="t4", accelerator=CATALOG["t4"], count=4)
    co = {"job_id": "j2", "family": v.family, "variant": v.name, "size": v.size, "precision": v.precision, "batch_size": 4,
              "load": 0.25}
    _same(maker(CoRunner)(**co), CoRunner.model_construct(**co))
    _same(maker(CoRunner)(**co), CoRunner(**co))
    partial = {"job_id": "j3", "family": v.family, "variant": v.name, "size": v.size}  # defaults filled
    _same(maker(CoRunner)(**partial), CoRunner(**partial))
    cand = {"pool": pool.name, "accelerator": "t4", "variant": v, "batch_size": 8, "concurrency": 2,
                "co_runners": (CoRunner(**co),)}
    _same(maker(Candidate)(**cand), Candidate(**cand))
    pl = {"job_id": "j1", "pool": "t4", "device": 3, "candidate": Candidate(**cand), "slo_ms": 50.0, "arrival_rate_rps": 4.0}
    _same(maker(Placement)(**pl), Placement(**pl))
    m = {"job_id": "j1", "decision_id": "d1", "kind": "streaming", "arrival_rate_rps": 3.0, "candidate": Candidate(**cand),
             "items": 12, "wall_s": 5.0, "latency_p50_ms": 1.0, "latency_p95_ms": 2.0, "latency_p99_ms": 3.0,
             "throughput_items_per_s": 30.0, "energy_j_per_item": 0.5, "energy_source": "simulated", "accuracy": 0.9,
             "gpu_util": 0.4, "request_latency_p99_ms": 9.0, "queueing_delay_ms": 1.5, "simulated": True, "timestamp": 10.0}
    fast, slow = maker(Measurement)(**m), Measurement(**m)
    assert fast.measurement_id != slow.measurement_id  # a fresh id each, from the field's own factory
    assert fast.model_fields_set == slow.model_fields_set == set(m)
    object.__setattr__(slow, "measurement_id", fast.measurement_id)  # frozen: set through object for the comparison
    _same(fast, slow)
    assert Measurement.model_validate(fast.model_dump()) == fast
