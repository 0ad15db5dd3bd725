"""Diagnostic policies: the same selection code as a contender, with different knowledge, so that the gap between
cold ``oltunes`` and the ``oracle`` can be split into parts (``benchmarks/gap_analysis.py``). None of them is a
contender; two of them read the simulator's truth, and say so.

* ``oracle-public`` — the oracle's rule reading the *public* table (and not slowed by drift events) instead of the
  truth; it keeps the oracle's clairvoyance of arrivals and loads. ``oracle-public`` minus ``oracle`` is what
  knowing the true model is worth to the oracle's own rule.
* ``oltunes-true-table`` — ``oltunes-profiled`` whose cold-start profile is the *truth's* isolated table (at the
  start of the run) instead of the public one: the tuner's selection rules with the best profile a user could ever
  have. Interference, concurrency, queueing and drift are still learned. Its gap to the oracle is the cost of the
  tuner's rules (margins, hysteresis, tie-breaks) and of what an isolated profile cannot express.
"""

from __future__ import annotations

from oltunes.policies.oltunes_policy import OLTunesProfiled
from oltunes.policies.oracle import Oracle
from oltunes.profiles import Profile


class OraclePublic(Oracle, name="oracle-public"):
    """The oracle's rule on the public table (module docstring): a diagnostic, never a contender."""

    @property
    def model(self) -> Profile:
        return self.ctx.profile


class OLTunesTrueTable(OLTunesProfiled, name="oltunes-true-table"):
    """``oltunes-profiled`` profiled on the truth (module docstring): a diagnostic that reads the truth once, for
    its cold-start prior."""

    @property
    def profile_table(self) -> Profile:
        return self.ctx.true_profile
