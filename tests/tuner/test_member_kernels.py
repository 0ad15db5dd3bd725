"""The co-runner checks' compiled passes (``member_kernels``) against the numpy expressions they replaced in
``corunners._checks_of``, bit for bit: on random stacks of options' members (ties with the SLO, signed zeros,
infinities and NaN included) and on every stack a simulated run checks."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.tuner import corunners
from oltunes.tuner.member_kernels import member_logs, member_verdicts

L = 3  # load levels


def numpy_logs(raw_lat, packed, T, S):
    """The numpy reference of ``member_logs``: ``_checks_of``'s expressions as they were written."""
    M = packed.shape[0]
    prior_with, (_, _, margins, corr, _) = packed[:, T:T + L], packed[:, T + L:].T
    log_with = raw_lat.reshape(M, S, L) + prior_with[:, None, :] + corr[:, None, None]
    return log_with, log_with + margins[:, None, None]


def numpy_verdicts(slowed, packed, T, size_of, counts, option_of, n_options):
    """The numpy reference of ``member_verdicts`` (per option, a slice's AND)."""
    waits, slos = packed[:, T + L], packed[:, T + L + 1]
    good = slowed + waits[:, None, None] <= slos[:, None, None]
    ok = np.ones((n_options, len(size_of), L), dtype=bool)
    good_v = None if good.all() else good[:, size_of, :]
    i = 0
    for p, n in zip(option_of, counts):
        if good_v is not None:
            ok[p] = good_v[i:i + n].all(axis=0)
        i += n
    return ok


def numpy_checks(raw_lat, packed, T, sizes, size_of, counts, option_of, n_options):
    log_with, with_margin = numpy_logs(raw_lat, packed, T, len(sizes))
    return log_with, numpy_verdicts(np.exp(with_margin), packed, T, size_of, counts, option_of, n_options)


def compiled_checks(raw_lat, packed, T, sizes, size_of, counts, option_of, n_options):
    log_with, with_margin = member_logs(raw_lat, packed, T, len(sizes))
    starts = np.array([0, *np.cumsum(counts)[:-1]], dtype=np.intp)
    ok = member_verdicts(np.exp(with_margin), packed, T, np.array(size_of, dtype=np.intp), starts,
                         np.array(option_of, dtype=np.intp), n_options)
    return log_with, ok


def _random_stack(rng, T: int, S: int):
    n_options = int(rng.integers(1, 12))
    option_of = sorted(rng.choice(n_options, size=int(rng.integers(1, n_options + 1)), replace=False).tolist())
    counts = rng.integers(1, 5, size=len(option_of)).tolist()
    M = sum(counts)
    raw = rng.normal(3.0, 1.5, size=(M, S * L, T))
    packed = np.empty((M, T + L + 5))
    packed[:, :T] = rng.normal(size=(M, T))
    packed[:, T:T + L] = rng.normal(0.0, 0.3, size=(M, L))
    packed[:, T + L] = rng.choice([0.0, -0.0, 2.5, 5.0], size=M)  # wait
    packed[:, T + L + 1] = rng.uniform(5.0, 200.0, size=M)  # SLO
    packed[:, T + L + 2] = rng.choice([0.0, -0.0, 0.1, 0.4], size=M)  # margin
    packed[:, T + L + 3] = rng.normal(0.0, 0.2, size=M)  # correction
    packed[:, T + L + 4] = rng.normal(3.0, 1.0, size=M)  # log latency alone
    special = rng.random(raw.shape[:2]) < 0.05
    raw[special, 0] = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0], size=int(special.sum()))
    if M > 1:  # a member exactly at its SLO: the tie keeps it
        m = int(rng.integers(M))
        packed[m, T:T + L] = 0.0
        packed[m, T + L + 2:T + L + 4] = 0.0
        raw[m, :, 0] = 2.0
        packed[m, T + L + 1] = np.exp(np.float64(2.0)) + packed[m, T + L]
    sizes = tuple("sml"[:S])
    size_of = rng.integers(0, S, size=int(rng.integers(1, 7))).tolist()
    return raw[:, :, 0], packed, sizes, size_of, counts, option_of, n_options


def _same(got, want) -> bool:
    return all(g.shape == w.shape and g.dtype == w.dtype and g.tobytes() == w.tobytes()
               for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_checks_are_the_numpy_ones_on_random_stacks(seed):
    rng = np.random.default_rng(seed)
    T, S = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    raw_lat, packed, sizes, size_of, counts, option_of, n_options = _random_stack(rng, T, S)
    args = (raw_lat, packed, T, sizes, size_of, counts, option_of, n_options)
    assert _same(compiled_checks(*args), numpy_checks(*args))


def test_the_compiled_checks_are_the_numpy_ones_on_a_simulated_run(monkeypatch):
    """Every stack the co-runner checks meet in a simulated run (strided FM outputs as the tuner passes them)."""
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator

    seen = {"logs": 0, "verdicts": 0}
    logs, verdicts = corunners.member_logs, corunners.member_verdicts

    def checked_logs(lat, packed, T, S):
        got = logs(lat, packed, T, S)
        assert _same(got, numpy_logs(lat, packed, T, S))
        seen["logs"] += 1
        return got

    def checked_verdicts(slowed, packed, T, size_of, starts, option_of, n_options):
        ok = verdicts(slowed, packed, T, size_of, starts, option_of, n_options)
        counts = np.diff([*starts.tolist(), packed.shape[0]]).tolist()
        assert _same((ok,), (numpy_verdicts(slowed, packed, T, size_of.tolist(), counts, option_of.tolist(),
                                            n_options),))
        seen["verdicts"] += 1
        return ok

    monkeypatch.setattr(corunners, "member_logs", checked_logs)
    monkeypatch.setattr(corunners, "member_verdicts", checked_verdicts)
    prep = prepare(load_scenario("light"))
    sim = simulator(prep)
    sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    assert seen["logs"] > 20 and seen["verdicts"] >= seen["logs"]
