"""Property (issue 31 case 2): any measurement the service accepts leaves ``decide`` valid for every job.

One accepted measurement with an extreme but valid-looking value (latencies of 1e-8 ms once passed validation)
used to make every later decision for its family fail validation (a predicted throughput over the bounds).
Here hypothesis draws measurements across everything `Measurement` accepts, the tuner learns them, and then
decides batch and streaming jobs of every family on a cluster with several accelerators: every decision must
come back (and re-validate as a `Decision`), before and after a save and load.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from oltunes.tuner import Tuner
from oltunes.types import (
    MAX_LATENCY_MS,
    MAX_QUANTITY,
    MIN_LATENCY_MS,
    Candidate,
    Decision,
    JobSpec,
    Measurement,
)
from tests.tuner.test_client import make_cluster
from tests.tuner.variants import make_variants

VARIANTS = make_variants()
CLUSTER = make_cluster()
POOLS = {p.name: p.accelerator.name for p in CLUSTER.pools}


def positive(lo: float, hi: float):
    """Values across every decade of [lo, hi], the bounds themselves included."""
    exponent = st.floats(min_value=math.log10(lo), max_value=math.log10(hi))
    return st.one_of(st.sampled_from([lo, hi]), exponent.map(lambda e: min(max(10.0 ** e, lo), hi)))


measurement_dicts = st.fixed_dictionaries({
    "job_id": st.just("m-job"),
    "kind": st.sampled_from(["batch", "streaming"]),
    "arrival_rate_rps": st.one_of(st.just(0.0), positive(1e-3, MAX_QUANTITY)),
    "pool": st.sampled_from(sorted(POOLS)),
    "variant": st.integers(0, len(VARIANTS) - 1),
    "batch_size": st.sampled_from([1, 2, 64, 1 << 20]),
    "concurrency": st.sampled_from([1, 4, 1 << 20]),
    "items": st.sampled_from([0, 1, 10**12]),
    "wall_s": st.one_of(st.just(0.0), positive(1e-6, MAX_QUANTITY)),
    "latency": positive(MIN_LATENCY_MS, MAX_LATENCY_MS),
    "spread": st.sampled_from([1.0, 0.5, 1e-3]),
    "throughput_items_per_s": st.one_of(st.just(0.0), positive(1e-9, MAX_QUANTITY)),
    "energy_j_per_item": st.one_of(st.just(0.0), positive(1e-12, MAX_QUANTITY)),
    "request_latency_p99_ms": st.one_of(st.none(), positive(MIN_LATENCY_MS, MAX_LATENCY_MS)),
    "queueing_delay_ms": st.one_of(st.none(), st.just(0.0), positive(1e-6, MAX_LATENCY_MS)),
})


def accepted(d: dict, i: int) -> Measurement | None:
    """The measurement as the API would take it (validated from plain JSON), or None if the API refuses it."""
    cand = Candidate(pool=d["pool"], accelerator=POOLS[d["pool"]], variant=VARIANTS[d["variant"]],
                     batch_size=d["batch_size"], concurrency=d["concurrency"])
    lat = d["latency"]
    body = {"measurement_id": f"prop-{i}", "job_id": d["job_id"], "kind": d["kind"],
            "arrival_rate_rps": d["arrival_rate_rps"], "candidate": cand.model_dump(mode="json"),
            "items": d["items"], "wall_s": d["wall_s"], "latency_p50_ms": lat * d["spread"],
            "latency_p95_ms": lat * (1 + d["spread"]) / 2, "latency_p99_ms": lat,
            "throughput_items_per_s": d["throughput_items_per_s"], "energy_j_per_item": d["energy_j_per_item"],
            "energy_source": "measured", "request_latency_p99_ms": d["request_latency_p99_ms"],
            "queueing_delay_ms": d["queueing_delay_ms"]}
    try:
        return Measurement.model_validate(body)
    except ValidationError:
        return None


JOBS = [JobSpec(job_id=f"{kind}-{f}-{obj}", kind=kind, family=f, slo_ms=slo, items=1000 if kind == "batch" else 0,
                arrival_rate_rps=50.0 if kind == "streaming" else 0.0, objective=obj)
        for f in ("cnn", "vit") for kind in ("batch", "streaming") for slo, obj in ((1e-3, "energy"),
                                                                                    (100.0, "completion_time"),
                                                                                    (1e9, "cost"))]


def decide_all(tuner: Tuner) -> None:
    for job in JOBS:
        d = tuner.decide(job, CLUSTER)
        Decision.model_validate(d.model_dump())  # every field within its bounds, as a client would re-read it


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(measurement_dicts, min_size=1, max_size=4))
def test_any_accepted_measurement_leaves_decide_valid_for_every_job(tmp_path, batch):
    tuner = Tuner(VARIANTS, seed=0)
    ms = [m for m in (accepted(d, i) for i, d in enumerate(batch)) if m is not None]
    for m in ms:
        tuner.observe(m)
    decide_all(tuner)
    tuner.save(tmp_path / "state.json")
    decide_all(Tuner.load(tmp_path / "state.json"))


@pytest.mark.parametrize("latency_ms", [1e-8, 0.0, 1e13, MAX_LATENCY_MS * 2])
def test_latencies_outside_physics_are_refused_naming_the_field(latency_ms):
    cand = Candidate(pool="t4-a", accelerator="t4", variant=VARIANTS[0], batch_size=1)
    with pytest.raises(ValidationError, match="latency_p99_ms"):
        Measurement(job_id="j", candidate=cand, items=1, wall_s=1.0, latency_p50_ms=1.0, latency_p95_ms=1.0,
                    latency_p99_ms=latency_ms, throughput_items_per_s=1.0, energy_j_per_item=1.0,
                    energy_source="measured")
