"""Where a learning policy's SLO violations come from: decisions it knew would miss, or ones it got wrong.

Each measured control interval of a run is paired with the decision in force for its job (same configuration),
and that decision's kind: ``model`` / ``prior`` / ``explore`` (``Decision.source``) and whether the tuner found a
feasible candidate (``Decision.feasible``). An interval *violates* when its measured p99 exceeds the job's SLO
(a stream's end-to-end request p99, a batch job's batch p99): intervals, not requests, so the shares here weigh
a quiet interval like a busy one (``sim_quality`` counts requests).

Per scenario (summed over the seeds) the table gives each kind's intervals, its share of the violating ones, and
the median and 90th percentile of ``log(measured / predicted)`` batch p99 (how far the estimate behind the
decision was off; > 0: too fast). Read with ``gap_analysis``: violations under *infeasible* decisions are jobs the
tuner believed could not meet their SLO anywhere, so no selection rule would have saved them, only a model that
knew better where an unmeasured configuration does meet it; violations under *feasible* decisions are
mispredictions of the configuration it chose.

Run: ``python -m benchmarks.violation_sources --seeds 0,1,2 --json out.json`` (cold ``oltunes`` on every shipped
scenario, ~1 min per scenario and seed; ``--policy``, ``--scenarios`` to change).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from statistics import median

import numpy as np

from benchmarks.common import parser, print_table, write_json
from oltunes.policies import Policy
from oltunes.sim.scenario import load_scenario, shipped
from oltunes.simulation import context, prepare, simulator
from oltunes.types import Decision, Measurement


class DecisionLog:
    """A policy whose decisions in force are kept per job, and each measurement of one paired with it."""

    def __init__(self, inner: Policy) -> None:
        self._inner = inner
        self._in_force: dict[str, tuple[Decision, float]] = {}  # job id -> (decision, SLO)
        self.intervals: list[tuple[str, bool, float, float, bool, str]] = []  # source, feasible, log err, ...

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def decide(self, job, state, current=None):
        d = self._inner.decide(job, state, current=current)
        if d is not None:
            self._in_force[d.job_id] = (d, job.slo_ms)
        return d

    def observe(self, m: Measurement) -> None:
        self._pair(m)
        return self._inner.observe(m)

    def observe_many(self, ms: Sequence[Measurement]) -> None:
        for m in ms:
            self._pair(m)
        return self._inner.observe_many(ms)

    def _pair(self, m: Measurement) -> None:
        kept = self._in_force.get(m.job_id)
        if kept is not None and kept[0].candidate.key == m.candidate.key:
            d, slo = kept
            measured = m.request_latency_p99_ms if m.request_latency_p99_ms is not None else m.latency_p99_ms
            predicted = d.explanation.predicted.latency_p99_ms
            err = math.log(m.latency_p99_ms / predicted) if m.latency_p99_ms > 0 and predicted > 0 else math.nan
            self.intervals.append((d.source, d.feasible, err, measured, measured > slo, d.candidate.variant.family))


def run(name: str, seed_offset: int, policy: str) -> list[tuple]:
    sc = load_scenario(name)
    prep = prepare(sc.model_copy(update={"seed": sc.seed + seed_offset}))
    sim = simulator(prep)
    log = DecisionLog(Policy.make(policy, ctx=context(prep, sim.model, sim.cluster)))
    sim.run(log)
    return log.intervals


def summarise(intervals: list[tuple]) -> dict:
    n_violating = sum(x[4] for x in intervals) or 1
    kinds: dict[str, list[tuple]] = defaultdict(list)
    for x in intervals:
        kinds[f"{x[0]}, {'feasible' if x[1] else 'infeasible'}"].append(x)
    out = {}
    for kind, xs in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        errs = np.array([x[2] for x in xs if math.isfinite(x[2])])
        out[kind] = {"intervals": len(xs), "violating": sum(x[4] for x in xs),
                     "share_of_violating": sum(x[4] for x in xs) / n_violating,
                     "log_err_median": float(np.median(errs)) if len(errs) else math.nan,
                     "log_err_p90": float(np.quantile(errs, 0.9)) if len(errs) else math.nan}
    families: dict[str, int] = defaultdict(int)
    for x in intervals:
        families[x[5]] += x[4]
    out["_violating_by_family"] = dict(sorted(families.items(), key=lambda kv: -kv[1]))
    return out


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(shipped()), help="comma-separated shipped names or files")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seed offsets (intervals summed over them)")
    p.add_argument("--policy", default="oltunes", choices=Policy.known())
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    out, rows = {}, []
    for name in (n for n in a.scenarios.split(",") if n):
        s = out[name] = summarise([x for k in seeds for x in run(name, k, a.policy)])
        for kind, v in s.items():
            if not kind.startswith("_"):
                rows.append([name, kind, v["intervals"], v["violating"], f'{v["share_of_violating"]:.0%}',
                             v["log_err_median"], v["log_err_p90"]])
        top = list(s["_violating_by_family"].items())[:3]
        rows.append([name, "violating intervals by family", "", "", ", ".join(f"{f} {n}" for f, n in top), "", ""])
    print_table(f"{a.policy}: measured intervals by the decision in force (seeds {a.seeds})",
                ["scenario", "decision", "intervals", "violating", "share of violating",
                 "log(meas/pred) median", "p90"], rows)
    shares = [v["share_of_violating"] for s in out.values() for k, v in s.items() if k == "model, infeasible"]
    print(f"violating intervals under decisions the tuner knew infeasible: median share {median(shares):.0%} "
          f"over {len(shares)} scenarios" if shares else "")
    write_json(a.json, {"policy": a.policy, "seed_offsets": seeds, "scenarios": out})


if __name__ == "__main__":
    main()
