"""The variants' compute metadata and the pooled correction's per-accelerator slope on their arithmetic intensity."""

from __future__ import annotations

import json
import math

import numpy as np

from oltunes.sim.variant_params import GFLOPS, PARAMS_M, published_gflops, published_params
from oltunes.tuner.model.correction import PooledCorrection
from oltunes.tuner.model.intensity import log_intensity
from oltunes.types import Variant


def _intensity(model: str) -> float:
    return published_gflops(model) * 1e9 / published_params(model)


def test_every_profiled_variant_has_its_compute_and_either_spelling_finds_it():
    assert set(GFLOPS) == set(PARAMS_M)
    assert all(g > 0 for g in GFLOPS.values())
    assert published_gflops("prajjwal1-bert-mini") == published_gflops("prajjwal1/bert-mini") > 0
    assert published_gflops("no-such-model") == 0.0


def test_weight_reuse_shows_as_intensity():
    """ALBERT's shared layers and a convolution's reuse of its weights over the image give more FLOPs per parameter
    than a transformer reading each weight once per token; within a plain transformer family it barely moves."""
    assert _intensity("albert-xxlarge-v2") > 5 * _intensity("bert-large-uncased")
    assert _intensity("yolov5s") > 5 * _intensity("gpt2")
    assert 0.8 < _intensity("gpt2-xl") / _intensity("gpt2-medium") < 1.25


def test_log_intensity_is_unknown_without_either_figure():
    v = Variant(family="cnn", name="cnn-s", size="s", accuracy=0.7, params=10**6, gflops=2.0)
    assert math.isclose(log_intensity(v), math.log(2000.0))
    assert log_intensity(v.model_copy(update={"gflops": 0.0})) is None
    assert log_intensity(v.model_copy(update={"params": 0})) is None


# Variants of two families whose intensities spread over three decades (2-2000 FLOPs per parameter)
VARIANTS = [Variant(family=f, name=f"{f}-{i}", size=str(i), accuracy=0.7, params=10**7, gflops=g)
            for f, gs in (("tf", (0.02, 0.05, 0.2)), ("cnn", (1.0, 4.0, 20.0))) for i, g in enumerate(gs)]
# two more, within that range, measured on one GPU only (in some tests)
HELD_OUT = Variant(family="cnn", name="cnn-big", size="big", accuracy=0.8, params=10**7, gflops=10.0)
LOW = Variant(family="tf", name="tf-tiny", size="tiny", accuracy=0.5, params=10**7, gflops=0.1)
SLOPES = {"t4": 0.3, "a100": -0.3}
X = {v.name: log_intensity(v) for v in (*VARIANTS, HELD_OUT, LOW)}  # (by name: the truth of a variant without figures)


def _truth(acc: str, v: Variant) -> float:
    """A log residual: a level per family shared by the GPUs (by the name's length), plus each GPU's own slope on
    the centred intensity."""
    x = X[v.name] - math.log(1000.0)
    return 0.2 * len(v.name) / 5 + SLOPES[acc] * x


def _learnt(variants, rounds: int = 4, **kw) -> PooledCorrection:
    pc = PooledCorrection(n_targets=1, root_k=1.0, **kw)
    for _ in range(rounds):
        for acc in SLOPES:
            for v in variants:
                pc.learn(acc, v, 1, 1, np.array([_truth(acc, v)]), np.array([True]))
    return pc


def test_the_slope_learns_opposite_signs_for_two_gpus():
    pc = _learnt(VARIANTS)
    coef = {acc: float(pc.intensity.coef[0, pc._gid["acc"][acc]]) for acc in SLOPES}
    assert coef["t4"] > 0.1 and coef["a100"] < -0.1


def test_a_variant_measured_on_one_gpu_carries_the_other_gpus_slope():
    """Measured on the T4 only, a high- and a low-intensity variant: the A100 (whose slope is the T4's, reversed)
    predicts the gap between them with the A100's slope, not the T4's."""
    error = {}
    for with_slope in (True, False):
        pc = _learnt(VARIANTS, effect_k=None if with_slope else {"intensity": math.inf})
        for _ in range(4):
            for v in (HELD_OUT, LOW):
                pc.learn("t4", v, 1, 1, np.array([_truth("t4", v)]), np.array([True]))
        gap = float(pc.predict("a100", HELD_OUT, 1, 1)[0] - pc.predict("a100", LOW, 1, 1)[0])
        error[with_slope] = abs(gap - (_truth("a100", HELD_OUT) - _truth("a100", LOW)))
    t4_gap = _truth("t4", HELD_OUT) - _truth("t4", LOW)
    assert error[True] < 0.25 * abs(t4_gap) and error[True] < 0.5 * error[False]


def test_unknown_intensity_is_the_slope_left_out():
    """Variants without compute figures: no term, and the same fit as known ones with the slope left out."""
    unknown = [v.model_copy(update={"gflops": 0.0}) for v in VARIANTS]
    blind = _learnt(unknown)
    assert not blind.intensity.active
    left_out = _learnt(VARIANTS, effect_k={"intensity": math.inf})
    for acc in (*SLOPES, "v100"):
        for v, u in zip(VARIANTS, unknown):
            assert np.array_equal(blind.predict(acc, u, 1, 1), left_out.predict(acc, v, 1, 1))
            assert np.array_equal(blind.predict(acc, u, 2, 1), left_out.predict(acc, v, 2, 1))


def test_a_variant_of_unknown_intensity_gets_no_term_beside_known_ones():
    pc = _learnt(VARIANTS)
    stranger = Variant(family="cnn", name="cnn-odd", size="odd", accuracy=0.6)  # no figures
    for acc in SLOPES:
        assert pc.intensity.term(pc._gid["acc"][acc], stranger) == 0.0
        assert pc.intensity.term(pc._gid["acc"][acc], HELD_OUT) != 0.0


def test_the_slopes_survive_a_state_round_trip_bit_for_bit():
    pc = _learnt(VARIANTS, rounds=2)
    back = PooledCorrection.from_state_dict(json.loads(json.dumps(pc.state_dict())), n_targets=1)
    for acc in (*SLOPES, "v100"):
        for v in (*VARIANTS, HELD_OUT, LOW):
            assert np.array_equal(back.predict(acc, v, 1, 1), pc.predict(acc, v, 1, 1))
    more = (("a100", HELD_OUT), ("t4", LOW))  # and both keep learning alike (the restored cells know x)
    for acc, v in more:
        for c in (pc, back):
            c.learn(acc, v, 1, 1, np.array([_truth(acc, v)]), np.array([True]))
    assert np.array_equal(back.intensity.coef, pc.intensity.coef)
    assert np.array_equal(back.predict("a100", LOW, 1, 1), pc.predict("a100", LOW, 1, 1))


def test_a_state_saved_without_the_slopes_relearns_them_from_the_variants_measured_next():
    pc = _learnt(VARIANTS, rounds=2)
    state = json.loads(json.dumps(pc.state_dict()))
    del state["intensity"]
    back = PooledCorrection.from_state_dict(state, n_targets=1)
    assert not back.intensity.active  # the restored configurations' variants carry no figures
    for acc in SLOPES:
        for v in VARIANTS:  # the same configurations again: their variants' intensity reaches the restored ones
            back.learn(acc, v, 1, 1, np.array([_truth(acc, v)]), np.array([True]))
    assert back.intensity.known[: len(back._cells)].all()
    coef = {acc: float(back.intensity.coef[0, back._gid["acc"][acc]]) for acc in SLOPES}
    assert coef["t4"] > 0.1 and coef["a100"] < -0.1
