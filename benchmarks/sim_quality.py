"""Scheduling quality of `oltunes` against the baselines and the oracle, shipped and held-out scenarios apart.

Every run uses the scenario's truth perturbation (default sigma 0.5: the simulator's truth differs from the public
profile table by a seeded per-(variant, accelerator) log-normal factor); ``static-profile``, ``gavel-like`` and
``oltunes-profiled`` read the public table, only the oracle the truth. Each scenario runs under several seed
offsets (each adds to the scenario's seed: another workload draw, device drift and truth); figures are medians.

Targets (issue 9), checked on the medians:

* ``viol``: cold-start ``oltunes`` violations <= max(0.5 x best baseline's, 1.15 x oracle's + 0.005);
* ``attain``: its SLO attainment over the whole run >= 0.95 x the oracle's;
* ``loss``: accuracy loss <= 4 points; ``energy``: energy per request <= the best baseline's;
* ``regret``: its regret vs the oracle falls from each quarter to the next until it is within 0.05;
* ``profiled``: ``oltunes-profiled`` violations <= 0.5 x ``static-profile``'s (both read the same, wrong, table).

The best baseline is the non-learning, non-oracle policy with the fewest violations (per seed). Held-out scenarios
(``benchmarks/heldout/*.yaml``: other traces, other cluster shapes) were never used to tune anything; they are
reported apart from the shipped ones. Drift events: per policy, violations before/after and recovery time.

    .venv/bin/python -m benchmarks.sim_quality --json benchmarks/results/sim_quality.json
    .venv/bin/python -m benchmarks.sim_quality --scenarios tiny --heldout "" --seeds 0   # a quick look
    .venv/bin/python -m benchmarks.sim_quality --world stress   # every scenario in the stress world

``--cache DIR`` keeps the runs of the policies that do not learn (baselines, oracle) between invocations, keyed by
the scenario, the seed and a hash of the simulator's and the policies' sources: iterating on the tuner then reruns
only the learners. ``--no-trials``: the learners run without exploration (no shadows, no probe shards), to compare
side by side; per policy the report gives the exploration energy share and the trials per job
(``exploration_energy_share``, ``shadows_per_job``, ``probes_per_job``; docs/simulator.md, Exploration).
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from statistics import median

import oltunes

from benchmarks.common import parser, print_table, write_json
from oltunes.atomic import atomic_write
from oltunes.sim.report import EXPLORATION, events, regret_per_quarter
from oltunes.sim.metrics import compute
from oltunes.simulation import Prepared, exploring, prepare, run_policy
from oltunes.sim.scenario import load_scenario, shipped

BASELINES = ("round-robin", "least-loaded", "random", "static-profile", "gavel-like")
LEARNERS = ("oltunes", "oltunes-profiled")
POLICIES = (*LEARNERS, *BASELINES, "oracle")
HELDOUT = Path(__file__).parent / "heldout"
REGRET_CLOSE = 0.05


# What a non-learning policy's run depends on besides the scenario (the learners are never cached).
_FIXED_SOURCES = ("sim", "policies", "profiles.py", "types.py", "simulation.py", "inventory.py")


def _sources_digest() -> str:
    root = Path(oltunes.__file__).parent
    h = hashlib.sha256()
    for name in _FIXED_SOURCES:
        for f in sorted((root / name).rglob("*.py")) if (root / name).is_dir() else [root / name]:
            if f.name != "oltunes_policy.py":
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def run_cached(p: Prepared, policy: str, cache: Path | None, trials: bool = True) -> tuple:
    """(RunResult, metrics) of one policy; a non-learning one's from ``cache`` when it holds this exact run."""
    if cache is None or policy in LEARNERS:
        res = run_policy(p, policy, **exploring(policy, trials))
        return res, compute(res)
    key = hashlib.sha256(f"{p.scenario.model_dump_json()}|{policy}|{_sources_digest()}".encode()).hexdigest()[:24]
    path = cache / f"{p.scenario.name}-{policy}-{key}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    out = run_policy(p, policy)
    out = (out, compute(out))
    cache.mkdir(parents=True, exist_ok=True)
    data = pickle.dumps(out)
    atomic_write(path, lambda tmp: tmp.write_bytes(data))
    return out


def run_one(name: str, seed_offset: int, cache: Path | None = None, learners: tuple[str, ...] = LEARNERS,
            trials: bool = True, world: str | None = None) -> dict:
    """One scenario under one seed offset: every policy's metrics, regret per quarter and event impacts.
    ``trials``: the learners may shadow and probe; ``world`` (grounded | stress) overrides the scenario's own."""
    sc = load_scenario(name)
    sc = sc.model_copy(update={"seed": sc.seed + seed_offset, **({"world": world} if world else {})})
    p = prepare(sc)
    results = {pol: run_cached(p, pol, cache, trials) for pol in (*learners, *BASELINES, "oracle")}
    m = {k: v[1] for k, v in results.items()}
    best = min(BASELINES, key=lambda b: (m[b]["slo_violation_rate"], m[b]["energy_j_per_req"]))
    return {"scenario": sc.name, "seed": sc.seed, "best_baseline": best, "policies": m,
            "regret_per_quarter": regret_per_quarter(results), "events": events(sc, results)}


def _med(runs: list[dict], f) -> float:
    return median(f(r) for r in runs)


def summarise(runs: list[dict]) -> dict:
    """Medians over the seeds of one scenario, and the targets checked on them."""
    v = {p: _med(runs, lambda r, p=p: r["policies"][p]["slo_violation_rate"]) for p in POLICIES}
    best = _med(runs, lambda r: r["policies"][r["best_baseline"]]["slo_violation_rate"])
    best_e = _med(runs, lambda r: r["policies"][r["best_baseline"]]["energy_j_per_req"])
    ol = {k: _med(runs, lambda r, k=k: r["policies"]["oltunes"][k]) for k in ("energy_j_per_req", "accuracy_loss_pts")}
    regret = {p: [median(r["regret_per_quarter"][p][q] for r in runs) for q in range(4)]
              for p in POLICIES if p != "oracle"}
    attain = (1 - v["oltunes"]) / (1 - v["oracle"]) if v["oracle"] < 1 else float("nan")
    bound = max(0.5 * best, 1.15 * v["oracle"] + 0.005)
    q = regret["oltunes"]
    goals = {
        "viol": v["oltunes"] <= bound,
        "attain": attain >= 0.95,
        "loss": ol["accuracy_loss_pts"] <= 4,
        "energy": ol["energy_j_per_req"] <= best_e,
        "regret": all(q[i + 1] < q[i] or q[i] <= REGRET_CLOSE for i in range(3)),
        "profiled": v["oltunes-profiled"] <= 0.5 * v["static-profile"],
    }
    exploration = {p: {k: _med(runs, lambda r, p=p, k=k: r["policies"][p].get(k, 0.0)) for k in EXPLORATION}
                   for p in LEARNERS}
    return {"seeds": [r["seed"] for r in runs], "violation_rate": v, "best_baseline_violation_rate": best,
            "best_baseline_energy_j_per_req": best_e, "oltunes": ol, "attainment_vs_oracle": attain,
            "violation_bound": bound, "regret_per_quarter": regret, "goals": goals, "exploration": exploration,
            "events": _event_medians(runs)}


def _event_medians(runs: list[dict]) -> list[dict]:
    """Per event: each policy's median before/after, and its recovery time per seed (None = never)."""
    out = []
    for i, ev in enumerate(runs[0]["events"]):
        per = {}
        for p in POLICIES:
            xs = [r["events"][i]["policies"][p] for r in runs]
            recs = [x["recovery_s"] for x in xs]
            per[p] = {"before": median(x["before"] for x in xs), "after": median(x["after"] for x in xs),
                      "recovery_s": recs,
                      "never_recovered": sum(x is None for x in recs)}
        out.append({"at_s": ev["at_s"], "event": ev["event"], "policies": per})
    return out


def report(title: str, summary: dict[str, dict]) -> None:
    print_table(f"{title}: median SLO violation rates over seeds (target: oltunes <= bound)",
                ["scenario", "oltunes", "bound", "best base", "oracle", "profiled", "static", "attain"],
                [[name, s["violation_rate"]["oltunes"], s["violation_bound"], s["best_baseline_violation_rate"],
                  s["violation_rate"]["oracle"], s["violation_rate"]["oltunes-profiled"],
                  s["violation_rate"]["static-profile"], s["attainment_vs_oracle"]] for name, s in summary.items()])
    print_table(f"{title}: median regret vs the oracle per quarter, and the targets",
                ["scenario", "oltunes q1..q4", "profiled q1..q4", "goals"],
                [[name, *(" ".join(f"{x:.3f}" for x in s["regret_per_quarter"][p]) for p in LEARNERS),
                  " ".join(f"{k}:{'Y' if ok else 'n'}" for k, ok in s["goals"].items())] for name, s in summary.items()])
    heads = ("energy share", "shadows/stream", "probes/batch")
    print_table(f"{title}: median exploration per learner (baselines and oracle: none)",
                ["scenario", *(f"{p} {k}" for p in LEARNERS for k in heads)],
                [[name, *(s["exploration"][p][k] for p in LEARNERS for k in EXPLORATION)]
                 for name, s in summary.items()])
    ev_rows = []
    for name, s in summary.items():
        for ev in s["events"]:
            for p in ("oltunes", "oltunes-profiled", "static-profile", "gavel-like", "oracle"):
                x = ev["policies"][p]
                rec = ",".join("never" if r is None else f"{r:g}" for r in x["recovery_s"])
                kinds = "+".join(e.split()[0] for e in ev["event"].split("; "))
                ev_rows.append([name, f'{ev["at_s"]:g}s {kinds}', p, x["before"], x["after"], rec])
    if ev_rows:
        print_table(f"{title}: drift events, median violations before/after, recovery s per seed",
                    ["scenario", "event", "policy", "before", "after", "recovery s"], ev_rows)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(shipped()), help="comma-separated shipped names or files")
    p.add_argument("--heldout", default=",".join(str(x) for x in sorted(HELDOUT.glob("*.yaml"))),
                   help="comma-separated held-out scenario files (default: benchmarks/heldout/*.yaml)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seed offsets (medians over them)")
    p.add_argument("--no-trials", dest="trials", action="store_false",
                   help="the learners run without exploration (no shadows, no probe shards)")
    p.add_argument("--cache", type=Path, default=None,
                   help="directory keeping the baselines' and the oracle's runs between invocations")
    p.add_argument("--world", choices=("grounded", "stress"), default=None,
                   help="the simulator's world for every scenario (default: each scenario's own, grounded unless set)")
    a = p.parse_args()
    offsets = [int(x) for x in a.seeds.split(",") if x.strip()]
    out: dict[str, dict] = {}
    for group, names in (("shipped", a.scenarios), ("heldout", a.heldout)):
        summary = {}
        for name in (n for n in names.split(",") if n):
            runs = [run_one(name, k, a.cache, trials=a.trials, world=a.world) for k in offsets]
            summary[runs[0]["scenario"]] = {**summarise(runs), "runs": runs}
        if summary:
            report(group, summary)
        out[group] = summary
    write_json(a.json, {"seed_offsets": offsets, "world": a.world or "per scenario", "regret_close": REGRET_CLOSE,
                        "trials": a.trials, **out})


if __name__ == "__main__":
    main()
