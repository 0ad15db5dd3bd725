"""The vectorised ``PooledCorrection.grid`` (what decisions read) predicts what ``predict`` does, configuration by
configuration, as measurements add groups between calls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oltunes.profiles import accelerator_kind
from oltunes.tuner.model.correction import PooledCorrection
from oltunes.types import Variant

FAMILIES = {"cnn": ("s", "m", "l"), "bert": ("s", "l")}
# the CNNs' arithmetic intensity is known (the intensity slopes' term is on), the BERTs' not
VARIANTS = [Variant(family=f, name=f"{f}-{s}", size=s, accuracy=0.7,
                    **({"params": 10**6 * (i + 1), "gflops": 0.5 * 4**i} if f == "cnn" else {}))
            for f, sizes in FAMILIES.items() for i, s in enumerate(sizes)]
UNKNOWN_VARIANT = Variant(family="cnn", name="cnn-xl", size="xl", accuracy=0.9, params=5 * 10**6, gflops=20.0)
UNKNOWN_FAMILY = Variant(family="gpt", name="gpt-s", size="s", accuracy=0.6)
ACCELERATORS = ["t4", "a100", "cpu", "v100"]  # two kinds
UNKNOWN_ACCELERATORS = ["h100", "mystery-gpu"]  # never learnt (one with a spec, one without)


def _growth_of(acc: str, v: Variant, b: int) -> np.ndarray:
    """A prior's growth from batch 1, different per accelerator, variant and target."""
    return np.array([0.7, 0.9, 0.3]) * math.log(b) * (1.0 + 0.1 * len(v.name)) * (1.2 if acc == "t4" else 1.0)


def _reference_grid(pc: PooledCorrection, accelerators, variants, batch_sizes, concurrencies, growth_of=None):
    """The grid one configuration at a time, by ``predict``."""
    out = np.empty((pc.n_targets, len(accelerators), len(variants), len(batch_sizes), len(concurrencies)))
    for p, acc in enumerate(accelerators):
        for j, v in enumerate(variants):
            for bi, b in enumerate(batch_sizes):
                for ci, c in enumerate(concurrencies):
                    growth = growth_of(acc, v, b) if growth_of is not None else None
                    out[:, p, j, bi, ci] = pc.predict(acc, v, b, c, growth)
    return out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.allclose(a, b, rtol=0.0, atol=1e-12)


def _random_correction(seed: int, n: int, tilt: bool) -> PooledCorrection:
    """Measurements of random configurations (some targets masked); ``tilt``: full batches with the prior's growth,
    so the batch elasticity is fitted (else it never is)."""
    rng = np.random.default_rng(seed)
    pc = PooledCorrection(n_targets=3, root_k=float(rng.uniform(0.5, 3.0)))
    for _ in range(n):
        acc, v = ACCELERATORS[rng.integers(len(ACCELERATORS))], VARIANTS[rng.integers(len(VARIANTS))]
        b, c = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2]))
        pc.learn(acc, v, b, c, rng.normal(0, 1, 3), rng.random(3) > 0.15,
                 _growth_of(acc, v, b) if tilt else None, full_batches=tilt and bool(rng.random() > 0.2))
    return pc


def _axes(rng: np.random.Generator):
    """Grid axes mixing learnt and unknown accelerators and variants, measured and unmeasured batch sizes and
    concurrencies, in a random order."""
    accs = list(rng.permutation(ACCELERATORS + UNKNOWN_ACCELERATORS))[: rng.integers(2, 7)]
    variants = [VARIANTS[i] for i in rng.permutation(len(VARIANTS))] + [UNKNOWN_VARIANT, UNKNOWN_FAMILY]
    variants = variants[: rng.integers(2, len(variants) + 1)]
    batch_sizes = sorted(rng.choice([1, 2, 4, 8, 16, 32], size=rng.integers(1, 6), replace=False).tolist())
    concurrencies = sorted(rng.choice([1, 2, 3], size=rng.integers(1, 4), replace=False).tolist())
    return accs, variants, batch_sizes, concurrencies


@pytest.mark.parametrize("tilt", [True, False])
@pytest.mark.parametrize("seed", range(5))
def test_grid_equals_per_configuration_predictions(seed: int, tilt: bool):
    rng = np.random.default_rng(100 + seed)
    pc = _random_correction(seed, int(rng.integers(5, 120)), tilt)
    assert bool(np.abs(pc.elastic.coef).max(initial=0.0) > 0) == tilt  # the tilt is on (fitted) or off
    for _ in range(6):
        axes = _axes(rng)
        for growth_of in (_growth_of, None):
            assert _same(pc.grid(*axes, growth_of), _reference_grid(pc, *axes, growth_of))


def test_grid_stays_exact_as_groups_appear_between_calls():
    """The grid's index arrays are cached per axes: each measurement between two grids (new configurations, new
    groups, an accelerator or variant seen for the first time) must show in the next grid as in the loop."""
    rng = np.random.default_rng(7)
    pc = _random_correction(7, 3, tilt=True)
    axes = (ACCELERATORS + UNKNOWN_ACCELERATORS, VARIANTS + [UNKNOWN_VARIANT], [1, 2, 4, 8, 16], [1, 2])
    newcomers = [("h100", UNKNOWN_VARIANT, 16, 2), ("mystery-gpu", VARIANTS[0], 2, 1)]
    for i in range(40):
        acc, v, b, c = newcomers[i // 20] if i % 20 == 19 else (
            ACCELERATORS[rng.integers(len(ACCELERATORS))], VARIANTS[rng.integers(len(VARIANTS))],
            int(rng.choice([1, 2, 4, 8, 16])), int(rng.choice([1, 2])))
        pc.learn(acc, v, b, c, rng.normal(0, 1, 3), np.ones(3, bool), _growth_of(acc, v, b))
        assert _same(pc.grid(*axes, _growth_of), _reference_grid(pc, *axes, _growth_of))


def test_grid_asks_the_prior_growth_only_where_the_kind_never_measured_the_batch_size():
    pc = _random_correction(3, 60, tilt=True)
    asked = []

    def growth_of(acc, v, b):
        asked.append((acc, v.name, b))
        return _growth_of(acc, v, b)

    accs, cs, bs = ACCELERATORS + UNKNOWN_ACCELERATORS, [1, 2], [1, 2, 4, 8, 32]
    g = pc.grid(accs, VARIANTS, bs, cs, growth_of)
    assert asked and len(asked) == len(set(asked))  # once per (accelerator, variant, batch size)
    families = {v.name: v.family for v in VARIANTS}
    for acc, name, b in asked:  # an accelerator the correction knows (its tilt), or the family's kind (its scale)
        assert acc in pc._gid["acc"] or f"{accelerator_kind(acc)}/{families[name]}" in pc._gid["fam"]
        assert any(f"{accelerator_kind(acc)}/{name}/{b}/{c}" not in pc._gid["shape"] for c in cs)
    assert _same(g, _reference_grid(pc, accs, VARIANTS, bs, cs, _growth_of))


def test_grid_of_an_empty_correction_is_zero():
    pc = PooledCorrection(n_targets=3)
    g = pc.grid(["t4", "h100"], VARIANTS, [1, 4], [1], _growth_of)
    assert g.shape == (3, 2, len(VARIANTS), 2, 1) and not g.any()
