"""The cross-source held-out-accelerator split of ``benchmarks/learner_accuracy.py`` (``--split source-accelerator``).

Rows: batch latency (p50, else mean) from the profile store's NVIDIA DeepLearningExamples tables on the three named
GPUs the tuner's catalog knows (T4, V100, A100; batch 1-16; one tuner variant per model x precision x runtime, with
its published FLOPs and parameters), plus Proteus's measured CPU rows (another source). Per held-out GPU and seed:
train on every row of the other accelerators, then on ``n`` seeded rows of the held-out GPU (``n`` = 0, 5, 10, 20),
and predict its other rows. Predictors: ``tuner`` (the tuner's own path, ``Tuner.observe`` then ``Tuner.predict``:
prior + pooled correction + FM-FTML) and ``tuner without FM`` (the same prior and pooled correction, no FM), so the
difference is what FM-FTML adds. MAPE and median APE (%), medians over seeds, then over held-out GPUs, and the range
over (seed, GPU). Then the same after 20 observations within one serving set-up at a time (one runtime's GPU rows plus
the CPU rows, as a deployment sees them: every variant behind one stack), for the set-ups with enough rows.
Target (issue 29): the tuner after 20 observations MAPE <= 20 %, median APE <= 10 % (``heldout_source_mape_20``).
"""

from __future__ import annotations

from statistics import median

import numpy as np

from benchmarks import heldout_accelerator as ha
from benchmarks.common import print_table
from oltunes.sim.profile_store import load_store
from oltunes.sim.world_specs import STORE_MODELS, family_of
from oltunes.types import Candidate, Variant

GPUS = ("t4", "v100", "a100")
OBSERVED = (0, 5, 10, 20)


def load_rows(data_dir) -> list[tuple[Candidate, float]]:
    store = load_store(data_dir)
    dle = store[(store["source"] == "nvidia-dle") & store["accelerator"].isin(GPUS) & (store["batch"] <= 16)
                & store["model"].isin(list(STORE_MODELS)) & store["precision"].isin(["fp32", "fp16"])]
    rows, variants = [], {}
    for r in dle.itertuples():
        lat = r.latency_p50_ms if np.isfinite(r.latency_p50_ms) else r.latency_avg_ms
        if not (np.isfinite(lat) and lat > 0):
            continue
        name = f"{r.model}-{r.precision}-{r.runtime}".replace("/", "-").replace("+", "-")
        g, p = STORE_MODELS[r.model]
        v = variants.setdefault(name, Variant(family=family_of(r.model), name=name, size=r.model,
                                              precision=r.precision, accuracy=0.8, params=int(p * 1e6), gflops=g))
        rows.append((Candidate(pool=r.accelerator, accelerator=r.accelerator, variant=v, batch_size=int(r.batch)),
                     float(lat)))
    from benchmarks.learner_accuracy import load_rows as proteus_rows  # its Proteus reader: the CPU rows only

    rows += [(c, y) for c, y in proteus_rows(data_dir / "proteus" / "aggregate_profiled.csv")
             if c.accelerator == "cpu"]
    return rows


def split(rows, held: str, n: int, seed: int) -> tuple[list[int], list[int]]:
    rng = np.random.default_rng([seed, 29])
    target = [i for i, (c, _) in enumerate(rows) if c.accelerator == held]
    seen = set(rng.choice(target, size=n, replace=False).tolist()) if n else set()
    train = [i for i, (c, _) in enumerate(rows) if c.accelerator != held or i in seen]
    return [train[j] for j in rng.permutation(len(train))], [i for i in target if i not in seen]


def setup_of(c: Candidate) -> str:
    """The serving set-up a row was measured under (its tuner variant is ``model-precision-runtime``)."""
    return c.variant.name[len(c.variant.size) + len(c.variant.precision) + 2:]


def evaluate(rows, seeds: int, observed=OBSERVED, spread: bool = False) -> dict:
    out: dict = {}
    for held in GPUS:
        if not any(c.accelerator == held for c, _ in rows):
            continue
        for n in observed:
            if sum(c.accelerator == held for c, _ in rows) <= n + 4:
                continue
            per = []
            for seed in range(seeds):
                train, test = split(rows, held, n, seed)
                y = np.array([rows[i][1] for i in test])
                per.append({"tuner": ha._apes(ha.tuner_predictions(rows, train, test, seed, learn=True), y),
                            "tuner without FM": ha._apes(ha.correction_predictions(rows, train, test, ha._prior, {}),
                                                         y)})
            out.setdefault(held, {})[n] = {name: {k: median(p[name][k] for p in per) for k in ("mape", "median_ape")}
                                           | ({"per_seed_mape": [round(p[name]["mape"], 2) for p in per]} if spread
                                              else {}) for name in per[0]}
    return out


def per_setup(rows, seeds: int, n: int = 20) -> dict:
    """The same split within one serving set-up at a time (the GPU rows of one runtime, plus the CPU rows): what the
    tuner meets in a deployment, where every variant runs behind the same stack. MAPE per (set-up, GPU, seed)."""
    out = {}
    for setup in sorted({setup_of(c) for c, _ in rows if c.accelerator != "cpu"}):
        sub = [(c, y) for c, y in rows if c.accelerator == "cpu" or setup_of(c) == setup]
        res = evaluate(sub, seeds, (n,), spread=True)
        if res:
            out[setup] = res
    return out


def report(rows, seeds: int) -> dict:
    res = evaluate(rows, seeds, spread=True)
    table = []
    for n in OBSERVED:
        for name in ("tuner", "tuner without FM"):
            mape = median(res[g][n][name]["mape"] for g in GPUS)
            mdape = median(res[g][n][name]["median_ape"] for g in GPUS)
            every = [x for g in GPUS for x in res[g][n][name]["per_seed_mape"]]
            table.append([n, name, mape, mdape, f"{min(every):.1f}-{max(every):.1f}",
                          *(res[g][n][name]["mape"] for g in GPUS)])
    print_table(f"source-accelerator split: NVIDIA tables (T4/V100/A100) + Proteus CPU, {len(rows)} rows; held-out GPU "
                f"after n observations, median of {seeds} seeds (targets after 20: MAPE <= 20 %, median APE <= 10 %)",
                ["n observed", "predictor", "MAPE %", "median APE %", "MAPE % range (seeds x GPUs)",
                 *(f"MAPE % {g} held out" for g in GPUS)], table)
    setups = per_setup(rows, seeds)
    st = []
    for name in ("tuner", "tuner without FM"):
        every = [x for r in setups.values() for g in r.values() for x in g[20][name]["per_seed_mape"]]
        mdape = [g[20][name]["median_ape"] for r in setups.values() for g in r.values()]
        st.append([name, median(every), median(mdape), f"{min(every):.1f}-{max(every):.1f}", len(every)])
    print_table("the same after 20 observations, within one serving set-up at a time (as in a deployment: every "
                f"variant behind one stack; set-ups: {', '.join(setups)})",
                ["predictor", "MAPE % (median)", "median APE %", "MAPE % range", "(set-up, GPU, seed) runs"], st)
    t20 = [r for r in table if r[0] == 20]
    return {"heldout_source_mape_20": t20[0][2], "heldout_source_median_ape_20": t20[0][3],
            "heldout_source_mape_20_without_fm": t20[1][2],
            "heldout_source_median_ape_20_without_fm": t20[1][3],
            "heldout_source_mape_20_range": t20[0][4], "heldout_source_mape_20_without_fm_range": t20[1][4],
            "per_setup_mape_20": st[0][1], "per_setup_median_ape_20": st[0][2],
            "per_setup_mape_20_without_fm": st[1][1], "per_setup_median_ape_20_without_fm": st[1][2],
            "by_gpu": res, "by_setup": setups, "rows": len(rows), "seeds": seeds}
