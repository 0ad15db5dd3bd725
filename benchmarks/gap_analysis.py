"""Where cold ``oltunes`` loses against the oracle: its violation gap split into parts that add up.

Per scenario and seed, the same workload runs under five policies that share selection code but differ in what
they know (``oltunes.policies.diagnostics``):

    cold    ``oltunes``, cold start (the contender)
    warm    ``oltunes`` again over the same run, starting from everything the cold run learned
    table   ``oltunes-true-table``: cold, but its prior is the truth's isolated profile (diagnostic)
    oracle  full knowledge of the true model and the arrivals
    public  ``oracle-public``: the oracle's rule on the public table (diagnostic)

and the gap ``cold - oracle`` (SLO violation rates) is split as

    learning    = cold - warm      what learning within the run costs (gone by a second pass)
    unlearned   = warm - table     what the learned model still gets wrong against a true profile
    rules       = table - oracle   the tuner's selection rules and what an isolated profile cannot express
                                   (interference, queueing, clairvoyance of arrivals)

``public - oracle`` is shown beside it: what knowing the truth is worth to the oracle's own rule (how much there is
to learn at all). ``floor`` is the oracle's own violation rate: requests no policy here serves in time. The
regret per quarter (cold and warm vs the oracle) shows whether learning shows within the run, and the families
that account for most of ``cold - oracle`` are listed. Medians over seeds (parts are medians too, so they add up
only approximately; the per-seed parts add up exactly and are in the JSON).

    .venv/bin/python -m benchmarks.gap_analysis --json benchmarks/results/gap_analysis.json
    .venv/bin/python -m benchmarks.gap_analysis --scenarios tiny --heldout "" --seeds 0   # a quick look
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from statistics import median

from benchmarks.common import parser, print_table, write_json
from benchmarks.sim_quality import HELDOUT, run_cached
from oltunes.policies import Policy
from oltunes.sim.metrics import compute, request_arrays
from oltunes.sim.report import regret_per_quarter
from oltunes.sim.scenario import load_scenario, shipped
from oltunes.simulation import Prepared, context, prepare, run_policy, simulator

PARTS = ("learning", "unlearned", "rules")


def _cold_then_warm(p: Prepared):
    """Cold ``oltunes``, then a second pass over the same run with the tuner the first pass left."""
    out = []
    tuner = None
    for _ in range(2):
        sim = simulator(p)
        ctx = context(p, sim.model, sim.cluster)
        policy = Policy.make("oltunes", ctx=ctx if tuner is None else replace(ctx, tuner=tuner))
        tuner = policy.tuner
        res = sim.run(policy)
        out.append((res, compute(res)))
    return out


def _late_by_family(res) -> Counter:
    """Violated streaming requests per model family."""
    out: Counter = Counter()
    for r in res.runs:
        if r.streaming and len(r.arr) > 0:
            slo = r.job.spec.slo_ms / 1000.0
            late = r.dropped | ~((r.done - r.job.arrivals) <= slo)
            out[r.job.spec.family] += int(late.sum())
    return out


def gap_one(name: str, seed_offset: int, cache: Path | None = None) -> dict:
    sc = load_scenario(name)
    sc = sc.model_copy(update={"seed": sc.seed + seed_offset})
    p = prepare(sc)
    cold, warm = _cold_then_warm(p)
    results = {"cold": cold, "warm": warm, "table": (r := run_policy(p, "oltunes-true-table"), compute(r)),
               "oracle": run_cached(p, "oracle", cache), "public": run_cached(p, "oracle-public", cache)}
    v = {k: m["slo_violation_rate"] for k, (_, m) in results.items()}
    n = len(request_arrays(results["oracle"][0])["arrival"]) or 1
    fam_cold, fam_orc = _late_by_family(cold[0]), _late_by_family(results["oracle"][0])
    by_family = {f: (fam_cold[f] - fam_orc[f]) / n for f in sorted(set(fam_cold) | set(fam_orc))}
    return {"scenario": sc.name, "seed": sc.seed, "violation_rate": v,
            "parts": {"learning": v["cold"] - v["warm"], "unlearned": v["warm"] - v["table"],
                      "rules": v["table"] - v["oracle"]},
            "gap": v["cold"] - v["oracle"], "truth_worth": v["public"] - v["oracle"],
            "regret_per_quarter": regret_per_quarter({k: results[k] for k in ("cold", "warm", "oracle")}),
            "gap_by_family": by_family}


def summarise(runs: list[dict]) -> dict:
    med = lambda f: median(f(r) for r in runs)  # noqa: E731
    fams = sorted({f for r in runs for f in r["gap_by_family"]})
    by_family = {f: med(lambda r, f=f: r["gap_by_family"].get(f, 0.0)) for f in fams}
    return {"seeds": [r["seed"] for r in runs],
            "violation_rate": {k: med(lambda r, k=k: r["violation_rate"][k]) for k in runs[0]["violation_rate"]},
            "gap": med(lambda r: r["gap"]), "parts": {k: med(lambda r, k=k: r["parts"][k]) for k in PARTS},
            "truth_worth": med(lambda r: r["truth_worth"]),
            "regret_per_quarter": {k: [median(r["regret_per_quarter"][k][q] for r in runs) for q in range(4)]
                                   for k in ("cold", "warm")},
            "gap_by_family": dict(sorted(by_family.items(), key=lambda kv: -kv[1]))}


def report(title: str, summary: dict[str, dict]) -> None:
    print_table(f"{title}: median SLO violation rates, and cold - oracle split into parts",
                ["scenario", "cold", "warm", "table", "oracle", "public", "gap", *PARTS, "truth worth"],
                [[name, *(s["violation_rate"][k] for k in ("cold", "warm", "table", "oracle", "public")), s["gap"],
                  *(s["parts"][k] for k in PARTS), s["truth_worth"]] for name, s in summary.items()])
    print_table(f"{title}: regret vs the oracle per quarter, and the families behind the gap",
                ["scenario", "cold q1..q4", "warm q1..q4", "largest family gaps (share of requests)"],
                [[name, *(" ".join(f"{x:.3f}" for x in s["regret_per_quarter"][k]) for k in ("cold", "warm")),
                  ", ".join(f"{f} {x:.3f}" for f, x in list(s["gap_by_family"].items())[:3])]
                 for name, s in summary.items()])


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(shipped()), help="comma-separated shipped names or files")
    p.add_argument("--heldout", default=",".join(str(x) for x in sorted(HELDOUT.glob("*.yaml"))),
                   help="comma-separated held-out scenario files, reported apart")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seed offsets (medians over them)")
    p.add_argument("--cache", type=Path, default=None, help="keep the oracles' runs here (as sim_quality does)")
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",") if s]
    t0 = time.perf_counter()
    out = {}
    for group, names in (("shipped", a.scenarios), ("held-out", a.heldout)):
        names = [n for n in names.split(",") if n]
        if not names:
            continue
        summary = {}
        for name in names:
            s = summarise([gap_one(name, k, a.cache) for k in seeds])
            summary[Path(name).stem if name.endswith(".yaml") else name] = s
            print(f"{group} {name}: gap {s['gap']:.3f}", flush=True)
        report(group, summary)
        out[group] = summary
    write_json(a.json, {"seeds": seeds, "elapsed_s": time.perf_counter() - t0, **out})


if __name__ == "__main__":
    main()
