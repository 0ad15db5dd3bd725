"""Tuner state: JSON round trip gives the same answers, writes are atomic, replay rebuilds, bad files refused."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from oltunes.errors import DataError
from oltunes.jsonstate import find_nonfinite, pack_floats, unpack_floats
from oltunes.inventory import CATALOG
from oltunes.tuner import Prior, Tuner
from oltunes.tuner.state import STATE_VERSION
from oltunes.types import Accelerator, Candidate, ClusterState, JobSpec, Measurement, Pool, Variant

VARIANTS = [Variant(family="cnn", name=f"cnn-{s}", size=s, accuracy=a, params=p)
            for s, a, p in (("s", 0.7, 5_000_000), ("m", 0.75, 25_000_000), ("l", 0.8, 60_000_000))]
CUSTOM = Accelerator(name="npu", memory_gb=32, idle_w=20, max_w=120, cost_per_hour=1.0)
CLUSTER = ClusterState(pools=[Pool(name="t4", accelerator=CATALOG["t4"], count=2),
                              Pool(name="npu", accelerator=CUSTOM, count=1)])


def history(n: int = 60) -> list[Measurement]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        pool = CLUSTER.pools[i % 2]
        v = VARIANTS[i % 3]
        c = Candidate(pool=pool.name, accelerator=pool.accelerator.name, variant=v,
                      batch_size=int(rng.choice([1, 4, 16])), concurrency=int(rng.choice([1, 2])))
        lat = 0.2 * c.batch_size * v.params / 1e6 / (3 if pool.name == "npu" else 1) * math.exp(0.05 * rng.normal())
        out.append(Measurement(measurement_id=f"m{i}", job_id="j", candidate=c, items=10, wall_s=1,
                               latency_p50_ms=lat, latency_p95_ms=lat, latency_p99_ms=lat,
                               throughput_items_per_s=1000 * c.batch_size / lat, energy_j_per_item=0.02 * lat,
                               energy_source="estimated"))
    return out


def trained(**kw) -> Tuner:
    t = Tuner(VARIANTS, seed=3, **kw)
    t.decide(JobSpec(family="cnn", slo_ms=20), CLUSTER)  # registers the custom accelerator
    t.replay(history())
    return t


JOBS = [JobSpec(job_id=f"q{i}", family="cnn", slo_ms=s, accuracy_floor=f, items=100, objective=o)
        for i, (s, f, o) in enumerate([(5, 0.7, "energy"), (20, 0.75, "completion_time"), (50, 0.8, "cost")])]


def test_round_trip_gives_identical_predictions_and_decisions(tmp_path):
    t = trained(explore_rate=0.5)  # exploration draws must continue identically too
    path = t.save(tmp_path / "state" / "tuner.json")
    u = Tuner.load(path)
    cands = [Candidate(pool=p.name, accelerator=p.accelerator.name, variant=v, batch_size=4)
             for p in CLUSTER.pools for v in VARIANTS]
    assert u.predict(JOBS[0], cands) == t.predict(JOBS[0], cands)
    for job in JOBS * 3:
        a, b = t.decide(job, CLUSTER), u.decide(job, CLUSTER)
        assert (a.candidate, a.source, a.explanation.predicted) == (b.candidate, b.source, b.explanation.predicted)
    # observed ids survive: the restored tuner still refuses duplicates
    assert u.observe(history()[0]) is False
    assert u.n_observed == t.n_observed == 60


def test_state_is_plain_json_and_written_atomically(tmp_path):
    t = trained()
    path = tmp_path / "tuner.json"
    t.save(path)
    d = json.loads(path.read_text())
    assert d["format"] == "oltunes.tuner" and d["prior"] == {"name": "heuristic"}
    assert [p.name for p in tmp_path.iterdir()] == ["tuner.json"]  # no temp file left behind
    t.save(path)  # overwrite in place
    assert Tuner.from_state_dict(json.loads(path.read_text())).n_observed == 60


def test_profile_prior_survives_round_trip(tmp_path):
    rows = [{"accelerator": "t4", "variant": "cnn-s", "batch_size": 1, "latency_ms": 1.5}]
    t = Tuner(VARIANTS, prior=Prior.make("profile", rows=rows))
    u = Tuner.load(t.save(tmp_path / "s.json"))
    assert u.prior.to_dict() == t.prior.to_dict()


def test_replay_rebuilds_the_same_model():
    a, b = trained(), Tuner(VARIANTS, seed=3)
    b.decide(JOBS[0], CLUSTER)
    assert b.replay(history()) == 60
    assert b.replay(history()) == 0  # exactly-once across replays
    c = [Candidate(pool="npu", accelerator="npu", variant=VARIANTS[1], batch_size=2)]
    assert a.predict(JOBS[1], c) == b.predict(JOBS[1], c)


@pytest.mark.parametrize("content", ["not json", json.dumps({"format": "other"}),
                                     json.dumps({"format": "oltunes.tuner", "version": 99}),
                                     json.dumps({"format": "oltunes.tuner", "version": 1, "config": {}})])
def test_bad_state_files_are_refused_with_a_reason(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(DataError):
        Tuner.load(path)


def test_missing_state_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        Tuner.load(tmp_path / "nope.json")


# A state written by OLTunes 9900f8b (format version 1: standard-library JSON, plain float lists, RNG states as
# integers beyond 64 bits) from `trained(explore_rate=0.5, learner_replay=True)` (a switch since retired: its value
# is ignored, the FM keeps the replay settings saved in its own state) after one recommend per job.
V1_STATE = Path(__file__).parent / "data" / "tuner_state_v1.json"


def test_a_version_1_state_file_still_loads_exactly_and_is_rewritten_as_version_2(tmp_path):
    raw = json.loads(V1_STATE.read_text())
    assert raw["version"] == 1 and isinstance(raw["rng"]["state"]["state"], int)
    old = Tuner.load(V1_STATE)
    assert old.n_observed == 60 and all(old.has_seen(m.measurement_id) for m in history())
    d = old.state_dict()  # what was read is what the file held, number for number
    assert d["model"]["W"] == raw["model"]["W"] and d["residuals"] == raw["residuals"]
    # Version 1's correction corrected the old heuristic prior along one chain of groups; its residuals mean
    # nothing against today's prior, so the crossed correction starts empty and relearns (the model does not).
    assert raw["correction"]["groups"] and d["correction"]["cells"] == []
    assert old._rng.bit_generator.state == raw["rng"]

    path = old.save(tmp_path / "tuner.json")
    written = json.loads(path.read_text())
    assert written["version"] == STATE_VERSION == 2 and isinstance(written["rng"]["state"]["state"], str)
    new = Tuner.load(path)
    assert new.state_dict() == d
    cands = [Candidate(pool=p.name, accelerator=p.accelerator.name, variant=v, batch_size=4)
             for p in CLUSTER.pools for v in VARIANTS]
    assert new.predict(JOBS[1], cands) == old.predict(JOBS[1], cands)
    for job in JOBS * 3:  # exploration draws continue identically from the restored RNG
        a, b = old.decide(job, CLUSTER), new.decide(job, CLUSTER)
        assert (a.candidate, a.source) == (b.candidate, b.source)


@pytest.mark.parametrize("where", ["correction", "model"])
def test_a_non_finite_number_is_refused_naming_where_and_the_saved_state_is_kept(tmp_path, where):
    t = trained()
    path = t.save(tmp_path / "tuner.json")
    before = path.read_bytes()
    if where == "correction":
        t.estimator.correction._sums[1, 0] = math.nan  # the second target of the first configuration
    else:
        t.estimator.model._W[2, 0] = math.inf
    with pytest.raises(DataError, match=rf"non-finite number at {where}\.(sums|W)\[\d+\]"):
        t.save(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["tuner.json"]


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_state_file_mode_follows_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = trained().save(tmp_path / "tuner.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_packed_floats_are_bit_exact_and_plain_lists_still_read():
    a = np.array([[0.1, -0.0, 5e-324], [1e308, -2.5, np.pi]])
    back = unpack_floats(json.loads(json.dumps(pack_floats(a))))
    assert back.tobytes() == a.tobytes() and back.flags.writeable
    assert unpack_floats(a.tolist()).tobytes() == a.tobytes()


def test_find_nonfinite_looks_everywhere_and_only_at_numbers():
    ok = {"ids": ["nan", "inf"], "n": [1, True, 10**400], "x": [[0.5, 1.0], [2.0, 3.0]], "mixed": ["a", 1.5],
          "p": pack_floats(np.ones(4)), "none": None}
    assert find_nonfinite(ok) is None
    assert find_nonfinite({**ok, "x": [[0.5, 1.0], [2.0, math.nan]]}) == "x[3]"
    assert find_nonfinite({"a": {"b": [{"c": -math.inf}]}}) == "a.b[0].c"
    assert find_nonfinite({"p": pack_floats([1.0, math.nan])}) == "p[1]"
    assert find_nonfinite({"r": [0.0, 1.0, math.nan]}) == "r[2]"
    assert find_nonfinite({"s": np.float64("nan")}) == "s"


def test_a_state_saved_with_retired_switches_loads_and_predicts_as_saved(tmp_path):
    """Switches since retired (``partial_batches``, ``learner_replay``, ``pooled_correction``,
    ``implied_throughput``) in a saved config are ignored: the state loads and predicts what the saved tuner does."""
    t = trained()
    d = t.state_dict()
    d["config"].update(partial_batches=False, learner_replay=False, pooled_correction=True, implied_throughput=True)
    u = Tuner.from_state_dict(json.loads(json.dumps(d)))
    c = [Candidate(pool="npu", accelerator="npu", variant=VARIANTS[1], batch_size=2)]
    assert u.predict(JOBS[1], c) == t.predict(JOBS[1], c)
    assert not {"partial_batches", "learner_replay", "pooled_correction", "implied_throughput"} & set(
        u.state_dict()["config"])


@pytest.mark.parametrize("n", [-5, 1.5, "3", None, 10**16])
def test_a_count_that_is_not_a_count_stops_the_load_naming_the_field(tmp_path, n):
    """Issue 31 (also seen): ``n_observed: -5`` used to load, and then every /v1/health failed."""
    good = tmp_path / "good.json"
    Tuner(VARIANTS, seed=0).save(good)
    d = json.loads(good.read_text())
    d["n_observed"] = n
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(DataError, match="n_observed"):
        Tuner.load(bad)
