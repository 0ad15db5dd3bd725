"""The grounded world's performance model: batch latency of a model on an accelerator from a few interpretable
parameters, fitted to the profile store (:mod:`oltunes.sim.profile_store`).

For a model with ``F`` GFLOPs per item and ``W`` MB of weights, on accelerator ``a`` at precision ``p`` with runtime
class ``r``, a batch of ``b`` items takes

    t(b) = e_a * (S_stack + [Triton] S_triton) + [Triton] b * I * c_net
           + (b + h_a) * F * k_m / (u_a * g_r * P_a * (P_ap / P_a) ** gamma_p) + W_p / BW_a                  [ms]

* ``P_a``, ``P_ap``, ``BW_a``: the datasheet's FP32 and ``p`` peak rates (TFLOP/s) and memory bandwidth (GB/s)
  (:mod:`oltunes.sim.world_specs`); ``W_p``: the weights at ``p``'s width (read once per batch);
* ``S_stack``: the fixed per-batch cost (ms) of the row's serving set-up, declared by its source (:func:`setup_of`):
  an in-process framework (PyTorch / TensorFlow eager), ONNX Runtime in-process, TensorFlow + XLA, a bare TensorRT
  engine (MLPerf's C++ harness), a training step; ``S_triton`` is what a Triton server adds on top of its backend's
  own (request handling, queueing). These are device-independent (host-side dispatch); ``e_a`` is the
  accelerator's deviation from them (prior: 1; wide for an unidentified GPU, whose unknown set-up it absorbs). A
  held-out source's set-up is thus predicted from the other sources that ran the same parts (a bare TensorRT engine
  = NVIDIA's Triton/TensorRT rows less the Triton server cost, which its Triton/PyTorch rows against its plain
  PyTorch rows measure); a set-up no other source ran keeps its prior (``STACK_PRIOR_MS``, labelled estimates);
* ``h_a``: the batch-efficiency curve: a batch of ``b`` keeps the device ``b / (b + h_a)`` busy, so per-item time
  falls towards its floor as the batch grows;
* ``u_a``: the share of the peak this accelerator reaches on dense models;
* ``gamma_p``: the share (in log) of the datasheet's speed-up of precision ``p`` over FP32 that is realised (0: none,
  1: all; per precision, the same on every GPU, so a GPU's own tensor-core ratio carries it);
* ``g_r``: how much faster a compiled runtime's compute is than plain framework execution (= 1); a training step
  costs ``TRAINING_COST`` forward passes (Kaplan et al. 2020);
* ``I``, ``c_net``: a Triton request's input per item (MB, :func:`oltunes.sim.world_specs.input_mb`) and its cost
  (ms per MB, fitted: the request's copies and transfer);
* ``k_m``: how much harder the model is than its FLOPs say (depthwise convolutions, attention); ResNet-50 = 1.

Offline throughput (MLPerf) is the limit ``b -> inf``. Every parameter is fitted by least squares on log latency /
log throughput, with weak priors that keep an accelerator or model seen in few rows near typical values; an
accelerator with no row is *derived* from its datasheet at the median fitted ``e``, ``h``, ``u`` of the GPUs of its
architecture (:data:`oltunes.sim.world_specs.ARCHITECTURE`; of every GPU when none of its architecture was fitted), a
model with no row from its FLOPs and weights at its family's median ``k`` (or 1); a precision no row used keeps
``gamma``'s prior (0.5).
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
from oltunes.sim.world_specs import (ARCHITECTURE, BYTES_PER_WEIGHT, DATASHEETS, STORE_MODELS, family_of, input_mb,
                                     model_size)

PRECISIONS = ("tf32", "fp16", "int8")  # fp32 is the reference
RUNTIMES = ("tensorrt", "onnxruntime", "xla")  # plain framework execution is the reference
# Fixed per-batch cost of each serving set-up, ms: the prior (estimates, not fitted to any row: host-side dispatch of
# a ~100-layer network at ~30 us per framework op, ~3 us per kernel of a compiled engine; a Triton request's handling
# and queueing ~1 ms; a training step's backward and optimizer dispatch ~3x a forward's); log-sd 1 (a factor e).
STACK_PRIOR_MS = {"framework": 3.0, "onnxruntime": 3.0, "xla": 3.0, "tensorrt": 0.3, "training": 10.0,
                  "triton": 1.0, "triton_per_mb": 1.0}  # the last: ms per MB of request input (~1 GB/s, gRPC copies)
STACK_PRIOR_SD = 1.0
PROTEUS_PREFIX = "proteus/"  # Proteus's rows' model names in the fit
PROTEUS_ANCHOR = "resnet50_v1"  # Proteus's ResNet-50 v1 = the store's ResNet-50 (k = 0)
TRAINING_COST = 3.0  # forward + backward ~ 3 forward passes
UNKNOWN_SHEET = (10.0, 500.0)  # nominal peak TFLOP/s and GB/s for an unidentified GPU: its u_a absorbs the truth
# e_a (log): a named GPU's host-side cost is its set-up's (sd 0.3); an unidentified GPU's set-up is unknown (sd 2)
_PRIOR = {"o": (0.0, 0.3), "o_unknown": (0.0, 2.0), "h": (math.log(4.0), 1.0), "u": (math.log(0.3), 1.0),
          "k": (0.0, 1.5), "g": (0.0, 0.5), "gamma": (0.5, 0.5)}
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


def setup_of(runtime: str, source: str = "") -> tuple[str, str, bool]:
    """A row's declared set-up: (efficiency class, fixed-cost stack, behind a Triton server?).

    MLPerf's closed GPU results all run NVIDIA's C++ harness on TensorRT engines (some submissions name only the
    CUDA version): a bare TensorRT stack. ``triton/<backend>`` = the backend's stack plus Triton's own cost.
    PyTorch / TensorFlow eager = the framework stack; TensorFlow + XLA its own; ONNX Runtime in-process its own.
    """
    rt = str(runtime).lower()
    if source == "mlperf-inference":
        return "tensorrt", "tensorrt", False
    server = rt.startswith("triton/")
    rc = runtime_class(rt)
    stack = {"framework": "framework", "tensorrt": "tensorrt", "onnxruntime": "onnxruntime", "xla": "xla",
             "training": "training"}[rc]
    return rc, stack, server


def _sheet(acc: str, precision: str) -> tuple[float, float, float]:
    """(FP32 peak TFLOP/s, log of the datasheet's speed-up at ``precision`` over FP32, GB/s)."""
    s = DATASHEETS.get(acc)
    if s is None:
        return UNKNOWN_SHEET[0], 0.0, UNKNOWN_SHEET[1]
    return s.fp32, math.log(s.peak(precision) / s.fp32), s.bandwidth_gbs


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
    setups = [setup_of(r, s) for r, s in zip(df["runtime"], df["source"])]
    df["rclass"] = [x[0] for x in setups]
    df["stack"] = [x[1] for x in setups]
    df["server"] = [x[2] for x in setups]
    df["input_mb"] = [input_mb(m, p) for m, p in zip(df["model"], df["precision"])]
    df["family"] = df["model"].map(family_of)
    # Proteus's variants keep their own k (their inputs are not stated, and its ONNX Runtime set-up runs some
    # families, e.g. EfficientNet's depthwise convolutions, unlike a framework): never shared with a store model
    df["model"] = np.where(df["source"] == "proteus", PROTEUS_PREFIX + df["model"].astype(str), df["model"])
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

    acc: dict[str, tuple[float, float, float]]  # accelerator -> (log e, log h, log u)
    precision: dict[str, float]  # gamma_p: share (in log) of the datasheet's speed-up over FP32 realised
    runtime: dict[str, float]  # log g_r
    model: dict[str, float]  # log k_m
    stack: dict[str, float] = field(default_factory=dict)  # log S (ms) per set-up stack, and "triton"
    residuals: pd.DataFrame = field(default_factory=pd.DataFrame)  # observations + log(pred / obs)

    def accel_params(self, acc: str) -> tuple[tuple[float, float, float], bool]:
        """(log e, log h, log u) and whether they were fitted (False: derived from the datasheet and the medians of
        the fitted GPUs of its architecture, or of every fitted GPU when none of its architecture was)."""
        if acc in self.acc:
            return self.acc[acc], True
        gpus = [v for k, v in self.acc.items() if k in DATASHEETS]
        kin = [v for k, v in self.acc.items() if k in DATASHEETS and ARCHITECTURE.get(k) == ARCHITECTURE.get(acc)]
        gpus = kin or gpus
        med = tuple(float(np.median([v[i] for v in gpus])) for i in range(3)) if gpus else (0.0, 2.0, -1.2)
        return med, False  # type: ignore[return-value]

    def model_factor(self, model: str) -> tuple[float, bool]:
        """log k of a simulator variant (a Proteus name: its k from Proteus's rows relative to Proteus's ResNet-50,
        which is the store's ResNet-50, k = 0: Proteus's relative shape under ONNX Runtime) or a store model, and
        whether it was fitted (:meth:`store_model_factor`)."""
        anchor = self.model.get(PROTEUS_PREFIX + PROTEUS_ANCHOR)
        if PROTEUS_PREFIX + model in self.model and anchor is not None:
            return self.model[PROTEUS_PREFIX + model] - anchor, True
        return self.store_model_factor(model)

    def store_model_factor(self, model: str) -> tuple[float, bool]:
        """log k of a store row's model and whether it was fitted (False: the median of its family's fitted store
        models, or 0; Proteus's variants are not used: their inputs, e.g. sequence lengths, are not stated)."""
        if model in self.model:
            return self.model[model], True
        fam = [v for k, v in self.model.items() if k in STORE_MODELS and family_of(k) == family_of(model)]
        return (float(np.median(fam)) if fam else 0.0), False

    def stack_ms(self, stack: str, server: bool) -> float:
        """The set-up's fixed per-batch cost (ms) before the accelerator's deviation; its prior if never fitted."""
        def one(name: str) -> float:
            return math.exp(self.stack.get(name, math.log(STACK_PRIOR_MS[name])))
        return one(stack) + (one("triton") if server else 0.0)

    def batch_ms(self, model: str, acc: str, precision: str, runtime: str, batch: np.ndarray) -> np.ndarray:
        """Predicted batch latency (ms) for each batch size (inference, no training cost) under ``runtime``
        (a runtime name, e.g. ``onnxruntime``, ``pytorch``, ``triton/tensorrt``)."""
        size = model_size(model)
        if size is None:
            raise ValueError(f"model {model!r} has no stated compute")
        compute, mem, over = self._parts(size, model, acc, precision, runtime)
        b = np.asarray(batch, dtype=float)
        return over + self._sent_ms(model, precision, runtime) * b + compute[0] * (b + compute[1]) + mem

    def compute_fraction(self, model: str, acc: str, precision: str, runtime: str, batch: np.ndarray) -> np.ndarray:
        """Share of the batch time spent computing (the rest is overhead and weight reads)."""
        size = model_size(model)
        compute, mem, over = self._parts(size, model, acc, precision, runtime)  # type: ignore[arg-type]
        b = np.asarray(batch, dtype=float)
        c = compute[0] * (b + compute[1])
        return c / (over + self._sent_ms(model, precision, runtime) * b + c + mem)

    def _sent_ms(self, model: str, precision: str, runtime: str) -> float:
        """Per item: what a Triton request's input costs (0 in-process)."""
        if not setup_of(runtime)[2]:
            return 0.0
        return input_mb(model, precision) * math.exp(_stack_log(self, "triton_per_mb"))

    def _parts(self, size, model, acc, precision, runtime):
        (le, lh, lu), _ = self.accel_params(acc)
        lk, _ = self.model_factor(model)
        rclass, stack, server = setup_of(runtime)
        peak, lr, bw = _sheet(acc, precision)
        gamma = self.precision.get(precision, _PRIOR["gamma"][0])
        eff = math.exp(lu + gamma * lr + self.runtime.get(rclass, 0.0)) * peak
        per_item = size[0] * math.exp(lk) / eff
        mem = size[1] * BYTES_PER_WEIGHT.get(precision, 4) / 4 / bw
        return (per_item, math.exp(lh)), mem, math.exp(le) * self.stack_ms(stack, server)


def _design(obs: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per-row constants of the observations (computed once per fit, not per evaluation)."""
    sheets = [_sheet(a, p) for a, p in zip(obs["accelerator"], obs["precision"])]
    kind = obs["kind"].to_numpy()
    return {"peak": np.array([s[0] for s in sheets]), "lr": np.array([s[1] for s in sheets]),
            "bw": np.array([s[2] for s in sheets]),
            "gflops": obs["gflops"].to_numpy(float), "mem_mb": obs["weight_mb"].to_numpy(float),
            "b": obs["batch"].fillna(1).to_numpy(dtype=float), "lat": kind == "latency",
            "tmax": kind == "throughput_max", "cost": np.where(kind == "throughput_at_batch", TRAINING_COST, 1.0),
            "server": obs["server"].to_numpy(bool), "input_mb": obs["input_mb"].to_numpy(float)}


def _evaluate(d: dict[str, np.ndarray], e, s, s_triton, s_net, h, u, k, g, gamma) -> np.ndarray:
    """Predicted targets from per-row log parameters (arrays aligned with the design)."""
    per_item = d["gflops"] * np.exp(k) / (np.exp(u + g + gamma * d["lr"]) * d["peak"])
    over = np.exp(e) * (np.exp(s) + np.where(d["server"], np.exp(s_triton), 0.0))
    sent = np.where(d["server"], np.exp(s_net) * d["input_mb"] * d["b"], 0.0)  # a Triton request's input
    t = over + sent + per_item * (d["b"] + np.exp(h)) + d["mem_mb"] / d["bw"]
    return np.where(d["lat"], t, np.where(d["tmax"], 1000.0 / per_item, 1000.0 * d["b"] / (d["cost"] * t)))


def _stack_log(fit: WorldFit, name: str) -> float:
    return fit.stack.get(name, math.log(STACK_PRIOR_MS[name]))


def _predict(obs: pd.DataFrame, fit: WorldFit) -> np.ndarray:
    """Each observation's predicted target (same unit as ``obs.target``)."""
    params = {a: fit.accel_params(a)[0] for a in obs["accelerator"].unique()}
    e, h, u = (np.array([params[a][i] for a in obs["accelerator"]]) for i in range(3))
    s = obs["stack"].map(lambda c: _stack_log(fit, c)).to_numpy(float)
    kf = {m: fit.store_model_factor(m)[0] for m in obs["model"].unique()}
    k = obs["model"].map(kf).to_numpy(float)
    gamma = obs["precision"].map(lambda p: fit.precision.get(p, _PRIOR["gamma"][0])).to_numpy(float)
    g = obs["rclass"].map(lambda r: fit.runtime.get(r, 0.0)).to_numpy(float)
    return _evaluate(_design(obs), e, s, _stack_log(fit, "triton"), _stack_log(fit, "triton_per_mb"), h, u, k, g,
                     gamma)


def fit_world(store: pd.DataFrame) -> WorldFit:
    """Least-squares fit of the model's parameters to every explainable row of ``store``."""
    obs = observations(store)
    accs = sorted(obs["accelerator"].unique())
    models = sorted(m for m in obs["model"].unique() if m != "resnet50")
    precs = [p for p in PRECISIONS if (obs["precision"] == p).any()]
    rts = [r for r in RUNTIMES if (obs["rclass"] == r).any()]
    stacks = list(STACK_PRIOR_MS)  # every stack has a prior: one never run keeps it
    n_acc, n_p, n_r, n_s = 3 * len(accs), len(precs), len(rts), len(stacks)
    target = np.log(obs["target"].to_numpy())
    d = _design(obs)
    ai = obs["accelerator"].map({a: i for i, a in enumerate(accs)}).to_numpy()
    mi = obs["model"].map({m: i + 1 for i, m in enumerate(models)}).fillna(0).to_numpy(int)  # 0 = resnet50
    pi = obs["precision"].map({p: i + 1 for i, p in enumerate(precs)}).fillna(0).to_numpy(int)  # 0 = fp32
    ri = obs["rclass"].map({r: i + 1 for i, r in enumerate(rts)}).fillna(0).to_numpy(int)  # 0 = framework
    si = obs["stack"].map({c: i for i, c in enumerate(stacks)}).to_numpy(int)
    ti, ni = stacks.index("triton"), stacks.index("triton_per_mb")
    o_sd = [_PRIOR["o"][1] if a in DATASHEETS else _PRIOR["o_unknown"][1] for a in accs]
    prior_mean = np.concatenate([np.tile([_PRIOR["o"][0], _PRIOR["h"][0], _PRIOR["u"][0]], len(accs)),
                                 np.full(n_p, _PRIOR["gamma"][0]), np.zeros(n_r),
                                 [math.log(STACK_PRIOR_MS[c]) for c in stacks],
                                 np.zeros(len(models))])
    prior_sd = np.concatenate([np.column_stack([o_sd, np.full(len(accs), _PRIOR["h"][1]),
                                                np.full(len(accs), _PRIOR["u"][1])]).ravel(),
                               np.full(n_p, _PRIOR["gamma"][1]), np.full(n_r, _PRIOR["g"][1]),
                               np.full(n_s, STACK_PRIOR_SD),
                               np.full(len(models), _PRIOR["k"][1])])

    def split(x: np.ndarray):
        a = x[:n_acc].reshape(-1, 3)
        p = np.concatenate([[0.0], x[n_acc:n_acc + n_p]])
        r = np.concatenate([[0.0], x[n_acc + n_p:n_acc + n_p + n_r]])
        st = x[n_acc + n_p + n_r:n_acc + n_p + n_r + n_s]
        m = np.concatenate([[0.0], x[n_acc + n_p + n_r + n_s:]])
        return a, p, r, st, m

    def residuals(x: np.ndarray) -> np.ndarray:
        a, p, r, st, m = split(x)
        pred = _evaluate(d, a[ai, 0], st[si], st[ti], st[ni], a[ai, 1], a[ai, 2], m[mi], r[ri], p[pi])
        return np.concatenate([np.log(pred) - target, PRIOR_WEIGHT * (x - prior_mean) / prior_sd])

    sol = least_squares(residuals, prior_mean.copy(), method="trf", max_nfev=300)
    a, p, r, st, m = split(sol.x)
    seen = set(obs["stack"]) | ({"triton", "triton_per_mb"} if obs["server"].any() else set())
    fit = WorldFit({acc: tuple(float(v) for v in a[i]) for i, acc in enumerate(accs)},
                   {q: float(p[i + 1]) for i, q in enumerate(precs)}, {q: float(r[i + 1]) for i, q in enumerate(rts)},
                   {"resnet50": 0.0, **{q: float(m[i + 1]) for i, q in enumerate(models)}},
                   {c: float(st[i]) for i, c in enumerate(stacks) if c in seen})
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
           "runtime": fit.runtime, "stack_ms": fit.stack, "models": dict(sorted(fit.model.items()))}
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=False) + "\n")


def load_fit(path: Path = FIT_FILE) -> tuple[WorldFit, dict[str, float]]:
    """The shipped fit and its per-level sigmas."""
    try:
        doc = json.loads(path.read_text())
        fit = WorldFit({k: tuple(v) for k, v in doc["accelerators"].items()}, doc["precision"], doc["runtime"],
                       doc["models"], doc.get("stack_ms", {}))
        return fit, {k: float(v) for k, v in doc["sigma"].items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"grounded world: cannot read {path.name}: {type(e).__name__}; rerun "
                        "python -m benchmarks.world_fidelity --refit") from None


def sim_precision(accelerator: str) -> str:
    """The precision an FP32 ONNX Runtime model really computes at on ``accelerator`` (TF32 where tensor cores do it)."""
    s = DATASHEETS.get(accelerator)
    return "tf32" if s is not None and s.tf32 > s.fp32 else "fp32"
