"""The grounded world's performance model: batch latency of a model on an accelerator from a few interpretable
parameters, fitted to the profile store (:mod:`oltunes.sim.profile_store`).

For a model with ``F`` GFLOPs per item and ``W`` MB of weights, on accelerator ``a`` at precision ``p`` with runtime
class ``r``, a batch of ``b`` items takes

    t(b) = o_a + (b + h_a) * F * k_m / (u_a * g_p * g_r * P_ap) + W_p / BW_a      [ms]

* ``P_ap``, ``BW_a``: the datasheet's peak rate at ``p`` (TFLOP/s) and memory bandwidth (GB/s)
  (:mod:`oltunes.sim.world_specs`); ``W_p``: the weights at ``p``'s width (read once per batch);
* ``o_a``: fixed per-batch overhead (launch, transfer) in ms, times a factor per overhead class (a Triton server's
  network and queue, TensorRT, XLA, a training step; a framework or ONNX Runtime in-process = 1);
* ``h_a``: the batch-efficiency curve: a batch of ``b`` keeps the device ``b / (b + h_a)`` busy, so per-item time
  falls towards its floor as the batch grows;
* ``u_a``: the share of the peak this accelerator reaches on dense models;
* ``g_p``, ``g_r``: how much of the step to a faster precision or a compiled runtime is realised (FP32 and plain
  framework execution = 1); a training step costs ``TRAINING_COST`` forward passes (Kaplan et al. 2020);
* ``k_m``: how much harder the model is than its FLOPs say (depthwise convolutions, attention); ResNet-50 = 1.

Offline throughput (MLPerf) is the limit ``b -> inf``. Every parameter is fitted by least squares on log latency /
log throughput, with weak priors that keep an accelerator or model seen in few rows near typical values; an
accelerator with no row is *derived* from its datasheet at the median fitted ``o``, ``h``, ``u``, a model with no row
from its FLOPs and weights at its family's median ``k`` (or 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from oltunes.atomic import atomic_write_text
from oltunes.errors import DataError
from oltunes.sim.world_specs import BYTES_PER_WEIGHT, DATASHEETS, STORE_MODELS, family_of, model_size

PRECISIONS = ("tf32", "fp16", "int8")  # fp32 is the reference
RUNTIMES = ("tensorrt", "onnxruntime", "xla")  # plain framework execution is the reference
# fixed-cost classes; the reference is a framework or ONNX Runtime in-process (Proteus's ONNX Runtime overhead is its
# unidentified GPUs' own o_a: its set-up, not the runtime's)
OVERHEADS = ("triton", "tensorrt", "xla", "training")
TRAINING_COST = 3.0  # forward + backward ~ 3 forward passes
UNKNOWN_SHEET = (10.0, 500.0)  # nominal peak TFLOP/s and GB/s for an unidentified GPU: its u_a absorbs the truth
_PRIOR = {"o": (math.log(1.0), 2.0), "h": (math.log(4.0), 1.0), "u": (math.log(0.3), 1.0), "k": (0.0, 1.5),
          "g": (0.0, 1.0)}
PRIOR_WEIGHT = 0.3  # how much a prior counts against one row's log error


def runtime_class(runtime: str) -> str:
    rt = str(runtime).lower()
    if "training" in rt:
        return "training"
    if "tensorrt" in rt or "tf-trt" in rt or "trt" in rt:
        return "tensorrt"
    if "onnxruntime" in rt:
        return "onnxruntime"
    if "xla" in rt:
        return "xla"
    return "framework"


def overhead_class(runtime: str) -> str:
    """Whose fixed per-batch cost a row pays: a Triton server's (network, queue) or its runtime's."""
    if str(runtime).lower().startswith("triton"):
        return "triton"
    rc = runtime_class(runtime)
    return rc if rc in OVERHEADS else "framework"


def _sheet(acc: str, precision: str) -> tuple[float, float]:
    s = DATASHEETS.get(acc)
    return (s.peak(precision), s.bandwidth_gbs) if s else UNKNOWN_SHEET


def observations(store: pd.DataFrame) -> pd.DataFrame:
    """The store rows the model can explain: GPU rows of models with known compute, with a batch latency, a
    throughput at a batch (training), or an offline throughput (MLPerf); one target per row."""
    df = store[~store["accelerator"].astype(str).str.startswith("cpu")].copy()
    for c in ("batch", "concurrency", "latency_p50_ms", "latency_avg_ms", "latency_p90_ms", "throughput_items_s"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    df = df[df["precision"].isin(("fp32",) + PRECISIONS) & df["scenario"].isin(
        ("offline-batch", "offline", "singlestream", "training"))]
    sizes = df["model"].map(model_size)
    df = df[sizes.notna()].copy()
    sz = np.array(list(sizes[sizes.notna()]), dtype=float).reshape(-1, 2)
    df["gflops"] = sz[:, 0]
    df["weight_mb"] = sz[:, 1] * df["precision"].map(BYTES_PER_WEIGHT).to_numpy(float) / 4
    df["rclass"] = df["runtime"].map(runtime_class)
    df["oclass"] = df["runtime"].map(overhead_class)
    df["family"] = df["model"].map(family_of)
    lat = df["latency_p50_ms"].fillna(df["latency_avg_ms"]).fillna(df["latency_p90_ms"])
    df["kind"] = np.where(df["scenario"] == "training", "throughput_at_batch",
                          np.where(df["scenario"] == "offline", "throughput_max", "latency"))
    df["target"] = np.where(df["kind"] == "latency", lat, df["throughput_items_s"])
    df = df[np.isfinite(df["target"]) & (df["target"] > 0)]
    df = df[(df["kind"] == "throughput_max") | (df["batch"] >= 1)]
    return df.reset_index(drop=True)


@dataclass
class WorldFit:
    """Fitted parameters (logs) and what they were fitted from."""

    acc: dict[str, tuple[float, float, float]]  # accelerator -> (log o, log h, log u)
    precision: dict[str, float]  # log g_p
    runtime: dict[str, float]  # log g_r
    model: dict[str, float]  # log k_m
    overhead: dict[str, float] = field(default_factory=dict)  # log multiplier of o_a per overhead class
    residuals: pd.DataFrame = field(default_factory=pd.DataFrame)  # observations + log(pred / obs)

    def accel_params(self, acc: str) -> tuple[tuple[float, float, float], bool]:
        """(log o, log h, log u) and whether they were fitted (False: derived from the datasheet and medians)."""
        if acc in self.acc:
            return self.acc[acc], True
        gpus = [v for k, v in self.acc.items() if k in DATASHEETS]
        med = tuple(float(np.median([v[i] for v in gpus])) for i in range(3)) if gpus else (0.0, 2.0, -1.2)
        return med, False  # type: ignore[return-value]

    def model_factor(self, model: str) -> tuple[float, bool]:
        """log k of a model and whether it was fitted (False: the median of its family's store models, or 0;
        Proteus's variants are not used: their inputs, e.g. sequence lengths, are not stated)."""
        if model in self.model:
            return self.model[model], True
        fam = [v for k, v in self.model.items() if k in STORE_MODELS and family_of(k) == family_of(model)]
        return (float(np.median(fam)) if fam else 0.0), False

    def batch_ms(self, model: str, acc: str, precision: str, rclass: str, batch: np.ndarray) -> np.ndarray:
        """Predicted batch latency (ms) for each batch size (inference, no training cost)."""
        size = model_size(model)
        if size is None:
            raise ValueError(f"model {model!r} has no stated compute")
        compute, mem, over = self._parts(size, model, acc, precision, rclass)
        b = np.asarray(batch, dtype=float)
        return over + compute[0] * (b + compute[1]) + mem

    def compute_fraction(self, model: str, acc: str, precision: str, rclass: str, batch: np.ndarray) -> np.ndarray:
        """Share of the batch time spent computing (the rest is overhead and weight reads)."""
        size = model_size(model)
        compute, mem, over = self._parts(size, model, acc, precision, rclass)  # type: ignore[arg-type]
        b = np.asarray(batch, dtype=float)
        c = compute[0] * (b + compute[1])
        return c / (over + c + mem)

    def _parts(self, size, model, acc, precision, rclass):
        (lo, lh, lu), _ = self.accel_params(acc)
        lk, _ = self.model_factor(model)
        peak, bw = _sheet(acc, precision)
        eff = math.exp(lu + self.precision.get(precision, 0.0) + self.runtime.get(rclass, 0.0)) * peak
        per_item = size[0] * math.exp(lk) / eff
        mem = size[1] * BYTES_PER_WEIGHT.get(precision, 4) / 4 / bw
        return (per_item, math.exp(lh)), mem, math.exp(lo + self.overhead.get(overhead_class(rclass), 0.0))


def _design(obs: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per-row constants of the observations (computed once per fit, not per evaluation)."""
    sheets = [_sheet(a, p) for a, p in zip(obs["accelerator"], obs["precision"])]
    kind = obs["kind"].to_numpy()
    return {"peak": np.array([s[0] for s in sheets]), "bw": np.array([s[1] for s in sheets]),
            "gflops": obs["gflops"].to_numpy(float), "mem_mb": obs["weight_mb"].to_numpy(float),
            "b": obs["batch"].fillna(1).to_numpy(dtype=float), "lat": kind == "latency",
            "tmax": kind == "throughput_max", "cost": np.where(kind == "throughput_at_batch", TRAINING_COST, 1.0)}


def _evaluate(d: dict[str, np.ndarray], o, h, u, k, g) -> np.ndarray:
    """Predicted targets from per-row log parameters (arrays aligned with the design)."""
    per_item = d["gflops"] * np.exp(k) / (np.exp(u + g) * d["peak"])
    t = np.exp(o) + per_item * (d["b"] + np.exp(h)) + d["mem_mb"] / d["bw"]
    return np.where(d["lat"], t, np.where(d["tmax"], 1000.0 / per_item, 1000.0 * d["b"] / (d["cost"] * t)))


def _predict(obs: pd.DataFrame, fit: WorldFit) -> np.ndarray:
    """Each observation's predicted target (same unit as ``obs.target``)."""
    params = {a: fit.accel_params(a)[0] for a in obs["accelerator"].unique()}
    o, h, u = (np.array([params[a][i] for a in obs["accelerator"]]) for i in range(3))
    o = o + obs["oclass"].map(lambda c: fit.overhead.get(c, 0.0)).to_numpy(float)
    kf = {m: fit.model_factor(m)[0] for m in obs["model"].unique()}
    k = obs["model"].map(kf).to_numpy(float)
    g = (obs["precision"].map(lambda p: fit.precision.get(p, 0.0)).to_numpy(float)
         + obs["rclass"].map(lambda r: fit.runtime.get(r, 0.0)).to_numpy(float))
    return _evaluate(_design(obs), o, h, u, k, g)


def fit_world(store: pd.DataFrame) -> WorldFit:
    """Least-squares fit of the model's parameters to every explainable row of ``store``."""
    obs = observations(store)
    accs = sorted(obs["accelerator"].unique())
    models = sorted(m for m in obs["model"].unique() if m != "resnet50")
    precs = [p for p in PRECISIONS if (obs["precision"] == p).any()]
    rts = [r for r in RUNTIMES if (obs["rclass"] == r).any()]
    ocs = [c for c in OVERHEADS if (obs["oclass"] == c).any()]
    n_acc, n_p, n_r = 3 * len(accs), len(precs), len(rts) + len(ocs)
    target = np.log(obs["target"].to_numpy())
    d = _design(obs)
    ai = obs["accelerator"].map({a: i for i, a in enumerate(accs)}).to_numpy()
    mi = obs["model"].map({m: i + 1 for i, m in enumerate(models)}).fillna(0).to_numpy(int)  # 0 = resnet50
    pi = obs["precision"].map({p: i + 1 for i, p in enumerate(precs)}).fillna(0).to_numpy(int)  # 0 = fp32
    ri = obs["rclass"].map({r: i + 1 for i, r in enumerate(rts)}).fillna(0).to_numpy(int)  # 0 = framework
    oi = obs["oclass"].map({c: i + 1 for i, c in enumerate(ocs)}).fillna(0).to_numpy(int)
    prior_mean = np.concatenate([np.tile([_PRIOR["o"][0], _PRIOR["h"][0], _PRIOR["u"][0]], len(accs)),
                                 np.zeros(n_p + n_r + len(models))])
    prior_sd = np.concatenate([np.tile([_PRIOR["o"][1], _PRIOR["h"][1], _PRIOR["u"][1]], len(accs)),
                               np.full(n_p + n_r, _PRIOR["g"][1]), np.full(len(models), _PRIOR["k"][1])])

    def split(x: np.ndarray):
        a = x[:n_acc].reshape(-1, 3)
        p = np.concatenate([[0.0], x[n_acc:n_acc + n_p]])
        r = np.concatenate([[0.0], x[n_acc + n_p:n_acc + n_p + len(rts)]])
        oc = np.concatenate([[0.0], x[n_acc + n_p + len(rts):n_acc + n_p + n_r]])
        m = np.concatenate([[0.0], x[n_acc + n_p + n_r:]])
        return a, p, r, oc, m

    def residuals(x: np.ndarray) -> np.ndarray:
        a, p, r, oc, m = split(x)
        pred = _evaluate(d, a[ai, 0] + oc[oi], a[ai, 1], a[ai, 2], m[mi], p[pi] + r[ri])
        return np.concatenate([np.log(pred) - target, PRIOR_WEIGHT * (x - prior_mean) / prior_sd])

    sol = least_squares(residuals, prior_mean.copy(), method="trf", max_nfev=300)
    a, p, r, oc, m = split(sol.x)
    fit = WorldFit({acc: tuple(float(v) for v in a[i]) for i, acc in enumerate(accs)},
                   {q: float(p[i + 1]) for i, q in enumerate(precs)}, {q: float(r[i + 1]) for i, q in enumerate(rts)},
                   {"resnet50": 0.0, **{q: float(m[i + 1]) for i, q in enumerate(models)}},
                   {q: float(oc[i + 1]) for i, q in enumerate(ocs)})
    fit.residuals = obs.assign(log_err=np.log(_predict(obs, fit)) - target)
    return fit


def predict_rows(fit: WorldFit, rows: pd.DataFrame) -> pd.DataFrame:
    """Observations of ``rows`` (store rows) with the fit's prediction (``predicted``) beside the measured target."""
    obs = observations(rows)
    return obs.assign(predicted=_predict(obs, fit))


FIT_FILE = Path(__file__).resolve().parents[1] / "data" / "world_fit.json"


def save_fit(fit: WorldFit, sigma: dict[str, float], store_summary: dict[str, int], path: Path = FIT_FILE) -> None:
    """Write the fitted parameters (logs) and the estimated sigmas atomically (derived numbers, not store rows)."""
    doc = {"derived_from": "oltunes.sim.world.fit_world over the profile store (python -m benchmarks.world_fidelity "
                           "--refit)", "store": store_summary, "sigma": sigma,
           "accelerators": {k: list(v) for k, v in sorted(fit.acc.items())}, "precision": fit.precision,
           "runtime": fit.runtime, "overhead": fit.overhead, "models": dict(sorted(fit.model.items()))}
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=False) + "\n")


def load_fit(path: Path = FIT_FILE) -> tuple[WorldFit, dict[str, float]]:
    """The shipped fit and its per-level sigmas."""
    try:
        doc = json.loads(path.read_text())
        fit = WorldFit({k: tuple(v) for k, v in doc["accelerators"].items()}, doc["precision"], doc["runtime"],
                       doc["models"], doc.get("overhead", {}))
        return fit, {k: float(v) for k, v in doc["sigma"].items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"grounded world: cannot read {path.name}: {type(e).__name__}; rerun "
                        "python -m benchmarks.world_fidelity --refit") from None


def sim_precision(accelerator: str) -> str:
    """The precision an FP32 ONNX Runtime model really computes at on ``accelerator`` (TF32 where tensor cores do it)."""
    s = DATASHEETS.get(accelerator)
    return "tf32" if s is not None and s.tf32 > s.fp32 else "fp32"
