"""The pooled correction's compiled fit (``oltunes.tuner.fit_kernels``) against the numpy
fit it replaced (``tests/tuner/correction_reference.py``): bit for bit, on random streams and on the stream a
simulated run records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oltunes.tuner.correction import PooledCorrection
from oltunes.tuner.fit_kernels import _row_sum
from oltunes.types import Variant
from tests.tuner.correction_reference import NumpyFit
from tests.tuner.test_correction import _RebuiltEachFit


class _NumpyFitRebuilt(NumpyFit, _RebuiltEachFit):
    """The numpy fit over rebuilt index arrays (no configuration-is-its-own-group shortcut)."""


def _state(pc: PooledCorrection) -> list[bytes]:
    """Everything a fit moves, as bytes."""
    it, el = pc.intensity, pc.elastic
    return [pc._mu.tobytes(), *(pc._effects[e].tobytes() for e in sorted(pc._effects)), pc.scale.coef.tobytes(),
            el.coef.tobytes(), el.x.tobytes(), el.mean.tobytes(), it.coef.tobytes(), it.mean.tobytes(),
            pc._cell_tilt(pc._structure()).tobytes(), str((pc._tilt_fits, pc._tilt_news, pc.version)).encode(),
            pc._sums.tobytes(), pc._counts.tobytes(), pc._tilt_counts.tobytes()]


def test_row_sum_is_numpys_pairwise_sum():
    """Sizes across numpy's blocks (8 accumulators up to 128, halving above), magnitudes spread wide."""
    rng = np.random.default_rng(3)
    for n in [*range(140), 255, 256, 257, 1000, 1031, 4100]:
        a = rng.standard_normal(n) * np.exp(rng.standard_normal(n) * 6)
        assert _row_sum(a) == a.sum()
    assert math.copysign(1.0, _row_sum(np.array([-0.0]))) == math.copysign(1.0, np.array([-0.0]).sum())


@pytest.mark.parametrize("fast_cls, ref_cls", [(PooledCorrection, NumpyFit), (_RebuiltEachFit, _NumpyFitRebuilt)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_fit_is_the_numpy_fit_bit_for_bit(fast_cls, ref_cls, seed):
    """A random stream, one measurement or a chunk at a time, with every block in play (growth scales, batch
    elasticity from full batches only, intensity slopes for the variants whose compute is known): every
    before/after, every effect, ``mu``, every slope and the grid equal the numpy fit's to the bit."""
    rng = np.random.default_rng([seed, 11])
    accs = ["t4", "a100", "p100", "cpu", "h100"]
    variants = [Variant(family=f"f{i % 3}", name=f"v{i}", size="s", accuracy=0.5, params=10**6 * (i + 1) * (i % 4 > 0),
                        gflops=0.5 + i) for i in range(8)]
    fast, ref = fast_cls(n_targets=3, root_k=2.0), ref_cls(n_targets=3, root_k=2.0)
    for _ in range(160):
        chunk = []
        for _ in range(int(rng.integers(1, 6))):
            acc, v, b = accs[rng.integers(len(accs))], variants[rng.integers(len(variants))], int(rng.choice([1, 4, 8]))
            growth = np.array([0.6, -0.3, 1.1]) * math.log(b) + rng.normal(0, 0.05, 3)
            y = rng.normal(0, 1, 3) * np.exp(rng.normal(0, 2))
            full_batches = bool(rng.random() > 0.3)
            chunk.append((acc, v, b, int(rng.choice([1, 2])), y, rng.random(3) > 0.15, growth, full_batches))
        got, want = fast.learn_many(chunk), ref.learn_many(chunk)
        assert [a.tobytes() for a in (*got[0], *got[1])] == [b.tobytes() for b in (*want[0], *want[1])]
        assert _state(fast) == _state(ref)
    assert fast._tilt_fits > 0 and np.any(fast.scale.coef != 0) and np.any(fast.intensity.coef != 0)  # all moved
    grid = ([*accs, "v100"], variants, [1, 4, 8, 16], [1, 2])
    assert fast.grid(*grid).tobytes() == ref.grid(*grid).tobytes()


def test_compiled_fit_is_the_numpy_fit_on_a_simulated_runs_stream(monkeypatch):
    """The measurements a simulated run (scenario ``light``) feeds the tuner's correction, learnt by the compiled
    and the numpy fit side by side: the same corrections and state after every batch."""
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator
    from oltunes.tuner import estimate

    batches = []

    class Twin(PooledCorrection):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.ref = NumpyFit(*a, **k)

        def learn_many(self, measurements):
            got, want = super().learn_many(measurements), self.ref.learn_many(measurements)
            assert [a.tobytes() for a in (*got[0], *got[1])] == [b.tobytes() for b in (*want[0], *want[1])]
            assert _state(self) == _state(self.ref)
            batches.append(len(measurements))
            return got

    monkeypatch.setattr(estimate, "PooledCorrection", Twin)
    prep = prepare(load_scenario("light"))
    sim = simulator(prep)
    sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    assert len(batches) > 50 and max(batches) > 1  # a real stream: many batches, some of several measurements


@pytest.mark.parametrize("active", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_fit_start_is_the_numpy_terms(active, seed):
    """``fit_kernels.fit_start`` against the numpy expressions it replaced (``NumpyFit``'s ``S_untilted`` and the
    variant side), signed zeros included, an accelerator newer than the slopes' last fit and unknown intensities."""
    from oltunes.tuner.fit_kernels import fit_start
    from tests.tuner.correction_reference import intensity_cells

    rng = np.random.default_rng(seed)
    T, C, F, A, G = 3, 40, 5, 4, 30

    def vals(*shape):
        x = rng.normal(size=shape) * np.exp(rng.normal(0, 3, size=shape))
        x[rng.random(shape) < 0.15] = 0.0
        x[rng.random(shape) < 0.15] = -0.0
        return x

    S, N, tilt, x_growth, eff = vals(T, C), np.abs(vals(T, C)), vals(T, C), vals(C), vals(T, 3 * G)
    scale_coef = vals(T, F)
    fam_of, acc_of = rng.integers(0, F, C).astype(np.intp), rng.integers(0, A, C).astype(np.intp)
    groups = tuple(rng.integers(0, G, C).astype(np.intp) for _ in range(3))
    var_at = np.array([0, G, 2 * G], dtype=np.intp)

    class It:  # an IntensitySlope's arrays: slopes fitted for the first A - 1 accelerators only
        n_targets, coef, mean = T, vals(T, A - 1), vals(T, A - 1)
        x, known = vals(C), (rng.random(C) > 0.3).astype(float)

    it = It()
    got_s, got_v = fit_start(S, N, tilt, scale_coef, x_growth, eff, var_at, (fam_of, acc_of, groups),
                             (active, it.coef, it.mean, it.x, it.known))
    per_cell = tilt + scale_coef.take(fam_of, axis=1) * x_growth
    want_s = S - N * (per_cell + intensity_cells(it, acc_of) if active else per_cell)
    want_v = sum(eff[:, var_at[e]:var_at[e] + G].take(groups[e], axis=1) for e in range(3))
    assert got_s.tobytes() == want_s.tobytes() and got_v.tobytes() == want_v.tobytes()
