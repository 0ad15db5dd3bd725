"""Learner accuracy: progressive and held-out MAPE of p99-ish latency on real ONNX Runtime measurements.

Data: ``proteus/aggregate_profiled.csv`` from the shared data folder (46 model variants x ONNX Runtime on CPU /
Pascal GPU / Ampere GPU x batch 1-16), read at run time from ``get_settings().shared_data`` (its licence allows
comparison use only: it is never copied into the repository). Mapping:

* ``Accel``: onnxruntime_cpu -> ``cpu``, onnxruntime_gpu_pascal -> ``p100``, onnxruntime_gpu_ampere -> ``a100``
  (the pool is named after the accelerator);
* ``Model`` -> a Variant: family = the architecture by name prefix (``resnet50_v1`` -> resnet, ``t5-base`` -> t5,
  ``prajjwal1/bert-mini`` -> bert, ``gpt2-large`` -> gpt2), size = the full name, accuracy = ``Accuracy`` / 100,
  params and gflops = the architecture's published parameter count and compute per item
  (``oltunes.sim.variant_params``, sources listed there; the file has neither);
* target: ``90th_pct`` latency of one batch (ms). The file has no p99; ``Max`` over its 1,000 trials is dominated
  by one-off stalls (e.g. 496 ms vs a 10 ms p50), so the 90th percentile is the closest robust tail figure.

Protocol, per seed: shuffle all rows; the first ``--n-train`` (200) are a stream each learner sees once,
predict-then-learn (progressive MAPE); then every learner predicts the remaining rows without learning
(held-out MAPE). Every learner models log latency from the shared ``oltunes.learner.encode`` features, with the
same running target standardisation. Learners: FM with FTML, Adam, FTRL-Proximal (the same dense FM and the same
online settings ``ONLINE``: replay of the recent stream, robust down-weighting; step size per seed from
``LR_GRID`` by progressive error, never held-out rows), the FM-FTML without replay/robust ("single pass"), FTML
at the paper's lr 0.0025, the same online learner without pairwise terms (k=0), river ``LinearRegression`` and a
per-configuration running mean (mean log latency of the same accelerator/variant/batch seen so far; the global
mean when unseen). Offline references (ridge with explicit crosses, gradient-boosted trees) fitted on the same
rows show what a batch fit reaches. Figures are medians over ``--seeds`` seeds; ``--curve`` repeats the split
at 100/200/300/400 observations.

Run: ``.venv/bin/python -m benchmarks.learner_accuracy --json benchmarks/results/learner_accuracy.json``
"""

from __future__ import annotations

import csv
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from river import linear_model, optim, preprocessing

from benchmarks import heldout_accelerator
from benchmarks.common import median, parser, print_table, write_json
from oltunes.config import get_settings
from oltunes.learner import FTML, FMRegressor, JobContext, encode
from oltunes.learner.fm import ONLINE_SETTINGS
from oltunes.sim.variant_params import published_gflops, published_params
from oltunes.types import Candidate, Variant

ACCEL = {"onnxruntime_cpu": "cpu", "onnxruntime_gpu_pascal": "p100", "onnxruntime_gpu_ampere": "a100"}
TARGET_COLUMN = "90th_pct"


# Family = architecture, by name prefix (order matters only for prefixes of one another; none here).
FAMILIES = ("albert", "bert", "roberta", "t5", "gpt2", "densenet", "efficientnet", "mobilenet", "resnest", "resnet",
            "yolov5")


def family_of(model: str) -> str:
    name = model.split("/")[-1].lower()
    for f in FAMILIES:
        if name.startswith(f):
            return f
    m = re.match(r"[a-z]+", name)
    return m.group(0) if m and len(m.group(0)) >= 2 else name


def load_rows(path: Path) -> list[tuple[Candidate, float]]:
    rows = []
    variants: dict[str, Variant] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            acc = ACCEL.get(r["Accel"])
            try:
                lat = float(r[TARGET_COLUMN])
            except ValueError:  # a few variants were not profiled on every accelerator (empty cells)
                continue
            if acc is None or not lat > 0:
                continue
            model = r["Model"]
            v = variants.get(model)
            if v is None:
                # Variant names may not hold "/": the simulator's spelling (``prajjwal1-bert-tiny``)
                name = model.replace("/", "-")
                v = variants[model] = Variant(family=family_of(model), name=name, size=name,
                                              accuracy=min(1.0, float(r["Accuracy"]) / 100.0),
                                              params=published_params(model), gflops=published_gflops(model))
            rows.append((Candidate(pool=acc, accelerator=acc, variant=v, batch_size=int(r["batchsize"])), lat))
    return rows


class RunningMean:
    """Mean log latency per (accelerator, variant, batch); the global mean for an unseen configuration."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}
        self.total = [0.0, 0]

    def predict_one(self, x: dict, key: str) -> float:
        s = self.sums.get(key)
        if s:
            return s[0] / s[1]
        return self.total[0] / self.total[1] if self.total[1] else 0.0

    def learn_one(self, x: dict, y: float, key: str) -> None:
        s = self.sums.setdefault(key, [0.0, 0])
        s[0] += y
        s[1] += 1
        self.total[0] += y
        self.total[1] += 1


def scaled(make: Callable[[int], object]) -> Callable[[int], object]:
    # Every regression learner gets the same target standardisation (running mean/std of log latency):
    # otherwise the first hundred steps only walk the intercept up to log(latency) ~ 3-6.
    return lambda seed: preprocessing.TargetStandardScaler(make(seed))


# The online FM's training settings (every FM learner gets the same, only the optimizer differs): each
# observation is learned once as it arrives, then ``replay`` more steps on observations drawn from the last
# ``replay_window`` (a bounded replay buffer; tapering after ``replay_horizon``), with residuals beyond
# ``robust`` x the running mean |residual| down-weighted (see FMRegressor). "(single pass)": neither.
ONLINE = dict(ONLINE_SETTINGS)


def fm(opt_factory: Callable[[], optim.base.Optimizer], **settings) -> Callable[[int], object]:
    # The FM standardises its targets itself (the same running mean/std as ``scaled``), because its replay
    # buffer must rescale old targets with the current statistics: behind river's wrapper each buffered
    # target would stay scaled with the statistics of the moment it arrived.
    settings = {"n_factors": 8, **ONLINE, **settings, "standardize": True}
    return lambda seed: FMRegressor(weight_optimizer=opt_factory(), latent_optimizer=opt_factory(), seed=seed,
                                    **settings)


SINGLE_PASS = {"replay": 0, "robust": None}
LR_GRID = (0.003, 0.01, 0.03, 0.1)
# FM optimizers: each gets the step size from LR_GRID with the lowest progressive (training-stream) error of
# the seed, i.e. chosen without looking at the held-out rows. The paper's FTML default is reported as is.
FM_OPTIMIZERS: dict[str, tuple[Callable[[float], optim.base.Optimizer], dict]] = {
    "fm-ftml": (lambda lr: FTML(lr=lr), {}),
    "fm-adam": (lambda lr: optim.Adam(lr=lr), {}),
    "fm-ftrl": (lambda lr: optim.FTRLProximal(alpha=lr * 10, l2=0.0), {}),  # alpha grid 0.03 .. 1
    "fm-ftml (single pass)": (lambda lr: FTML(lr=lr), SINGLE_PASS),
    # the same learner without pairwise terms: a linear model with the same replay / robust / scaling
    "linear-ftml (k=0, same settings)": (lambda lr: FTML(lr=lr), {"n_factors": 0}),
}
FIXED: dict[str, Callable[[int], object]] = {
    "fm-ftml(paper lr=0.0025)": fm(lambda: FTML(lr=0.0025)),
    "linear-regression": scaled(lambda seed: linear_model.LinearRegression()),
    "running-mean": lambda seed: RunningMean(),
}
LEARNERS = [*FM_OPTIMIZERS, *FIXED]
HEADLINE = "fm-ftml"


def fm_learner(name: str, lr: float) -> Callable[[int], object]:
    make_opt, settings = FM_OPTIMIZERS[name]
    return fm(lambda: make_opt(lr), **settings)


def evaluate(rows: list[tuple[Candidate, float]], seed: int, n_train: int) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(rows))
    ctx = JobContext()
    data = [(encode(ctx, rows[i][0]), rows[i][0].key, rows[i][1]) for i in order]
    train, hold = data[:n_train], data[n_train:]
    pair = [(rows[i][0].accelerator, rows[i][0].variant.name) for i in order]
    seen = set(pair[:n_train])
    # rows whose (accelerator, variant) pair was measured in training at another batch size: what the tuner
    # predicts most (other settings of configurations it has run)
    seen_mask = np.array([pair[n_train + j] in seen for j in range(len(hold))])
    out = {}
    for name in LEARNERS:
        if name in FM_OPTIMIZERS:
            runs = [(lr, _run(fm_learner(name, lr)(seed), train, hold, seen_mask))
                    for lr in LR_GRID]
            lr, res = min(runs, key=lambda r: r[1]["progressive"])
            out[name] = {**res, "lr": lr}
        else:
            out[name] = _run(FIXED[name](seed), train, hold, seen_mask)
    return out


def _run(model, train, hold, seen_mask) -> dict[str, float]:
    is_mean = isinstance(model, RunningMean)
    errs = []
    with np.errstate(all="ignore"):
        for x, key, y in train:
            p = model.predict_one(x, key) if is_mean else model.predict_one(x)
            errs.append(_ape(p, y))
            model.learn_one(x, math.log(y), key) if is_mean else model.learn_one(x, math.log(y))
        he = np.array([_ape(model.predict_one(x, key) if is_mean else model.predict_one(x), y) for x, key, y in hold])
    return {"progressive": 100 * float(np.mean(errs)), "holdout": 100 * float(he.mean()),
            "holdout_median_ape": 100 * float(np.median(he)),
            "holdout_seen_pairs": 100 * float(he[seen_mask].mean()) if seen_mask.any() else float("nan")}


def _ape(log_pred: float, y: float) -> float:
    # capped at 1e6 % so that one diverged learner does not turn the mean into inf/nan
    return min(abs(math.exp(min(log_pred, 50.0)) - y) / y, 1e4)


def worker_measurements(min_n: int = 20) -> tuple[list[tuple[dict, str, float]], str]:
    """The worker's own runs logged to MLflow (``Tracker.history()``, non-simulated), encoded; or a reason."""
    try:
        from oltunes.tracking import Tracker

        history = Tracker().history()
    except Exception as e:  # tracking not set up / MLflow store absent: this part is optional
        return [], f"skipped: MLflow history unavailable ({type(e).__name__}: {e})"
    data = [(encode(m, m.candidate), m.candidate.key, m.latency_p99_ms) for m in history if m.latency_p99_ms > 0]
    if len(data) < min_n:
        return [], (f"skipped: {len(data)} real worker measurements in MLflow (need >= {min_n}; run the batch "
                    f"inference flow on the zoo first)")
    return data, f"{len(data)} real worker measurements from MLflow"


def evaluate_worker(data: list[tuple[dict, str, float]]) -> dict[str, dict[str, float]]:
    """Oldest 70% of the worker's measurements as the stream, the newest 30% held out."""
    n_train = int(0.7 * len(data))
    train, hold = data[:n_train], data[n_train:]
    mask = np.ones(len(hold), dtype=bool)
    out = {name: _run(fm_learner(name, 0.03)(0), train, hold, mask) for name in FM_OPTIMIZERS}
    out.update({name: _run(make(0), train, hold, mask) for name, make in FIXED.items()})
    return out


def curve_point(rows: list[tuple[Candidate, float]], seed: int, n_train: int) -> dict[str, float]:
    """Held-out (and progressive) MAPE after ``n_train`` observations; FM step sizes chosen as in
    :func:`evaluate` (lowest progressive error on the stream), baselines as they are, offline references."""
    order = np.random.default_rng(seed).permutation(len(rows))
    ctx = JobContext()
    data = [(encode(ctx, rows[i][0]), rows[i][0].key, rows[i][1]) for i in order]
    train, hold = data[:n_train], data[n_train:]
    mask = np.ones(len(hold), dtype=bool)
    out = {}
    for name in (HEADLINE, "fm-ftml (single pass)"):
        res = min((_run(fm_learner(name, lr)(seed), train, hold, mask) for lr in LR_GRID),
                  key=lambda r: r["progressive"])
        out[name] = res["holdout"]
        out[f"{name} progressive"] = res["progressive"]
    for name in ("linear-regression", "running-mean"):
        out[name] = _run(FIXED[name](seed), train, hold, mask)["holdout"]
    out["offline ridge (reference)"] = offline_reference(rows, seed, n_train)
    out["offline GBM (reference)"] = offline_reference(rows, seed, n_train, "gbm")
    return out


def offline_reference(rows: list[tuple[Candidate, float]], seed: int, n_train: int, model: str = "ridge") -> float:
    """What a batch (offline, many passes) fit reaches on the same split: a reference for the online learners.

    ``ridge``: linear on log latency with hand-made crosses (variant x accelerator, family x accelerator,
    batch x accelerator, log batch x accelerator and x family-accelerator). ``gbm``: gradient-boosted trees on
    the learner's own ``encode`` features (trees find the crosses themselves).
    """
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import Ridge

    order = np.random.default_rng(seed).permutation(len(rows))
    xs = []
    for i in order:
        c = rows[i][0]
        if model == "gbm":
            xs.append(encode(JobContext(), c))
            continue
        lb = math.log2(c.batch_size)
        xs.append({f"v={c.variant.name}": 1, f"acc={c.accelerator}": 1, f"fam={c.variant.family}": 1, "lb": lb,
                   f"v_acc={c.variant.name}/{c.accelerator}": 1, f"fam_acc={c.variant.family}/{c.accelerator}": 1,
                   f"lb_acc={c.accelerator}": lb, f"b={c.batch_size}": 1,
                   f"lb_fam_acc={c.variant.family}/{c.accelerator}": lb, f"b_acc={c.batch_size}/{c.accelerator}": 1})
    y = np.log([rows[i][1] for i in order])
    a = DictVectorizer(sparse=model != "gbm").fit_transform(xs)
    reg = (GradientBoostingRegressor(n_estimators=300, max_depth=3, learning_rate=0.05, random_state=seed)
           if model == "gbm" else Ridge(alpha=0.1))
    pred = reg.fit(a[:n_train], y[:n_train]).predict(a[n_train:])
    return 100 * float(np.mean(np.abs(np.exp(pred - y[n_train:]) - 1)))


def held_out_accelerator(rows: list[tuple[Candidate, float]], seeds: int, share: float) -> dict:
    """The held-out-accelerator split (benchmarks/heldout_accelerator.py): print its table, return its summary."""
    per_seed = [heldout_accelerator.evaluate(rows, s, share) for s in range(seeds)]
    out = heldout_accelerator.summarise(per_seed)
    sp = out["_split"]
    print_table(f"held-out accelerator: train CPU + Pascal + {share:.0%} of Ampere ({sp['train']} rows, "
                f"{sp['train_ampere']} Ampere), test {sp['test']} Ampere rows; {TARGET_COLUMN} latency, "
                f"median of {seeds} seeds (targets: tuner MAPE <= 20%, median APE <= 10%)",
                ["predictor", "MAPE %", "median APE %", "rows scored"],
                [[n, r["mape"], r["median_ape"], f"{r['coverage']:.0%}"] for n, r in out.items()
                 if not n.startswith("_")])
    print("goals: " + " ".join(f"{k}:{'Y' if v else 'n'}" for k, v in out["_goals"].items()))
    return {**out, "per_seed": per_seed, "ampere_share": share}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--curve", type=int, nargs="*", default=[100, 200, 300, 400],
                   help="also report held-out (and FM progressive) MAPE after these many observations")
    p.add_argument("--split", choices=("random", "accelerator", "both", "source-accelerator"), default="both",
                   help="random: the stream/held-out split above; accelerator: the held-out-accelerator split; "
                        "source-accelerator: a named GPU of NVIDIA's tables held out, the rest from other "
                        "accelerators and sources (benchmarks/source_accelerator.py)")
    p.add_argument("--ampere-share", type=float, default=0.1, help="share of the Ampere rows trained on")
    args = p.parse_args(argv)
    path = get_settings().shared_data / "proteus" / "aggregate_profiled.csv"
    if not path.is_file():
        print(f"public data not found: {path} (it sits beside the repo as ../shared/data)", file=sys.stderr)
        return 2
    if args.split == "source-accelerator":
        from benchmarks import source_accelerator

        res = source_accelerator.report(source_accelerator.load_rows(get_settings().shared_data), args.seeds)
        write_json(args.json, {"split": "source-accelerator", **res})
        return 0
    rows = load_rows(path)
    accel = held_out_accelerator(rows, args.seeds, args.ampere_share) if args.split != "random" else None
    if args.split == "accelerator":
        write_json(args.json, {"heldout_accelerator": accel, "seeds": args.seeds, "target": TARGET_COLUMN})
        return 0
    per_seed = [evaluate(rows, s, args.n_train) for s in range(args.seeds)]
    summary = {name: {k: median([r[name][k] for r in per_seed]) for k in per_seed[0][name]} for name in LEARNERS}
    for name in FM_OPTIMIZERS:
        summary[name]["lr_per_seed"] = [r[name]["lr"] for r in per_seed]
    best = min(summary, key=lambda n: summary[n]["holdout"])
    print_table(f"p99-ish ({TARGET_COLUMN}) latency MAPE %, {len(rows)} rows, {args.n_train} train, "
                f"median of {args.seeds} seeds",
                ["learner", "lr (per seed)", "progressive", "holdout", "holdout median APE", "holdout, seen pairs"],
                [[n, ",".join(f"{x:g}" for x in s.get("lr_per_seed", [])), s["progressive"], s["holdout"],
                  s["holdout_median_ape"], s["holdout_seen_pairs"]] for n, s in summary.items()])
    ref = median([offline_reference(rows, seed, args.n_train) for seed in range(args.seeds)])
    ref_gbm = median([offline_reference(rows, seed, args.n_train, "gbm") for seed in range(args.seeds)])
    print(f"references, not online, fitted on the same {args.n_train} rows: ridge regression with explicit "
          f"variant/family x accelerator x batch crosses {ref:.1f}%, gradient-boosted trees on the same features "
          f"{ref_gbm:.1f}% held-out MAPE")
    print(f"best held-out: {best}; {HEADLINE} held-out MAPE {summary[HEADLINE]['holdout']:.1f}% (goal <= 10%)")
    curve = {}
    for n in args.curve:
        if n >= len(rows):
            continue
        per = [curve_point(rows, seed, n) for seed in range(args.seeds)]
        curve[n] = {k: median([r[k] for r in per]) for k in per[0]}
    if curve:
        names = list(next(iter(curve.values())))
        print_table("held-out MAPE % by number of observations (median over seeds)", ["n_train", *names],
                    [[n, *(c[k] for k in names)] for n, c in curve.items()])
    wdata, wnote = worker_measurements()
    worker: dict = {"note": wnote}
    if wdata:
        wres = evaluate_worker(wdata)
        worker.update(n=len(wdata), mape_holdout={k: v["holdout"] for k, v in wres.items()},
                      mape_progressive={k: v["progressive"] for k, v in wres.items()})
        print_table(f"this machine's worker runs: {wnote}, oldest 70% train", ["learner", "progressive", "holdout"],
                    [[k, v["progressive"], v["holdout"]] for k, v in wres.items()])
    else:
        print(f"worker measurements: {wnote}")
    write_json(args.json, {
        "heldout_accelerator": accel,
        "worker": worker,
        "mape_holdout_by_n_train": curve,
        "n_train": args.n_train, "n_rows": len(rows), "n_holdout": len(rows) - args.n_train, "seeds": args.seeds,
        "target": TARGET_COLUMN, "headline": HEADLINE, "best_holdout": best,
        "mape_holdout": {n: s["holdout"] for n, s in summary.items()},
        "mape_progressive": {n: s["progressive"] for n, s in summary.items()},
        "median_ape_holdout": {n: s["holdout_median_ape"] for n, s in summary.items()},
        "mape_holdout_seen_pairs": {n: s["holdout_seen_pairs"] for n, s in summary.items()},
        "mape_holdout_offline_ridge_reference": ref,
        "mape_holdout_offline_gbm_reference": ref_gbm,
        "online_settings": ONLINE,
        "lr_chosen": {n: summary[n]["lr_per_seed"] for n in FM_OPTIMIZERS}, "lr_grid": list(LR_GRID),
        "per_seed": per_seed,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
