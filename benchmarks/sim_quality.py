"""Scheduling quality of `oltunes` against the baselines and the oracle on every shipped scenario.

Goals (issue 4), reported as measured whatever they are:
* SLO violation rate <= 0.08 x that of the best non-oracle baseline (lowest violation rate of round-robin,
  least-loaded, random, static-profile, gavel-like);
* energy per request <= 0.5 x that baseline's, at <= 4 points accuracy loss;
* >= 95% of the oracle's SLO attainment after warm-up.

Warm-up length = end of the first re-tune window after which oltunes's attainment (1 - violation rate, per
re-tune window) stays >= 95% of the oracle's for the rest of the run ("never" if it does not). Regret = cumulative
violated requests of oltunes minus the oracle's, over cumulative requests, at each quarter of the run.

    .venv/bin/python -m benchmarks.sim_quality --json benchmarks/results/sim_quality.json
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import parser, print_table, write_json
from oltunes.sim.metrics import violations_per_bin
from oltunes.sim.run import prepare, run_scenario
from oltunes.sim.scenario import load_scenario, shipped

BASELINES = ("round-robin", "least-loaded", "random", "static-profile", "gavel-like")
POLICIES = ("oltunes", *BASELINES, "oracle")


def _windows(res, window_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t, tot, bad = violations_per_bin(res)
    k = max(1, int(round(window_s / res.interval_s)))
    n = len(t) // k * k
    return t[:n:k], tot[:n].reshape(-1, k).sum(1), bad[:n].reshape(-1, k).sum(1)


def warmup(ol, orc, window_s: float) -> tuple[float | None, float]:
    """(warm-up length in s or None = never, attainment ratio oltunes/oracle after it — or over the 2nd half)."""
    t, tot, bad_o = _windows(ol, window_s)
    _, _, bad_x = _windows(orc, window_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        att_o = np.where(tot > 0, 1 - bad_o / np.maximum(tot, 1), 1.0)
        att_x = np.where(tot > 0, 1 - bad_x / np.maximum(tot, 1), 1.0)
    ok = att_o >= 0.95 * att_x
    start = None
    for i in range(len(ok)):
        if ok[i:].all():
            start = i
            break
    lo = start if start is not None else len(t) // 2
    att_after_o = 1 - bad_o[lo:].sum() / max(1, tot[lo:].sum())
    att_after_x = 1 - bad_x[lo:].sum() / max(1, tot[lo:].sum())
    length = None if start is None else float(t[start])
    return length, float(att_after_o / att_after_x) if att_after_x > 0 else float("nan")


def regret(ol, orc) -> list[float]:
    _, tot, bad_o = violations_per_bin(ol)
    _, _, bad_x = violations_per_bin(orc)
    cum = np.cumsum(bad_o - bad_x) / np.maximum(1, np.cumsum(tot))
    idx = [max(0, int(len(cum) * q) - 1) for q in (0.25, 0.5, 0.75, 1.0)]
    return [float(cum[i]) for i in idx]


def evaluate(name: str) -> dict:
    sc = load_scenario(name)
    results = run_scenario(prepare(sc), list(POLICIES))
    m = {k: v[1] for k, v in results.items()}
    best = min(BASELINES, key=lambda b: (m[b]["slo_violation_rate"], m[b]["energy_j_per_req"]))
    ol, bl = m["oltunes"], m[best]
    wl, att = warmup(results["oltunes"][0], results["oracle"][0], sc.retune_interval_s)
    ratio_v = ol["slo_violation_rate"] / bl["slo_violation_rate"] if bl["slo_violation_rate"] > 0 else float("inf")
    ratio_e = ol["energy_j_per_req"] / bl["energy_j_per_req"]
    return {
        "scenario": name,
        "best_baseline": best,
        "violation_ratio": ratio_v,
        "energy_ratio": ratio_e,
        "accuracy_loss_pts": ol["accuracy_loss_pts"],
        "oracle_attainment_after_warmup": att,
        "warmup_s": wl,
        "regret_quarters": regret(results["oltunes"][0], results["oracle"][0]),
        "goals": {
            "violation_ratio<=0.08": ratio_v <= 0.08,
            "energy_ratio<=0.5_at_loss<=4": ratio_e <= 0.5 and ol["accuracy_loss_pts"] <= 4,
            "attainment>=0.95": att >= 0.95,
        },
        "policies": m,
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(shipped()), help="comma-separated (default: every shipped one)")
    a = p.parse_args()
    out = [evaluate(s) for s in a.scenarios.split(",") if s]
    rows = []
    for r in out:
        pol = r["policies"]
        rows.append([
            r["scenario"], r["best_baseline"],
            pol["oltunes"]["slo_violation_rate"], pol[r["best_baseline"]]["slo_violation_rate"],
            pol["oracle"]["slo_violation_rate"], r["violation_ratio"], r["energy_ratio"], r["accuracy_loss_pts"],
            r["oracle_attainment_after_warmup"], "never" if r["warmup_s"] is None else r["warmup_s"],
            " ".join(f"{x:.3f}" for x in r["regret_quarters"]),
            "".join("Y" if v else "n" for v in r["goals"].values()),
        ])
    print_table(
        "oltunes vs best baseline and oracle (goals: viol ratio <= 0.08, energy ratio <= 0.5 @ <= 4 pts, "
        "attainment >= 0.95)",
        ["scenario", "best baseline", "viol oltunes", "viol baseline", "viol oracle", "viol ratio", "energy ratio",
         "acc loss", "attain vs oracle", "warm-up s", "regret q1..q4", "goals"],
        rows,
    )
    write_json(a.json, {"results": out})


if __name__ == "__main__":
    main()
