"""Interference fidelity: the simulator's co-runner interference model against the sharing store, and what FM-FTML adds.

Rows: :func:`oltunes.sim.profile_store.sharing_rows` (Gpulet's MPS pairs and MIGProfiler's A100 MIG slices, shipped;
Lucid's co-location pairs, read at run time from ``shared_data``).

1. **Interference model** (:func:`oltunes.sim.perftables.fit_interference`: slowdown = 1 + base + compute x c x c_j):
   fitted on every source, then leave-one-source-out (fit on the others, predict the held-out source's slowdowns);
   median and p90 absolute percentage error of the slowdown, against two references: no interference (slowdown 1)
   and one constant (the training rows' median slowdown).
2. **MIG slices** (no co-runner, the hardware isolates them): slowdown on a k/7 slice against the whole GPU,
   predicted as 7/k (proportional) and as 1 + GRACT x (7/k - 1) (only the job's busy share slows; GRACT measured on
   the whole GPU); neither has a fitted parameter.
3. **FM-FTML on co-located placements** (a ``learner_accuracy``-style split), per source: Gpulet's rows at the 50 %
   MPS share (measured latencies) and Lucid's (normalised speeds: solo = LUCID_SOLO_MS) as tuner measurements on a
   nominal accelerator ``t4`` (neither names its GPU; the solo rows teach the tuner the device). Per seed: the tuner
   observes every solo row (``--solo-repeats`` times, default once), then ``n`` co-located rows (n = 0 cold, 10,
   25, 50, 100), and predicts the other co-located rows. Predictors: ``tuner`` (its own path, ``Tuner.observe`` then
   ``Tuner.predict``: prior + pooled correction + FM-FTML), ``tuner without FM`` (the same tuner with its FM's
   predictions held at zero: prior + pooled correction), and the fitted interference model on the solo latency
   (fitted without that source: what the simulator's physics would predict). MAPE and median APE (%), median over seeds
   and the range (min-max) across seeds.

Run: ``.venv/bin/python -m benchmarks.interference_fidelity --json benchmarks/results/interference_fidelity.json``
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.common import median, parser, print_table, write_json
from oltunes.config import get_settings
from oltunes.learner import JobContext
from oltunes.sim.perftables import fit_interference, pair_rows, predict_slowdown
from oltunes.sim.profile_store import sharing_rows
from oltunes.tuner.model.estimate_learning import TARGETS
from oltunes.types import Candidate, CoRunner, Measurement, Variant

OBSERVED = (0, 10, 25, 50, 100)
FM_SHARE = 0.5
NOMINAL_ACCELERATOR = "t4"
LUCID_SOLO_MS = 100.0
# Published parameters (M) and GFLOPs per item (2 x multiply-adds, as oltunes.sim.variant_params) of Gpulet's models.
GPULET_MODELS = {"resnet50": ("resnet", 25.6, 8.18), "vgg19": ("vgg", 143.7, 39.3),
                 "densenet121": ("densenet", 8.0, 5.66), "inception": ("inception", 23.8, 11.5),
                 "mobilenet": ("mobilenet", 4.2, 1.14)}


def _apes(pred: np.ndarray, actual: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(pred, float) / np.asarray(actual, float) - 1.0) * 100.0


def _summary(apes: np.ndarray) -> dict[str, float]:
    return {"median_ape": float(np.median(apes)), "p90_ape": float(np.percentile(apes, 90)), "n": int(len(apes))}


# ------------------------------------------------------------------------------------------- 1. interference model
def interference_section(rows: pd.DataFrame) -> dict:
    pairs = pair_rows(rows)
    full = fit_interference(pairs)
    out: dict = {"fit": {"base": full.base, "compute": full.compute, "sigma": full.sigma, "rows": full.rows,
                         "sources": list(full.sources)}, "by_source": {}}
    table, loso_all = [], []
    for src in full.sources:
        held, train = pairs[pairs["source"] == src], pairs[pairs["source"] != src]
        y = held["slowdown"].to_numpy(float)
        res = {"in-source fit": _summary(_apes(predict_slowdown(full, held), y)),
               "no interference": _summary(_apes(1.0, y))}
        if train["source"].nunique():
            m = fit_interference(train)
            loso = _apes(predict_slowdown(m, held), y)
            loso_all.append(loso)
            res["leave-source-out"] = {**_summary(loso), "base": m.base, "compute": m.compute}
            res["constant (training median)"] = _summary(_apes(float(train["slowdown"].median()), y))
        out["by_source"][src] = res
        for name, r in res.items():
            table.append([src, held["setting"].iloc[0], name, r["median_ape"], r["p90_ape"], r["n"]])
    loso = np.concatenate(loso_all) if loso_all else np.array([np.nan])
    out["interference_loso_median_ape"] = float(np.median(loso))
    out["interference_loso_p90_ape"] = float(np.percentile(loso, 90))
    print_table(f"co-runner interference: slowdown = 1 + {full.base:.3f} + {full.compute:.3f} x c x c_j "
                f"(log sigma {full.sigma:.3f}), {full.rows} pair rows", ["source", "setting", "predictor",
                                                                           "median APE %", "p90 APE %", "rows"], table)
    return out


# ------------------------------------------------------------------------------------------------- 2. MIG slices
def mig_section(rows: pd.DataFrame) -> dict:
    mig = rows[(rows["setting"] == "mig-slice") & np.isfinite(rows["slowdown"])]
    if mig.empty:
        return {}
    whole = mig[mig["share"] >= 1.0].set_index(["model", "batch"])["compute_util"]
    mig = mig[mig["share"] < 1.0]
    busy = np.array([whole.get((m, b), np.nan) for m, b in zip(mig["model"], mig["batch"])])
    y, inverse = mig["slowdown"].to_numpy(float), 1.0 / mig["share"].to_numpy(float)
    preds = {"proportional: 7/k": inverse, "compute share: 1 + GRACT x (7/k - 1)": 1.0 + busy * (inverse - 1.0)}
    out: dict = {"rows": len(mig)}
    table = []
    for name, pred in preds.items():
        for model in [*sorted(mig["model"].unique()), "all"]:
            sel = (mig["model"] == model).to_numpy() if model != "all" else np.ones(len(mig), bool)
            r = _summary(_apes(pred[sel], y[sel]))
            out.setdefault(name, {})[model] = r
            table.append([name, model, r["median_ape"], r["p90_ape"], r["n"]])
    print_table("A100 80GB MIG slices (MIGProfiler), slowdown on a k/7 slice against the whole GPU; no fitted "
                "parameter (GRACT = the job's SM-busy share on the whole GPU)",
                ["predictor", "model", "median APE %", "p90 APE %", "rows"], table)
    return out


# ------------------------------------------------------------------------------------------------ 3. FM-FTML split
def _variant(name: str, source: str) -> Variant:
    if source == "gpulet":
        fam, p, gf = GPULET_MODELS[name]
        return Variant(family=fam, name=name, size=name, accuracy=0.75, params=int(p * 1e6), gflops=gf)
    # Lucid names "Model/Dataset/ampN"; no published compute per item: every one gets the same prior, its solo rows
    # (normalised to LUCID_SOLO_MS) teach the tuner the rest
    return Variant(family=name.split("/")[0].lower(), name=name.replace("/", "-"), size=name.replace("/", "-"),
                   accuracy=0.75, params=10_000_000, gflops=1.0)


def tuner_rows(rows: pd.DataFrame, source: str) -> tuple[list[tuple[Candidate, float]], pd.DataFrame]:
    """One source's pairs as tuner rows: (solo rows as (candidate, batch latency ms), co-located rows with their
    candidate and latency in columns ``candidate`` and ``latency_ms``). Gpulet: its 50 % MPS share, measured
    latencies; Lucid: normalised speeds, so solo = LUCID_SOLO_MS and shared = LUCID_SOLO_MS x slowdown."""
    g = pair_rows(rows[rows["source"] == source])
    if source == "gpulet":
        g = g[np.isclose(g["share"], FM_SHARE)]
    g = g.copy()
    variants = {name: _variant(name, source) for name in {*g["model"], *g["co_model"]}}

    def cand(model: str, batch: int, co: tuple[CoRunner, ...] = ()) -> Candidate:
        return Candidate(pool=source, accelerator=NOMINAL_ACCELERATOR, variant=variants[model], batch_size=batch,
                         co_runners=co)

    if source == "gpulet":
        solo = {(r.model, int(r.batch)): float(r.latency_solo_ms) for r in g.itertuples()}
        g["latency_ms"] = g["latency_shared_ms"]
    else:
        solo = {(r.model, int(r.batch)): LUCID_SOLO_MS for r in g.itertuples()}
        g["latency_ms"] = LUCID_SOLO_MS * g["slowdown"]
    g["solo_ms"] = [solo[(m, int(b))] for m, b in zip(g["model"], g["batch"])]
    g["candidate"] = [cand(r.model, int(r.batch), (CoRunner(
        job_id="co", family=variants[r.co_model].family, variant=variants[r.co_model].name,
        size=variants[r.co_model].size, batch_size=int(r.co_batch), load=1.0),)) for r in g.itertuples()]
    return [(cand(m, b), y) for (m, b), y in sorted(solo.items())], g


def _measurement(i: int, c: Candidate, y: float) -> Measurement:
    return Measurement(measurement_id=f"row-{i}", job_id=f"profile-{i}", kind="batch", candidate=c,
                       items=c.batch_size, wall_s=y / 1000.0, latency_p50_ms=y, latency_p95_ms=y, latency_p99_ms=y,
                       throughput_items_per_s=0.0, energy_j_per_item=0.0, energy_source="estimated")


def tuner_predict(train: list[tuple[Candidate, float]], test: list[Candidate], seed: int, fm: bool) -> np.ndarray:
    """The tuner's own path. ``fm=False``: the same tuner with its FM's predictions held at zero (it neither
    learns nor predicts), so the prior and the pooled correction are all that is left."""
    from oltunes.tuner import Tuner

    variants = {c.variant.name: c.variant for c in [*(c for c, _ in train), *test]}
    tuner = Tuner(list(variants.values()), seed=seed)
    if not fm:
        model = tuner.estimator.model
        zeros = np.zeros(len(TARGETS))
        model.learn_predict = lambda x, y, mask, w=1.0: zeros.copy()
        model.predict_many = lambda rows, vals: np.zeros((len(rows), len(zeros)))
    for k, (c, y) in enumerate(train):
        tuner.observe(_measurement(k, c, y))
    return np.array([p.latency_p99_ms for p in tuner.predict(JobContext(), test)])


def fm_section(rows: pd.DataFrame, seeds: int, source: str, solo_repeats: int = 1) -> dict:
    solo, pairs = tuner_rows(rows, source)
    physics = fit_interference(pair_rows(rows[rows["source"] != source]))
    reference = pairs["solo_ms"].to_numpy(float) * predict_slowdown(physics, pairs)
    res: dict = {}
    for n in OBSERVED:
        per: dict[str, list[dict[str, float]]] = {}
        for seed in range(seeds):
            rng = np.random.default_rng([seed, 29, n])
            order = rng.permutation(len(pairs))
            seen, rest = order[:n], order[n:]
            train = [solo[i % len(solo)] for i in rng.permutation(len(solo) * solo_repeats)] + [
                (pairs["candidate"].iloc[i], float(pairs["latency_ms"].iloc[i])) for i in seen]
            test, y = list(pairs["candidate"].iloc[rest]), pairs["latency_ms"].to_numpy(float)[rest]
            preds = {"tuner": tuner_predict(train, test, seed, fm=True),
                     "tuner without FM": tuner_predict(train, test, seed, fm=False),
                     f"interference model x solo (fit without {source})": reference[rest],
                     "solo latency (no interference)": pairs["solo_ms"].to_numpy(float)[rest]}
            for name, p in preds.items():
                e = _apes(p, y)
                per.setdefault(name, []).append({"mape": float(np.mean(e)), "median_ape": float(np.median(e))})
        res[n] = {name: {"mape": median([x["mape"] for x in v]), "median_ape": median([x["median_ape"] for x in v]),
                         "mape_min": min(x["mape"] for x in v), "mape_max": max(x["mape"] for x in v)}
                  for name, v in per.items()}
    table = [[n, name, r["mape"], r["median_ape"], f"{r['mape_min']:.1f}-{r['mape_max']:.1f}"]
             for n in OBSERVED for name, r in res[n].items()]
    print_table(f"FM-FTML on co-located placements, {source}: {len(solo)} solo rows observed (x{solo_repeats}) + n "
                f"co-located, predict the other {len(pairs)} - n; median of {seeds} seeds",
                ["n co-located observed", "predictor", "MAPE %", "median APE %", "MAPE range over seeds"], table)
    return {"by_observed": res, "solo_rows": len(solo), "solo_repeats": solo_repeats, "co_located_rows": len(pairs),
            "seeds": seeds,
            "variance_explained": variance_split(pairs),
            "fm_gain_mape_points": {n: res[n]["tuner without FM"]["mape"] - res[n]["tuner"]["mape"] for n in OBSERVED}}


def variance_split(pairs: pd.DataFrame) -> dict[str, float]:
    """Shares of the variance of log slowdown: the job's own (model, batch), then its co-runner's, and what is left
    (the pairwise effect an FM could learn, plus measurement noise: the sources give no repeats to separate them)."""
    y = np.log(pairs["slowdown"].to_numpy(float))
    own = pairs["model"].astype(str) + "/" + pairs["batch"].astype(str)
    co = pairs["co_model"].astype(str) + "/" + pairs["co_batch"].astype(str)
    y0 = y - y.mean()
    a = pd.Series(y0).groupby(own.to_numpy()).transform("mean").to_numpy()
    b = pd.Series(y0 - a).groupby(co.to_numpy()).transform("mean").to_numpy()
    total = float(np.sum(y0 ** 2))
    return {"own": 1.0 - float(np.sum((y0 - a) ** 2)) / total,
            "co_runner": float(np.sum((y0 - a) ** 2) - np.sum((y0 - a - b) ** 2)) / total,
            "pairwise_and_noise": float(np.sum((y0 - a - b) ** 2)) / total}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--solo-repeats", type=int, default=1, help="times the tuner observes each solo row")
    args = p.parse_args()
    rows = sharing_rows(get_settings().shared_data)
    out = {"rows": {f"{s}/{t}": int(n) for (s, t), n in rows.groupby(["source", "setting"]).size().items()},
           "interference": interference_section(rows), "mig": mig_section(rows),
           "fm": {src: fm_section(rows, args.seeds, src, args.solo_repeats) for src in ("gpulet", "lucid")
                  if (rows["source"] == src).any()}}
    out["interference_loso_median_ape"] = out["interference"]["interference_loso_median_ape"]
    out["interference_loso_p90_ape"] = out["interference"]["interference_loso_p90_ape"]
    write_json(args.json, out)


if __name__ == "__main__":
    main()
