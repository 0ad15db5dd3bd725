"""Input limits of the shared types, the learner's last-line guard, the bounded seen-id set, and concurrent
processes sharing one state file (issue 8 items 1, 3, 6; issue 10's bounded exactly-once)."""

from __future__ import annotations

import json
import math
import multiprocessing

import pytest
from pydantic import ValidationError

from oltunes.config import Settings
from oltunes.errors import DataError, field_errors
from oltunes.tuner import Tuner
from oltunes.service.seen import SeenIds
from oltunes.types import Candidate, JobSpec, Measurement, Placement, Prediction, Variant
from tests.tuner.test_service import make_cluster_candidate, make_measurement
from tests.tuner.variants import make_variants

CAND = make_cluster_candidate()
GOOD = {
    JobSpec: {"family": "cnn", "slo_ms": 10.0},
    Candidate: json.loads(CAND.model_dump_json()),
    Placement: {"job_id": "j", "pool": "t4-a", "device": 0, "candidate": json.loads(CAND.model_dump_json()),
                "slo_ms": 10.0},
    Prediction: {"latency_p99_ms": 1.0, "energy_j_per_item": 1.0, "throughput_items_per_s": 1.0},
    Measurement: json.loads(make_measurement(CAND, 0).model_dump_json()),
}
NUMBERS = [(JobSpec, "slo_ms"), (JobSpec, "arrival_rate_rps"), (JobSpec, "items"), (JobSpec, "deadline_s"),
           (Candidate, "batch_size"), (Candidate, "concurrency"), (Placement, "slo_ms"), (Placement, "device"),
           (Prediction, "latency_p99_ms"), (Prediction, "margin_ms"), (Measurement, "latency_p99_ms"),
           (Measurement, "energy_j_per_item"), (Measurement, "throughput_items_per_s"), (Measurement, "items"),
           (Measurement, "wall_s"), (Measurement, "request_latency_p99_ms"), (Measurement, "timestamp")]


@pytest.mark.parametrize("model,field", NUMBERS, ids=[f"{m.__name__}.{f}" for m, f in NUMBERS])
@pytest.mark.parametrize("raw", ["Infinity", "-Infinity", "NaN", "1e308", "1" + "0" * 400])
def test_non_finite_and_absurd_numbers_are_refused_naming_the_field(model, field, raw):
    body = json.dumps({**GOOD[model], field: 0}).replace(f'"{field}": 0', f'"{field}": {raw}')
    with pytest.raises(ValidationError) as e:
        model.model_validate_json(body)
    assert [f for f, _ in field_errors(e.value.errors())] == [field]


@pytest.mark.parametrize("bad", ["../../x", "a/b", "..", ".hidden", "-flag", "a b", "x" * 129, "", "é"])
def test_ids_and_names_share_one_strict_pattern(bad):
    m = GOOD[Measurement]
    for model, data, field in ((JobSpec, GOOD[JobSpec], "job_id"), (JobSpec, GOOD[JobSpec], "family"),
                               (Measurement, m, "measurement_id"), (Measurement, m, "decision_id"),
                               (Variant, json.loads(CAND.variant.model_dump_json()), "name")):
        with pytest.raises(ValidationError) as e:
            model.model_validate({**data, field: bad})
        assert [f for f, _ in field_errors(e.value.errors())] == [field]
    assert JobSpec.model_validate({**GOOD[JobSpec], "job_id": "Job_1.v2-x"}).job_id == "Job_1.v2-x"


def test_field_errors_never_echo_the_input():
    with pytest.raises(ValidationError) as e:
        JobSpec.model_validate({**GOOD[JobSpec], "job_id": "s3cret" * 1000, "k" * 5000: 1})
    text = json.dumps(field_errors(e.value.errors()))
    assert "job_id" in text and "s3cret" not in text and "kkkk" not in text and len(text) < 1000


def test_a_non_finite_measurement_that_bypassed_validation_never_reaches_the_model(tmp_path):
    tuner = Tuner(make_variants(), seed=0)
    tuner.observe(make_measurement(CAND, 0))
    before = json.dumps(tuner.state_dict()["model"])
    for field in ("latency_p99_ms", "energy_j_per_item", "throughput_items_per_s"):
        poisoned = Measurement.model_construct(**{**dict(make_measurement(CAND, 1)), field: math.inf})
        with pytest.raises(DataError, match=field.split("_")[0]):
            tuner.observe(poisoned)
    assert json.dumps(tuner.state_dict()["model"]) == before and tuner.n_observed == 1
    tuner.save(tmp_path / "state.json")  # still saveable: nothing non-finite in it
    assert not tuner.has_seen("m-1")


def test_seen_ids_are_bounded_and_exactly_once_holds_past_the_bound():
    seen = SeenIds(capacity=100)
    ms = [make_measurement(CAND, i).model_copy(update={"timestamp": 1000.0 + i}) for i in range(250)]
    for m in ms:
        assert not seen.seen(m)
        seen.add(m)
    assert len(seen) == 100 and seen.horizon == 1149.0
    assert all(seen.seen(m) for m in ms)  # the 150 forgotten ids are still refused: older than the horizon
    newer = make_measurement(CAND, 999).model_copy(update={"timestamp": 1150.0})
    assert not seen.seen(newer)
    restored = SeenIds.from_state_dict(json.loads(json.dumps(seen.state_dict())))
    assert all(restored.seen(m) for m in ms) and not restored.seen(newer) and len(restored) == 100
    legacy = SeenIds.from_state_dict(["m-1", "m-2"])  # states saved as a list of ids
    assert "m-1" in legacy and "m-3" not in legacy


def test_seen_ids_say_which_of_a_batch_are_new():
    seen = SeenIds(capacity=2)
    old = [make_measurement(CAND, i).model_copy(update={"timestamp": 10.0 + i}) for i in range(3)]
    for m in old:
        seen.add(m)  # the first is forgotten: the horizon moves to its timestamp
    new, older = (make_measurement(CAND, i).model_copy(update={"timestamp": t}) for i, t in ((7, 50.0), (8, 5.0)))
    # seen; new; repeats the new one before it; new id but not newer than the horizon; forgotten but as old
    assert seen.fresh([old[2], new, new, older, old[0]]) == [False, True, False, False, False]
    assert seen.fresh([]) == [] and not seen.seen(new)  # asking adds nothing


def test_state_stays_small_and_bounded(tmp_path):
    tuner = Tuner(make_variants(), seed=0)
    tuner._seen = SeenIds(capacity=1000)
    for i in range(3000):
        tuner._seen.add(make_measurement(CAND, i).model_copy(update={"measurement_id": f"{i:032x}"}))
    size = len(tuner.save(tmp_path / "s.json").read_bytes())
    assert len(Tuner.load(tmp_path / "s.json")._seen) == 1000
    assert size < 1000 * 40 + 200_000  # ~22 bytes an id, not the 35 of a JSON list of hex ids


def _observer(home: str, first: int, n: int, barrier) -> None:
    import os

    os.environ["OLTUNES_HOME"] = home
    from oltunes.tuner.factory import get_tuner

    settings = Settings()
    tuner = get_tuner(settings, variants=make_variants())
    barrier.wait()  # both hold a tuner loaded from the same state before either saves
    for i in range(first, first + n):
        tuner.observe(make_measurement(CAND, i))
        tuner.save()


def test_two_processes_observing_into_one_state_lose_nothing(tmp_path):
    home = tmp_path / "home"
    seed = Tuner(make_variants(), seed=0)
    seed.observe(make_measurement(CAND, 1000))
    seed.save(Settings(home=home).tuner_state_path)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_observer, args=(str(home), first, 15, barrier)) for first in (0, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    final = Tuner.load(Settings(home=home).tuner_state_path)
    assert final.n_observed == 31
    assert all(final.has_seen(f"m-{i}") for i in [*range(15), *range(100, 115), 1000])


@pytest.mark.parametrize("bad", ["../../x", "a/../../b", "/etc"])
def test_ids_that_become_paths_are_refused_at_the_flow_and_zoo_edges(bad, tmp_path, oltunes_home):
    import subprocess
    import sys

    from flows.batch_inference import BatchParams
    from flows.common import validate
    from flows.streaming_inference import StreamParams
    from oltunes.errors import ConfigError

    with pytest.raises(ConfigError, match="job_id"):
        validate(BatchParams, family="cnn", slo_ms=10, accuracy_floor=0, objective="energy", job_id=bad,
                 launcher="local", items_per_worker=1, shard_size=1, part_timeout_s=1, policy="oltunes")
    with pytest.raises(ConfigError, match="service_id"):
        validate(StreamParams, family="cnn", slo_ms=10, accuracy_floor=0, speedup=1, duration_s=1,
                 control_interval_s=1, max_in_flight=1, max_delay_ms=0, service_id=bad, launcher="local",
                 policy="oltunes")
    r = subprocess.run([sys.executable, "-c", "from oltunes.cli import app; app()", "zoo", "register",
                        "--model", str(tmp_path / "m.onnx"), "--eval", str(tmp_path / "e.npz"), "--family", "cnn",
                        "--size", "s", "--name", bad, "--zoo-dir", str(tmp_path / "zoo" / "a")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "'name'" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == []  # nothing written anywhere
