"""The decision's models built without validation (``tuner.built``) are exactly the validated ones, and values the
checks do not vouch for are validated (raising as the constructor does)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from oltunes.inventory import CATALOG
from oltunes.tuner import built
from oltunes.types import (
    MAX_QUANTITY,
    Alternative,
    Candidate,
    ColocationGroup,
    CoRunner,
    Decision,
    Explanation,
    Prediction,
    Variant,
)

VARIANT = Variant(family="cnn", name="cnn-s", size="s", accuracy=0.7, params=10**6)
CO = (CoRunner(job_id="j1", family="cnn", variant="cnn-s", size="s", load=0.5),)


def _same(got, want) -> None:
    """Equal as objects, field by field in the same order, with the same fields set, dumped and shown alike."""
    assert type(got) is type(want)
    assert list(got.__dict__.items()) == list(want.__dict__.items())
    assert got.__pydantic_fields_set__ == want.__pydantic_fields_set__
    assert got.__pydantic_extra__ == want.__pydantic_extra__ and got.__pydantic_private__ == want.__pydantic_private__
    assert got == want and repr(got) == repr(want)
    try:
        hashed = hash(want)
    except TypeError:  # a group's slowdowns are a dict
        with pytest.raises(TypeError):
            hash(got)
    else:
        assert hash(got) == hashed
    assert got.model_dump_json() == want.model_dump_json()
    assert type(got).model_validate_json(got.model_dump_json()) == got


def _built_or_error(make, validated):
    """What ``make()`` gives (or the error it raises) and what the validating constructor gives (or raises)."""
    try:
        want = validated()
    except ValidationError as e:
        with pytest.raises(ValidationError) as got:
            make()
        assert got.value.errors() == e.errors()
        return None
    out = make()
    _same(out, want)
    return out


QUANTITIES = [0.0, -0.0, 1.5, 1e12, 1e12 + 1e-3, -1e-300, float("nan"), float("inf"), np.float64(2.5), 3]


NAMES = ("latency_p99_ms", "energy_j_per_item", "throughput_items_per_s", "margin_ms")


@pytest.mark.parametrize("x", QUANTITIES)
def test_prediction_is_clamped_into_range_never_an_error(x):
    """Issue 31: a prediction extrapolated from extreme (valid) measurements must not make a decision invalid:
    out of range it is clamped, NaN is the pessimistic end (latency, energy, margin: the top; throughput: 0)."""
    for i, name in enumerate(NAMES):
        args = [1.0, 2.0, 3.0, 0.5]
        args[i] = x
        p = built.prediction(*args)
        want = 0.0 if x != x and name == "throughput_items_per_s" else MAX_QUANTITY if x != x else min(max(float(x), 0.0), MAX_QUANTITY)
        assert getattr(p, name) == want
        assert Prediction.model_validate(p.model_dump()) == p


IDS = ["t4", "pool-1.a_b", "", "a" * 128, "a" * 129, "bad/pool", ".hidden", "t4\n", "é"]


@pytest.mark.parametrize("name", IDS)
@pytest.mark.parametrize("batch", [1, 8, 1 << 20, (1 << 20) + 1, 0, np.int64(4), True])
def test_candidate(name, batch):
    for pool, acc in ((name, "t4"), ("t4", name)):
        for co in (CO, (), list(CO)):
            kw = {"pool": pool, "accelerator": acc, "variant": VARIANT, "batch_size": batch, "concurrency": 2,
                  "co_runners": co}
            _built_or_error(lambda kw=kw: built.candidate(*kw.values()), lambda kw=kw: Candidate(**kw))


@pytest.mark.parametrize("source", ["model", "prior", "explore", "nonsense"])
@pytest.mark.parametrize("job_id", ["job-1", "bad id"])
def test_decision(source, job_id):
    cand = Candidate(pool="t4", accelerator=CATALOG["t4"].name, variant=VARIANT, batch_size=4, co_runners=CO)
    expl = Explanation(predicted=Prediction(latency_p99_ms=1.0, energy_j_per_item=2.0, throughput_items_per_s=3.0),
                       n_candidates=3, n_feasible=1)
    group = ColocationGroup(pool="t4", device=0, members=("j1", "job-1"), predicted_slowdown={"j1": 1.2})
    for g in (None, group):
        for feasible in (True, False, 1):
            try:
                want = Decision(job_id=job_id, candidate=cand, group=g, source=source, feasible=feasible,
                                explanation=expl)
            except ValidationError as e:
                with pytest.raises(ValidationError) as got:
                    built.decision(job_id, cand, g, source, feasible, expl)
                assert got.value.errors() == e.errors()
                continue
            out = built.decision(job_id, cand, g, source, feasible, expl)
            assert out.decision_id != want.decision_id  # a fresh id, as the default factory gives
            out.__dict__["decision_id"] = want.decision_id  # (the rest compared as it is)
            _same(out, want)


@pytest.mark.parametrize("name", IDS)
@pytest.mark.parametrize("load", [0.05, 1.0, 1, -0.5, float("nan"), 2.0])
def test_co_runner(name, load):
    for precision in ("fp16", "int4"):
        for size in ("s", "", "x" * 129):
            kw = {"job_id": name, "family": "cnn", "variant": "cnn-s", "size": size, "precision": precision,
                  "batch_size": 4, "load": load}
            _built_or_error(lambda kw=kw: built.co_runner(*kw.values()), lambda kw=kw: CoRunner(**kw))
            kw.update(family=name, job_id="j")
            _built_or_error(lambda kw=kw: built.co_runner(*kw.values()), lambda kw=kw: CoRunner(**kw))


@pytest.mark.parametrize("name", IDS)
@pytest.mark.parametrize("slowdown", [1.0, 1.3, 1, float("nan"), -0.5, 2e12])
def test_group(name, slowdown):
    for device in (0, 3, -1, np.int64(2), True):
        for members, sd in (((name,), {name: slowdown}), (("j1", name), {"j1": 1.2, name: slowdown}), ((), {}),
                            ([name], {name: 1.0})):
            kw = {"pool": "t4", "device": device, "members": members, "predicted_slowdown": sd}
            try:
                want = ColocationGroup(**kw)
            except ValidationError as e:
                with pytest.raises(ValidationError) as got:
                    built.group(*kw.values())
                assert got.value.errors() == e.errors()
                continue
            out = built.group(*kw.values())
            assert out.group_id != want.group_id  # a fresh id, as the default factory gives
            out.__dict__["group_id"] = want.group_id
            _same(out, want)
