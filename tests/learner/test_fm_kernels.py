"""The compiled FM pieces against the numpy code they replaced, bit for bit (signs of zeros included): the per-row
sums (``fm_kernels.part_sums``) and the candidate grid's assembly (``raw_grid`` through ``fm_kernels.grid_sum``),
on random tables and index arrays, and on every call a simulated run makes."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.learner import fm_kernels, fm_scoring
from oltunes.learner.fm import MultiFMRegressor
from oltunes.learner.fm_kernels import part_sums
from oltunes.learner.fm_scoring import _cross


def numpy_part_sums(W, V, rows, vals):
    """The numpy reference: ``part_terms`` and ``_raw_many``'s interaction as they were written."""
    lin = (W.take(rows, axis=0) * vals[:, :, None]).sum(axis=1)
    xv = V.take(rows, axis=0) * vals[:, :, None, None]  # n, m, T, k
    s = xv.sum(axis=1)
    q = (xv * xv).sum(axis=(1, 3))
    return lin, s, q, 0.5 * ((s * s).sum(-1) - q)


def numpy_raw_grid(fm, parts, n_static, plus=()):
    """The numpy reference of ``raw_grid`` as it was (one broadcast pass over the grid per term), then its
    caller's sums ``+ a + b``."""
    T = fm._n_targets
    sizes = [rows.shape[0] for rows, _ in parts]
    n_dyn = len(parts) - n_static
    dyn = fm._merged_terms(parts[:n_dyn])
    sta = fm._merged_terms(parts[n_dyn:]) if n_static else []
    block = np.zeros((T, *(g[0].shape[0] for g in sta)))
    fm._accumulate(block, sta, 0, len(sta))
    p = len(dyn) + len(sta)
    out = np.empty((T, *(g[0].shape[0] for g in dyn), *(g[0].shape[0] for g in sta)))
    out[...] = block.reshape(T, *([1] * len(dyn)), *block.shape[1:])
    out += fm._W[0].reshape(T, *([1] * p))
    fm._accumulate(out, dyn, 0, p)
    for j, gd in enumerate(dyn):
        for m, gs in enumerate(sta):
            shape = [1] * p
            shape[j], shape[len(dyn) + m] = gd[0].shape[0], gs[0].shape[0]
            out += _cross(gd[1], gs[1]).reshape(T, *shape)
    out = fm._unscale(out.reshape(T, *sizes), axis=0)
    for a in plus:
        out = out + np.reshape(a, out.shape)
    return out


def _same(got, want) -> bool:
    return all(g.shape == w.shape and g.tobytes() == w.tobytes() for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("k", [1, 2, 5, 7, 8, 9, 16, 21, 64, 128])
@pytest.mark.parametrize("m", [1, 2, 7, 13])
def test_part_sums_is_the_numpy_expression_on_random_tables(k, m):
    rng = np.random.default_rng(1000 * k + m)
    F, T, n = 40, 3, 11
    # magnitudes over many decades (rounding shows in the order of additions), exact zeros and negative zeros
    W = rng.normal(size=(F, T)) * 10.0 ** rng.integers(-6, 6, size=(F, T))
    V = rng.normal(size=(F, T, k)) * 10.0 ** rng.integers(-6, 6, size=(F, T, k))
    W[1], V[1] = 0.0, -0.0
    rows = rng.integers(0, F, size=(n, m)).astype(np.intp)
    vals = rng.normal(size=(n, m)) * 10.0 ** rng.integers(-3, 3, size=(n, m))
    rows[:, m // 2 :] = np.where(rng.random((n, m - m // 2)) < 0.5, 0, rows[:, m // 2 :])  # padding: row 0, 0.0
    vals[rows == 0] = 0.0
    vals[0] = -0.0
    assert _same(part_sums(W, V, rows, vals), numpy_part_sums(W, V, rows, vals))


def _checked_in_light(monkeypatch, name, kernel, reference) -> list[tuple[int, int]]:
    """Run scenario ``light`` under the tuner with ``fm_scoring.<name>`` checked against ``reference`` at every call
    (bit for bit); the shapes of the index arrays it was called with."""
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator

    calls = []

    def checked(*args):
        got = kernel(*args)
        assert _same(got, reference(*args))
        calls.append(args[-2].shape)
        return got

    monkeypatch.setattr(fm_scoring, name, checked)
    prep = prepare(load_scenario("light"))
    sim = simulator(prep)
    sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    return calls


def test_part_sums_is_the_numpy_expression_on_a_simulated_runs_calls(monkeypatch):
    """Every (tables, index arrays) the tuner scores in a simulated run (scenario ``light``): the compiled sums
    equal numpy's, so its decisions are those the numpy scoring made."""
    calls = _checked_in_light(monkeypatch, "part_sums", part_sums, numpy_part_sums)
    assert len(calls) > 100 and max(n for n, _ in calls) > 1 and max(m for _, m in calls) > 1


def numpy_prefixed_unary(W, V, head_rows, head_vals, rows, vals):
    """The numpy reference of ``prefixed_unary``: the job's row joined before each row, then ``part_terms`` and
    ``raw_grid``'s unary term as they were written."""
    joined_rows, joined_vals = fm_scoring._prefixed(head_rows, rows), fm_scoring._prefixed(head_vals, vals)
    lin, s, q, _ = numpy_part_sums(W, V, joined_rows, joined_vals)
    return np.ascontiguousarray((lin + 0.5 * ((s * s).sum(-1) - q)).T), s


@pytest.mark.parametrize("k", [1, 5, 8, 9, 16, 64])
@pytest.mark.parametrize("m0,m1", [(1, 1), (2, 7), (3, 13), (5, 2)])
def test_prefixed_unary_is_the_numpy_expression_on_random_tables(k, m0, m1):
    rng = np.random.default_rng(100 * k + 10 * m0 + m1)
    F, T, n = 40, 3, 9
    W = rng.normal(size=(F, T)) * 10.0 ** rng.integers(-6, 6, size=(F, T))
    V = rng.normal(size=(F, T, k)) * 10.0 ** rng.integers(-6, 6, size=(F, T, k))
    W[1], V[1] = 0.0, -0.0
    head_rows = rng.integers(0, F, size=(1, m0)).astype(np.intp)
    head_vals = rng.normal(size=(1, m0)) * 10.0 ** rng.integers(-3, 3, size=(1, m0))
    rows = rng.integers(0, F, size=(n, m1)).astype(np.intp)
    vals = rng.normal(size=(n, m1)) * 10.0 ** rng.integers(-3, 3, size=(n, m1))
    rows[:, m1 // 2 :] = np.where(rng.random((n, m1 - m1 // 2)) < 0.5, 0, rows[:, m1 // 2 :])  # padding: row 0, 0.0
    vals[rows == 0] = 0.0
    vals[0] = -0.0
    head_vals[head_rows == 0] = 0.0
    got = fm_kernels.prefixed_unary(W, V, head_rows, head_vals, rows, vals)
    assert _same(got, numpy_prefixed_unary(W, V, head_rows, head_vals, rows, vals))


def test_prefixed_unary_is_the_numpy_expression_on_a_simulated_runs_grids(monkeypatch):
    """Every (job row, placement rows) a simulated run scores (scenario ``light``)."""
    calls = _checked_in_light(monkeypatch, "prefixed_unary", fm_kernels.prefixed_unary, numpy_prefixed_unary)
    assert len(calls) > 100 and max(n for n, _ in calls) > 1


def test_factors_beyond_the_fixed_summation_pattern_are_refused():
    from oltunes.learner.fm import MultiFMRegressor

    fm = MultiFMRegressor(targets=("a",), n_factors=fm_kernels.MAX_FACTORS + 1, seed=0)
    rows, vals = fm.index([{"x": 1.0}])
    with pytest.raises(ValueError):
        fm.predict_many(rows, vals)


def _random_fm(rng, standardize: bool, n_features: int = 30) -> MultiFMRegressor:
    fm = MultiFMRegressor(targets=("a", "b", "c"), n_factors=8, seed=int(rng.integers(1000)), standardize=standardize)
    for _ in range(60):  # learnt parameters and target scales (not the initial ones)
        x = {f"f{i}": float(rng.normal()) for i in rng.choice(n_features, 4, replace=False)}
        fm.learn_one(x, {"a": float(rng.normal(3.0)), "b": float(rng.normal(-1.0, 5.0)), "c": float(rng.normal())})
    return fm


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("n_static", [0, 1, 2, 3])
def test_raw_grid_is_the_numpy_assembly_for_the_tuners_shape_of_parts(seed, n_static):
    """The tuner's parts: a single job row, then placements (merged into one dynamic group), then static parts of
    any size (merged while small, as before); with and without target standardisation, with and without the
    static memo."""
    rng = np.random.default_rng(seed)
    fm = _random_fm(rng, standardize=bool(seed % 2))

    def part(n):
        return fm.index([{f"f{i}": float(rng.choice([1.0, rng.normal(), 0.0]))
                          for i in rng.choice(30, int(rng.integers(1, 5)), replace=False)} for _ in range(n)])

    parts = [part(1), part(int(rng.integers(1, 40)))] + [part(int(rng.integers(1, 12))) for _ in range(n_static)]
    want = numpy_raw_grid(fm, parts, n_static)
    cache: dict = {}
    for _ in range(2):  # the memo's miss, then its hit
        got = fm.raw_grid(parts, n_static=n_static, cache=cache)
        assert got.shape == want.shape and got.tobytes() == want.tobytes()
    # the caller's sums (the tuner's prior and correction grids; a scalar correction broadcast), signed zeros too
    prior = rng.normal(size=want.shape) * 10.0 ** rng.integers(-3, 4, size=want.shape)
    prior.flat[:: 7] = -0.0
    for corr in (rng.normal(size=want.shape), np.broadcast_to(0.0, want.shape), np.broadcast_to(-0.0, want.shape)):
        got = fm.raw_grid(parts, n_static=n_static, cache=cache, plus=(prior, corr))
        assert got.tobytes() == numpy_raw_grid(fm, parts, n_static, (prior, corr)).tobytes()
    assert fm.raw_grid(parts, n_static=n_static, plus=(prior,)).tobytes() == (want + prior).tobytes()
    only_static = fm.raw_grid(parts[2:], n_static=n_static) if n_static else None
    if only_static is not None:
        assert only_static.tobytes() == numpy_raw_grid(fm, parts[2:], n_static).tobytes()


def test_raw_grid_is_the_numpy_assembly_on_a_simulated_runs_grids(monkeypatch):
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator

    compiled_grid = fm_scoring.FMScoring.raw_grid
    shapes = []

    def checked(self, parts, n_static=0, cache=None, plus=()):
        got = compiled_grid(self, parts, n_static, cache, plus)
        assert got.tobytes() == numpy_raw_grid(self, parts, n_static, plus).tobytes()
        shapes.append(got.shape)
        return got

    monkeypatch.setattr(fm_scoring.FMScoring, "raw_grid", checked)
    prep = prepare(load_scenario("bursty"))
    sim = simulator(prep)
    sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    assert len(shapes) > 50 and max(s[2] for s in shapes) > 1


def dict_overlap(fm, xa, xd):
    """The reference of ``sums_plan``'s ``a_at`` as it was written: per row of ``xa``, per key of ``xd``'s entries
    (its positions in ``index(xd)``), the row's value of that key."""
    rows_d, _ = fm.index(xd)
    a_at = np.zeros((len(xa), len(xd), rows_d.shape[1]))
    for j, x in enumerate(xd):
        for m, k in enumerate(k for k, v in x.items() if v != 0.0 and k in fm._index):
            for i, a in enumerate(xa):
                if a.get(k) is not None:
                    a_at[i, j, m] = a[k]
    return a_at if a_at.any() else None


@pytest.mark.parametrize("seed", range(12))
def test_key_overlap_is_the_dict_lookup_of_every_newcomer_key(seed):
    """``overlap`` (``fm_kernels.key_overlap``) on ``index`` arrays against the dict lookups it replaced: keys
    shared or not, unknown to the vocabulary, zero in the newcomer (no position), rows without any feature, and
    feature 0 of the vocabulary (padding's row index) in both."""
    rng = np.random.default_rng(seed)
    fm = _random_fm(rng, standardize=False)

    def dicts(n, width):
        return [{f"f{i}": float(rng.choice([1.0, rng.normal(), 0.0, 1e-300]))
                 for i in rng.choice(34, int(rng.integers(0, width)), replace=False)} for _ in range(n)]

    met = 0
    for _ in range(5):
        xa, xd = dicts(int(rng.integers(1, 9)), 12), dicts(int(rng.integers(1, 7)), 5)
        rows_a, vals_a = fm.index(xa)
        rows_d, vals_d = fm.index(xd)
        got, want = fm.overlap(rows_a, vals_a, rows_d, vals_d), dict_overlap(fm, xa, xd)
        assert (got is None) == (want is None)
        if want is not None:
            assert got.shape == want.shape and got.tobytes() == want.tobytes()
            # row by row: any row's overlap is that of the row indexed alone, whatever the stack's padding
            i = int(rng.integers(len(xa)))
            alone = fm.overlap(*fm.index([xa[i]]), rows_d, vals_d)
            assert (alone is None and not want[i].any()) or alone[0].tobytes() == want[i].tobytes()
            met += 1
        plan_at = fm.sums_plan(xa, xd)[4]  # (``raw_sums``' plan reads it the same way)
        assert (plan_at is None and got is None) or plan_at.tobytes() == got.tobytes()
    assert met  # (the seeds' draws do meet)


@pytest.mark.parametrize("seed", range(6))
def test_row_terms_and_raw_are_the_two_calls_on_the_parts(seed):
    """One kernel call over rows stacked and padded to the widest equals ``row_terms`` of the first rows and
    ``predict_many`` of the others, each on its own index arrays, bit for bit."""
    rng = np.random.default_rng(seed)
    fm = _random_fm(rng, standardize=bool(seed % 2))

    def dicts(n, width):
        return [{f"f{i}": float(rng.choice([1.0, rng.normal(), -0.0]))
                 for i in rng.choice(30, int(rng.integers(1, width)), replace=False)} for _ in range(n)]

    xa, xb = dicts(int(rng.integers(1, 8)), 14), dicts(int(rng.integers(1, 8)), 6)
    y_a, s_a, raw_b = fm.row_terms_and_raw(*fm.index(xa + xb), len(xa))
    assert _same((y_a, s_a, raw_b), (*fm.row_terms(*fm.index(xa)), fm.predict_many(*fm.index(xb))))


def numpy_raw_sums_of(fm, a_terms, d_terms, vals_d, a_at):
    """The numpy reference of ``raw_sums_of`` as it was written."""
    (y_a, s_a), (y_d, s_d, norms) = a_terms, d_terms
    out = y_a[:, None, :] + y_d[None, :, :] + _cross(s_a, s_d).transpose(1, 2, 0)
    if a_at is not None:
        out -= np.einsum("ijm,jm,jmt->ijt", a_at, vals_d, norms)
    return fm._unscale(out)


@pytest.mark.parametrize("seed", range(40))
def test_raw_sums_of_is_the_numpy_expression_on_random_terms(seed):
    """``raw_sums_of`` (its sums past the BLAS product in ``fm_kernels.newcomer_sums``) against the numpy
    expressions, on finite terms over many decades with exact and negative zeros, with and without an overlap,
    with and without target standardisation, rows given as a column slice (as the co-runner checks pass them)."""
    rng = np.random.default_rng(seed)
    fm = _random_fm(rng, standardize=bool(seed % 2))
    T, k = fm._V.shape[1], fm._V.shape[2]
    n, nd, md = int(rng.integers(1, 60)), int(rng.integers(1, 13)), int(rng.integers(1, 6))

    def r(*shape):
        a = rng.normal(size=shape) * 10.0 ** rng.integers(-6, 7, size=shape)
        a.flat[:: int(rng.integers(2, 9))] = rng.choice([0.0, -0.0])
        return a

    packed = r(n, T + 4)
    a_terms, d_terms = (packed[:, :T], r(n, T, k)), (r(nd, T), r(nd, T, k), np.abs(r(nd, md, T)))
    vals_d = r(nd, md)
    for a_at in (None, r(n, nd, md)):
        want = numpy_raw_sums_of(fm, a_terms, d_terms, vals_d, a_at)
        got = fm.raw_sums_of(a_terms, d_terms, vals_d, a_at)
        assert got.shape == want.shape and got.tobytes() == want.tobytes()


def test_raw_sums_of_is_the_numpy_expression_on_a_simulated_runs_checks(monkeypatch):
    """Every co-runner check of a simulated run (stacks of members, overlaps with the newcomer's keys)."""
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator

    compiled_sums = fm_scoring.FMScoring.raw_sums_of
    overlaps = []

    def checked(self, a_terms, d_terms, vals_d, a_at):
        got = compiled_sums(self, a_terms, d_terms, vals_d, a_at)
        assert got.tobytes() == numpy_raw_sums_of(self, a_terms, d_terms, vals_d, a_at).tobytes()
        overlaps.append(a_at is not None)
        return got

    monkeypatch.setattr(fm_scoring.FMScoring, "raw_sums_of", checked)
    prep = prepare(load_scenario("bursty"))
    sim = simulator(prep)
    sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    assert any(overlaps) and not all(overlaps)
