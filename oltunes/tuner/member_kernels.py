"""The co-runner checks' per-decision arithmetic around the FM's sums (``corunners._checks_of``) in two compiled
passes: a decision stacks ~12 members of ~5 options, so the dozen numpy calls it took (reshapes, broadcasts, fancy
indexing, a ``reduceat`` per option run) cost far more than their arithmetic.

The same operations in the same order as those numpy expressions (``tests/tuner/test_member_kernels.py`` checks it
bit for bit); the exponential between the two passes stays numpy's.
"""

from __future__ import annotations

import numpy as np

from oltunes.jit import compiled

__all__ = ["member_logs", "member_verdicts"]


@compiled
def member_logs(lat: np.ndarray, packed: np.ndarray, T: int, S: int) -> tuple[np.ndarray, np.ndarray]:
    """Each member's log latency with the newcomer, (M, S, L): ``lat[m, s * L + l]`` (the FM's latency output per
    newcomer size s and load level l) ``+ prior_with[m, l] + corr[m]``, and that ``+ margin[m]`` (what the SLO
    check exponentiates). ``packed``: ``_OptionTerms``' columns (T outputs, L priors, wait, SLO, margin, corr, ..)."""
    M = lat.shape[0]
    L = packed.shape[1] - T - 5
    log_with = np.empty((M, S, L))
    with_margin = np.empty((M, S, L))
    for m in range(M):
        margin, corr = packed[m, T + L + 2], packed[m, T + L + 3]
        for s in range(S):
            for level in range(L):
                v = lat[m, s * L + level] + packed[m, T + level] + corr
                log_with[m, s, level] = v
                with_margin[m, s, level] = v + margin
    return log_with, with_margin


@compiled
def member_verdicts(slowed: np.ndarray, packed: np.ndarray, T: int, size_of: np.ndarray, starts: np.ndarray,
                    option_of: np.ndarray, n_options: int) -> np.ndarray:
    """``ok`` (n_options, V, L): a member keeps its SLO when ``slowed[m, s, l] + wait[m] <= slo[m]`` (s: variant
    v's size, ``size_of[v]``); option ``option_of[k]``'s members are rows ``starts[k]`` up to the next start (the last
    up to M), and it is ok where all of them are; options without members are ok everywhere."""
    M, _, L = slowed.shape
    V = size_of.shape[0]
    ok = np.ones((n_options, V, L), dtype=np.bool_)
    n = starts.shape[0]
    for k in range(n):
        p = option_of[k]
        end = starts[k + 1] if k + 1 < n else M
        for m in range(starts[k], end):
            wait, slo = packed[m, T + L], packed[m, T + L + 1]
            for v in range(V):
                s = size_of[v]
                for level in range(L):
                    if not slowed[m, s, level] + wait <= slo:
                        ok[p, v, level] = False
    return ok
