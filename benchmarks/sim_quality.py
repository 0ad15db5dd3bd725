"""Scheduling quality of `oltunes` against the baselines and the oracle on every shipped scenario.

Goals (issue 4), reported as measured whatever they are:
* SLO violation rate <= 0.08 x that of the best non-oracle baseline (lowest violation rate of round-robin,
  least-loaded, random, static-profile, gavel-like);
* energy per request <= 0.5 x that baseline's, at <= 4 points accuracy loss;
* >= 95% of the oracle's SLO attainment after warm-up.

Two learners are scored, the same tuner code with different cold-start priors: ``oltunes`` (rule-of-thumb
prior, knows nothing of the hardware) and ``oltunes-profiled`` (prior = the offline profile table that
``static-profile`` and ``gavel-like`` also read; see ``oltunes/policies/oltunes_policy.py``). The top-level keys of
each scenario's JSON are those of ``oltunes``; ``learners`` holds both.

Warm-up length = end of the first re-tune window after which oltunes's attainment (1 - violation rate, per
re-tune window) stays >= 95% of the oracle's for the rest of the run ("never" if it does not). Regret = cumulative
violated requests of oltunes minus the oracle's, over cumulative requests, at each quarter of the run.

    .venv/bin/python -m benchmarks.sim_quality --json benchmarks/results/sim_quality.json
"""

from __future__ import annotations

from benchmarks.common import parser, print_table, write_json
from oltunes.sim.metrics import regret, warmup
from oltunes.sim.run import prepare, run_scenario
from oltunes.sim.scenario import load_scenario, shipped

BASELINES = ("round-robin", "least-loaded", "random", "static-profile", "gavel-like")
LEARNERS = ("oltunes", "oltunes-profiled")
POLICIES = (*LEARNERS, *BASELINES, "oracle")


def _score(results: dict, m: dict, learner: str, best: str, window_s: float) -> dict:
    ol, bl = m[learner], m[best]
    wl, att = warmup(results[learner][0], results["oracle"][0], window_s)
    ratio_v = ol["slo_violation_rate"] / bl["slo_violation_rate"] if bl["slo_violation_rate"] > 0 else float("inf")
    ratio_e = ol["energy_j_per_req"] / bl["energy_j_per_req"]
    return {
        "violation_ratio": ratio_v,
        "energy_ratio": ratio_e,
        "accuracy_loss_pts": ol["accuracy_loss_pts"],
        "oracle_attainment_after_warmup": att,
        "warmup_s": wl,
        "regret_quarters": regret(results[learner][0], results["oracle"][0]),
        "goals": {
            "violation_ratio<=0.08": ratio_v <= 0.08,
            "energy_ratio<=0.5_at_loss<=4": ratio_e <= 0.5 and ol["accuracy_loss_pts"] <= 4,
            "attainment>=0.95": att >= 0.95,
        },
    }


def evaluate(name: str, seed_offset: int = 0) -> dict:
    sc = load_scenario(name)
    if seed_offset:  # another draw of the same scenario: workload offsets, device drift, every policy's seed
        sc = sc.model_copy(update={"seed": sc.seed + seed_offset})
    results = run_scenario(prepare(sc), list(POLICIES))
    m = {k: v[1] for k, v in results.items()}
    best = min(BASELINES, key=lambda b: (m[b]["slo_violation_rate"], m[b]["energy_j_per_req"]))
    scores = {k: _score(results, m, k, best, sc.retune_interval_s) for k in LEARNERS}
    return {"scenario": name, "seed": sc.seed, "best_baseline": best, **scores["oltunes"], "learners": scores,
            "policies": m}


def seed_means(out: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Per scenario and policy: violation rate and energy per request averaged over the seeds run."""
    acc: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in out:
        for pol, m in r["policies"].items():
            acc.setdefault(r["scenario"], {}).setdefault(pol, []).append(
                (m["slo_violation_rate"], m["energy_j_per_req"]))
    return {sc: {pol: {"slo_violation_rate": sum(v for v, _ in xs) / len(xs),
                       "energy_j_per_req": sum(e for _, e in xs) / len(xs), "n_seeds": len(xs)}
                 for pol, xs in by.items()} for sc, by in acc.items()}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(shipped()), help="comma-separated (default: every shipped one)")
    p.add_argument("--seeds", default="0", help="comma-separated seed offsets (each adds to the scenario's seed); "
                   "the runs are chaotic, so compare policies on several")
    a = p.parse_args()
    offsets = [int(x) for x in a.seeds.split(",") if x.strip()]
    out = [evaluate(s, k) for s in a.scenarios.split(",") if s for k in offsets]
    rows = []
    for sr in out:
        pol = sr["policies"]
        for learner, r in sr["learners"].items():
            rows.append([
                f'{sr["scenario"]} s{sr["seed"]}', learner, sr["best_baseline"],
                pol[learner]["slo_violation_rate"], pol[sr["best_baseline"]]["slo_violation_rate"],
                pol["oracle"]["slo_violation_rate"], r["violation_ratio"], r["energy_ratio"], r["accuracy_loss_pts"],
                r["oracle_attainment_after_warmup"], "never" if r["warmup_s"] is None else r["warmup_s"],
                " ".join(f"{x:.3f}" for x in r["regret_quarters"]),
                "".join("Y" if v else "n" for v in r["goals"].values()),
            ])
    print_table(
        "oltunes vs best baseline and oracle (goals: viol ratio <= 0.08, energy ratio <= 0.5 @ <= 4 pts, "
        "attainment >= 0.95)",
        ["scenario", "learner", "best baseline", "viol learner", "viol baseline", "viol oracle", "viol ratio", "energy ratio",
         "acc loss", "attain vs oracle", "warm-up s", "regret q1..q4", "goals"],
        rows,
    )
    means = seed_means(out)
    if len(offsets) > 1:
        pols = list(next(iter(means.values())))
        print_table(f"mean over seed offsets {offsets}: SLO violation rate / energy J per request",
                    ["scenario", *pols],
                    [[sc, *(f'{by[q]["slo_violation_rate"]:.3f} / {by[q]["energy_j_per_req"]:.2f}' for q in pols)]
                     for sc, by in means.items()])
    write_json(a.json, {"results": out, "seed_offsets": offsets, "means": means})


if __name__ == "__main__":
    main()
