"""The performance model's tables, read and fitted from the public profiling data: Proteus's per-anchor latency
curves for batch 1..MAX_BATCH (measured points, the other GPU's campaign filling gaps, linear extrapolation beyond;
the CPU's is the simulator's CPU, the GPUs' give each variant its noise sigma), the grounded GPU tables
(:func:`grounded_table`, from :mod:`oltunes.sim.world`), compute fractions, which values were measured, and the
co-runner interference model (:class:`Interference`, fitted to the sharing store of
:func:`oltunes.sim.profile_store.sharing_rows`).

:class:`~oltunes.sim.perfmodel.PerformanceModel` loads them once and answers every query from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from oltunes.errors import DataError
from oltunes.sim import calibration as cal
from oltunes.sim.variant_params import published_gflops, published_params
from oltunes.sim.world import WorldFit, sim_precision
from oltunes.sim.world_specs import STORE_MODELS, family_of
from oltunes.types import Variant

ANCHORS = ("cpu", "pascal", "ampere")
_ACCEL_COLUMN = {"onnxruntime_cpu": "cpu", "onnxruntime_gpu_pascal": "pascal", "onnxruntime_gpu_ampere": "ampere"}
_Z90 = 1.2816  # standard-normal p90 quantile (sigma from the p90 / p50 ratio)
STORE_FAMILIES = {family_of(m) for m in STORE_MODELS}  # families with GPU rows from a named GPU in the store


def _variant_name(model: str) -> str:
    return model.replace("/", "-")


@dataclass
class Tables:
    """Dense per-anchor arrays indexed [variant, batch] (batch 0 unused)."""

    lat: dict[str, np.ndarray] = field(default_factory=dict)  # p50 ms per batch
    compute_fraction: dict[str, np.ndarray] = field(default_factory=dict)
    sigma: dict[str, np.ndarray] = field(default_factory=dict)  # lognormal sigma per variant
    measured: dict[str, np.ndarray] = field(default_factory=dict)  # bool: value measured (not derived)


def _fit_line(b: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """latency(b) = a + c*b with a, c >= 0 (least squares, then clipped)."""
    if len(b) == 1:
        return float(y[0]), 0.0
    c, a = np.polyfit(b, y, 1)
    if c < 0:
        return float(np.mean(y)), 0.0
    if a < 0:
        return 0.0, float(np.dot(b, y) / np.dot(b, b))
    return float(a), float(c)


def _curve(points: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """Latency for batch 1..MAX_BATCH from measured points: interpolate inside, extrapolate linearly beyond."""
    bs = np.array(sorted(points), dtype=float)
    ys = np.maximum.accumulate(np.array([points[int(b)] for b in bs]))  # a bigger batch never runs faster
    a, c = _fit_line(bs, ys)
    k = np.arange(cal.MAX_BATCH + 1, dtype=float)
    lat = np.interp(k, bs, ys)
    top = bs[-1]
    # Beyond the last measured batch: the fitted per-item cost, at least a quarter of the average per-item time
    # (a flat fit would make huge batches free).
    slope = max(c, 0.25 * ys[-1] / top)
    beyond = k > top
    lat[beyond] = ys[-1] + slope * (k[beyond] - top)
    below = k < bs[0]
    lat[below] = ys[0]
    lat[0] = 0.0
    cf = np.where(k > 0, (c * k) / np.maximum(a + c * k, 1e-9), 0.0)
    return lat, cf


def load_profiles(data_dir: Path) -> tuple[list[Variant], Tables]:
    """The variants of the proteus families (ordered by family, name) and their fitted per-anchor tables."""
    prof = data_dir / "proteus" / "aggregate_profiled.csv"
    if not prof.is_file():
        raise DataError(f"performance model: {prof} not found; set OLTUNES_SHARED_DATA to the public data folder")
    df = pd.read_csv(prof)
    families: dict[str, str] = {}
    for f in sorted((data_dir / "proteus" / "variants").glob("*.csv")):
        for line in f.read_text().splitlines():
            if line.strip():
                families[line.split(",")[0].strip()] = f.stem
    df = df[df["Model"].isin(families)].copy()
    df["anchor"] = df["Accel"].map(_ACCEL_COLUMN)
    df = df[df["anchor"].notna()]
    # Two profiling campaigns are merged in the file; the one with trial counts is preferred, the other
    # (no Trials / 90th_pct) fills the (model, accelerator) pairs the first lacks.
    df["primary"] = df["Trials"].notna()
    has_primary = df[df["primary"]].groupby(["Model", "anchor"]).size()
    keep = df["primary"] | ~df.set_index(["Model", "anchor"]).index.isin(has_primary.index)
    df = df[keep]

    models = sorted(df["Model"].unique(), key=lambda m: (families[m], m))
    variants = [
        Variant(
            family=families[m],
            name=_variant_name(m),
            size=m,
            precision="fp32",
            accuracy=float(df.loc[df["Model"] == m, "Accuracy"].iloc[0]) / 100.0,
            params=published_params(m),  # architecture metadata a deployer knows, as the zoo's variants carry
            gflops=published_gflops(m),
        )
        for m in models
    ]
    n = len(models)
    width = cal.MAX_BATCH + 1
    t = Tables()
    for anc in ANCHORS:
        t.lat[anc] = np.full((n, width), np.nan)
        t.compute_fraction[anc] = np.zeros((n, width))
        t.measured[anc] = np.zeros((n, width), dtype=bool)
        t.sigma[anc] = np.full(n, np.nan)
    df["sigma"] = np.log(df["90th_pct"] / df["50th_pct"]).clip(lower=0) / _Z90
    points: dict[tuple[int, str], dict[int, float]] = {}
    for (m, anc), g in df.groupby(["Model", "anchor"]):
        i = models.index(m)
        points[(i, anc)] = dict(zip(g["batchsize"].astype(int), g["50th_pct"].astype(float)))
        s = g["sigma"].dropna()
        if len(s):
            t.sigma[anc][i] = float(s.median())
    raw = {key: set(pts) for key, pts in points.items()}  # what was really measured, before any filling
    # Fill anchors that lack a variant (or have fewer batch sizes) from the other GPU anchor, scaled at the
    # largest batch both measured; with nothing in common, by the median ratio over variants.
    gpu_ratio = []
    for i in range(n):
        p, a = points.get((i, "pascal")), points.get((i, "ampere"))
        if p and a and 1 in p and 1 in a:
            gpu_ratio.append(p[1] / a[1])
    med_ratio = float(np.median(gpu_ratio)) if gpu_ratio else 1.0  # no variant on both GPUs: take them alike
    for i in range(n):
        for anc, other, ratio in (("pascal", "ampere", med_ratio), ("ampere", "pascal", 1 / med_ratio)):
            mine, theirs = points.get((i, anc)), points.get((i, other))
            if theirs is None or (mine is not None and len(mine) >= len(theirs)):
                continue
            if mine:
                common = max(set(mine) & set(theirs), default=None)
                r = mine[common] / theirs[common] if common else ratio
                filled = {b: theirs[b] * r for b in theirs}
                filled.update(mine)
            else:
                filled = {b: y * ratio for b, y in theirs.items()}
            points[(i, anc)] = filled
    for (i, anc), pts in points.items():
        lat, cf = _curve(pts)
        t.lat[anc][i], t.compute_fraction[anc][i] = lat, cf
        t.measured[anc][i] = np.isin(np.arange(width), sorted(raw.get((i, anc), ())))
    for anc in ANCHORS:
        s = t.sigma[anc]
        fill = float(np.nanmedian(s)) if np.isfinite(s).any() else 0.05
        t.sigma[anc] = np.clip(np.where(np.isfinite(s), s, fill), *cal.NOISE_SIGMA_RANGE)
        missing = np.isnan(t.lat[anc][:, 1])
        if missing.any():
            names = [variants[i].name for i in np.flatnonzero(missing)]
            raise DataError(f"performance model: no {anc} latency for {names} in {prof}")
    return variants, t


@dataclass(frozen=True)
class Interference:
    """Co-runner interference, fitted to the sharing store (:func:`fit_interference`): a job whose device also runs
    co-runners ``j`` (each busy ``load_j`` of the time) takes ``1 + sum_j load_j * (base + compute * c * c_j)`` times
    as long per item, ``c`` being each job's compute share (the share of its time alone the SMs are busy). ``base``
    is what any busy co-runner costs (context switches, caches); ``compute`` the contention of two compute-bound jobs.
    ``sigma``: the robust log spread of the measured slowdowns around the fit; ``typical_cc``: the mean ``c * c_j``
    of the rows that report both shares, used for rows (sources) that do not."""

    base: float
    compute: float
    sigma: float
    typical_cc: float
    rows: int
    sources: tuple[str, ...]

    def pair(self, c: float, c_co: float) -> float:
        """Slowdown - 1 that one co-runner busy all the time adds."""
        return self.base + self.compute * c * c_co


def _pair_features(rows: pd.DataFrame, typical_cc: float) -> np.ndarray:
    """Design matrix (1, c * c_co); a product a source does not report is the training rows' typical one."""
    cc = (rows["compute_util"] * rows["co_compute_util"]).fillna(typical_cc).to_numpy(float)
    return np.column_stack([np.ones(len(rows)), cc])


def pair_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The sharing rows that measure interference: a co-runner named and a finite slowdown (MIG slices excluded:
    the hardware isolates them)."""
    ok = rows["co_model"].notna() & (rows["co_model"].astype(str) != "") & np.isfinite(rows["slowdown"])
    return rows[ok & (rows["slowdown"] > 0)]


def fit_interference(rows: pd.DataFrame) -> Interference:
    """Non-negative least squares of (slowdown - 1) on (1, c * c_co) over the pair rows, each source weighted
    equally whatever its row count."""
    from scipy.optimize import nnls

    pairs = pair_rows(rows)
    if pairs.empty:
        raise DataError("interference model: no co-located rows in the sharing store")
    known = (pairs["compute_util"] * pairs["co_compute_util"]).dropna()
    typical = float(known.mean()) if len(known) else 0.0
    x = _pair_features(pairs, typical)
    w = 1.0 / np.sqrt(pairs.groupby("source")["slowdown"].transform("size").to_numpy(float))
    coef, _ = nnls(x * w[:, None], (pairs["slowdown"].to_numpy(float) - 1.0) * w)
    if not len(known):
        coef[1] = 0.0  # no source reported compute shares: the term is unidentified, not zero-valued data
    resid = np.log(pairs["slowdown"].to_numpy(float) / (1.0 + x @ coef))
    sigma = float(1.4826 * np.median(np.abs(resid - np.median(resid))))
    return Interference(float(coef[0]), float(coef[1]), sigma, typical, len(pairs),
                        tuple(sorted(pairs["source"].unique())))


def predict_slowdown(model: Interference, rows: pd.DataFrame) -> np.ndarray:
    """The model's slowdown for each pair row (co-runner busy all the time)."""
    return 1.0 + _pair_features(rows, model.typical_cc) @ np.array([model.base, model.compute])


@dataclass
class AccelTable:
    """One accelerator's dense arrays indexed [variant, batch] (batch 0 unused) and where they come from."""

    lat: np.ndarray  # noiseless p50 ms per batch
    compute_fraction: np.ndarray
    sigma: np.ndarray  # per-batch log-normal noise sigma per variant
    measured: np.ndarray  # bool: the value is a measured row
    basis: list[str]  # per variant: how its latency on this accelerator is known


def cpu_table(t: Tables) -> AccelTable:
    """The CPU: Proteus's measured ONNX Runtime CPU profile."""
    n = len(t.sigma["cpu"])
    return AccelTable(t.lat["cpu"], t.compute_fraction["cpu"], t.sigma["cpu"], t.measured["cpu"],
                      ["measured: proteus onnxruntime_cpu"] * n)


def grounded_table(variants: list[Variant], t: Tables, fit: WorldFit, accelerator: str) -> AccelTable:
    """A GPU from the grounded world's model (:mod:`oltunes.sim.world`); per-batch noise keeps Proteus's GPU
    sigma (its p90/p50 spread) per variant."""
    b = np.arange(cal.MAX_BATCH + 1, dtype=float)
    prec = sim_precision(accelerator)
    lat = np.zeros((len(variants), len(b)))
    cf = np.zeros_like(lat)
    basis = []
    for i, v in enumerate(variants):
        lat[i] = fit.batch_ms(v.size, accelerator, prec, cal.SIM_RUNTIME, b)
        cf[i] = fit.compute_fraction(v.size, accelerator, prec, cal.SIM_RUNTIME, b)
        _, acc_fitted = fit.accel_params(accelerator)
        fam = family_of(v.size)
        store_family = fam in STORE_FAMILIES
        basis.append(("grounded model" if acc_fitted else "grounded model, accelerator derived from its datasheet")
                     + (f": {fam} measured in the store" if store_family else
                        ": derived from FLOPs/bytes and Proteus's relative shape (no GPU row of this family)"))
    lat[:, 0], cf[:, 0] = 0.0, 0.0
    return AccelTable(lat, cf, t.sigma["ampere"], np.zeros_like(lat, dtype=bool), basis)
