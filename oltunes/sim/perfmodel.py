"""The simulator's performance model: a Decision's candidate -> latency, throughput, energy, with noise and drift.

Calibrated at load time on real measurements read from ``shared_data`` (never copied into the repository):
``proteus/aggregate_profiled.csv`` (ONNX Runtime latency per batch on CPU / Pascal / Ampere, 46 variants with
accuracy), ``proteus/variants/<family>.csv`` (family membership) and ``lucid/colocate_info.csv`` +
``lucid/single_data.csv`` (co-location slowdown per pair class). Every other factor is in
:mod:`oltunes.sim.calibration` with its source; the variants' published parameter counts (metadata, not
measurements) are in :mod:`oltunes.sim.variant_params`.

Two faces:

* :meth:`PerformanceModel.truth` — noiseless expected behaviour;
* :meth:`PerformanceModel.measure` — what a run would report: per-batch lognormal noise and slow device drift,
  ``simulated=True``, ``energy_source="simulated"``. The learner only ever sees these.

Data caveats (kept, not smoothed away): the file merges two profiling campaigns; the one with trial counts is
preferred, the other fills the pairs it lacks — notably every CNN family on the two GPUs, measured only up to
batch 8 and nearly linear in batch size (about 30 ms per image for ResNet-50 on the Ampere GPU, slower than small
CNNs on the CPU). Batch 16 for those is therefore extrapolated and flagged like every batch above 16.

The model loaded from the data is the *public profile table* (what a user can know). The simulator's physics is
:meth:`PerformanceModel.perturbed`: the same table with a seeded per-(variant, accelerator) log-normal latency factor
(the scenario's ``truth_sigma``), slowed further by drift events (:meth:`slow_down`) — one physics, the perturbation
is data. Baselines and ``oltunes-profiled`` read the table; only the oracle reads the truth.

The engine reads the same arrays in bulk (:meth:`latency_row`, :meth:`sigma`, :meth:`busy_power_w`, ...), so the
physics it simulates and the numbers ``truth`` reports cannot drift apart.

Example
-------
>>> pm = load_performance_model()                                    # doctest: +SKIP
>>> v = next(v for v in pm.variants() if v.name == "resnet50_v1")   # doctest: +SKIP
>>> cand = Candidate(pool="a", accelerator="a100", variant=v, batch_size=8)  # doctest: +SKIP
>>> pm.truth(JobSpec(family="resnet", slo_ms=100), cand).latency_p99_ms     # doctest: +SKIP
"""

from __future__ import annotations

import copy
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from oltunes.config import Settings, get_settings
from oltunes.sim.variant_params import published_params
from oltunes.errors import ConfigError, DataError
from oltunes.inventory import CATALOG
from oltunes.sim import calibration as cal
from oltunes.profiles import Grid
from oltunes.types import Accelerator, Candidate, CoRunner, JobSpec, Measurement, Prediction, Variant

ANCHORS = ("cpu", "pascal", "ampere")
_ACCEL_COLUMN = {"onnxruntime_cpu": "cpu", "onnxruntime_gpu_pascal": "pascal", "onnxruntime_gpu_ampere": "ampere"}
_Z90, Z99 = 1.2816, 2.3263  # standard-normal quantiles (p90, p99)


def _variant_name(model: str) -> str:
    return model.replace("/", "-")


@dataclass
class _Tables:
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


class PerformanceModel:
    """Calibrated latency/energy model over the variants of ``proteus`` and the accelerators of the catalog."""

    def __init__(self, data_dir: Path, accelerators: dict[str, Accelerator] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self._accels: dict[str, Accelerator] = dict(CATALOG)
        if accelerators:
            self._accels.update(accelerators)
        # Truth perturbation (data, not a mode): per-(variant, accelerator) latency factors, log-normal with median
        # 1 and log-sigma ``_perturb_sigma``, drawn from (seed, accelerator name) on first use; sigma 0 = the table.
        self._perturb_sigma, self._perturb_seed = 0.0, 0
        self._scale: dict[str, np.ndarray] = {}
        # time-varying per-accelerator slowdowns (drift events: throttling, a driver change)
        self._slowdown: dict[str, float] = {}
        self._load()

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        prof = self.data_dir / "proteus" / "aggregate_profiled.csv"
        if not prof.is_file():
            raise DataError(f"performance model: {prof} not found; set OLTUNES_SHARED_DATA to the public data folder")
        df = pd.read_csv(prof)
        families: dict[str, str] = {}
        for f in sorted((self.data_dir / "proteus" / "variants").glob("*.csv")):
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
        self._variants = [
            Variant(
                family=families[m],
                name=_variant_name(m),
                size=m,
                precision="fp32",
                accuracy=float(df.loc[df["Model"] == m, "Accuracy"].iloc[0]) / 100.0,
                params=published_params(m),  # architecture metadata a deployer knows, as the zoo's variants carry
            )
            for m in models
        ]
        self._index = {v.name: i for i, v in enumerate(self._variants)}
        n = len(models)
        width = cal.MAX_BATCH + 1
        t = _Tables()
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
        med_ratio = float(np.median(gpu_ratio)) if gpu_ratio else cal.DEFAULT_PASCAL_OVER_AMPERE
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
                names = [self._variants[i].name for i in np.flatnonzero(missing)]
                raise DataError(f"performance model: no {anc} latency for {names} in {prof}")
        self._t = t
        # Pair classes: tercile of the per-item ampere latency at batch 8.
        per_item = t.lat["ampere"][:, 8] / 8
        cuts = np.quantile(per_item, [1 / 3, 2 / 3])
        self._class = np.searchsorted(cuts, per_item).astype(int)
        self._best = {}
        for v in self._variants:
            self._best[v.family] = max(self._best.get(v.family, 0.0), v.accuracy)
        self._load_interference()

    def _load_interference(self) -> None:
        """Median slowdown (1/speed) and log-spread per (own class, co-runner class) from Lucid's pair data."""
        k = cal.N_CLASSES
        self._slow = np.ones((k, k))
        self._slow_sigma = np.zeros((k, k))
        co, single = self.data_dir / "lucid" / "colocate_info.csv", self.data_dir / "lucid" / "single_data.csv"
        if not (co.is_file() and single.is_file()):
            raise DataError(f"performance model: {co} or {single} not found (co-location interference data)")
        c, s = pd.read_csv(co), pd.read_csv(single)
        key = ["model", "dataset", "batchsize", "amp"]
        lab = s[key + ["label"]].drop_duplicates(key)
        for side in ("1", "2"):
            c = c.merge(lab.rename(columns={x: x + side for x in key + ["label"]}), on=[x + side for x in key], how="left")
        c = c.dropna(subset=["label1", "label2"])
        for (l1, l2), g in c.groupby(["label1", "label2"]):
            slow = 1.0 / g["speed1"].clip(lower=0.05)
            self._slow[int(l1), int(l2)] = max(1.0, float(slow.median()))
            self._slow_sigma[int(l1), int(l2)] = float(np.log(slow).std())

    # ------------------------------------------------------------------ lookups
    def variants(self) -> list[Variant]:
        """Every variant the model knows (proteus families; accuracy = published accuracy / 100; params = the
        published parameter count from :mod:`oltunes.sim.variant_params`, 0 if a new variant is not listed)."""
        return list(self._variants)

    def variant(self, name: str) -> Variant:
        return self._variants[self.variant_index(name)]

    def variant_index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise ConfigError(f"unknown variant {name!r}; known: {', '.join(self._index)}") from None

    def families(self) -> list[str]:
        return sorted(self._best)

    def best_accuracy(self, family: str) -> float:
        try:
            return self._best[family]
        except KeyError:
            raise ConfigError(f"unknown model family {family!r}; known: {', '.join(sorted(self._best))}") from None

    def accelerator(self, name: str) -> Accelerator:
        try:
            return self._accels[name]
        except KeyError:
            raise ConfigError(f"unknown accelerator {name!r}; known: {', '.join(self._accels)}") from None

    def add_accelerators(self, accels: dict[str, Accelerator]) -> None:
        for name in accels:
            self.factor(name)  # inline accelerators still need a speed factor
        self._accels.update(accels)

    @staticmethod
    def factor(accelerator: str) -> cal.Factor:
        try:
            return cal.FACTORS[accelerator]
        except KeyError:
            raise ConfigError(
                f"accelerator {accelerator!r} has no speed factor; known: {', '.join(cal.FACTORS)} "
                "(add a row to oltunes/sim/calibration.py FACTORS with its source)"
            ) from None

    # ------------------------------------------------------------------ the truth differs from the public table
    def perturbed(self, sigma: float, seed: int) -> PerformanceModel:
        """A copy whose latencies differ from this (public) table by a seeded log-normal factor per (variant,
        accelerator): the simulator's truth, which only the oracle may read. Tables are shared, not copied."""
        if not (math.isfinite(sigma) and sigma >= 0):
            raise ConfigError(f"truth perturbation sigma must be finite and >= 0, got {sigma!r}")
        twin = copy.copy(self)
        twin._accels = dict(self._accels)
        twin._perturb_sigma, twin._perturb_seed = float(sigma), int(seed)
        twin._scale, twin._slowdown = {}, dict(self._slowdown)
        return twin

    def truth_factor(self, variant: int, accelerator: str) -> float:
        """How much slower than the public table this (variant, accelerator) really is (1.0 on the table)."""
        return float(self._scales(accelerator)[variant]) * self._slowdown.get(accelerator, 1.0)

    def _scales(self, accelerator: str) -> np.ndarray:
        s = self._scale.get(accelerator)
        if s is None:
            n = len(self._variants)
            if self._perturb_sigma == 0:
                s = np.ones(n)
            else:  # seeded by the accelerator's name, so adding a pool never reshuffles the other factors
                rng = np.random.default_rng([self._perturb_seed, zlib.crc32(accelerator.encode())])
                s = rng.lognormal(0.0, self._perturb_sigma, n)
            self._scale[accelerator] = s
        return s

    def slow_down(self, accelerator: str, factor: float) -> None:
        """From now on ``accelerator`` runs ``factor`` times slower (a drift event; multiplies earlier ones)."""
        if not (math.isfinite(factor) and factor > 0):
            raise ConfigError(f"slowdown factor must be finite and > 0, got {factor!r}")
        self.factor(accelerator)
        self._slowdown[accelerator] = self._slowdown.get(accelerator, 1.0) * float(factor)

    def latency_row(self, variant: int, accelerator: str) -> np.ndarray:
        """Noiseless isolated p50 batch latency (ms) for batch 0..MAX_BATCH (index = batch size)."""
        f = self.factor(accelerator)
        return self._t.lat[f.anchor][variant] / f.speed * self.truth_factor(variant, accelerator)

    def is_measured(self, variant: int, accelerator: str, batch: int) -> bool:
        """True when the latency comes straight from a measured row (anchor accelerator, measured batch)."""
        f = self.factor(accelerator)
        return f.speed == 1.0 and bool(self._t.measured[f.anchor][variant, batch])

    def is_extrapolated(self, variant: int, accelerator: str, batch: int) -> bool:
        """True for a batch size beyond the largest one measured for this variant on the anchor accelerator."""
        measured = np.flatnonzero(self._t.measured[self.factor(accelerator).anchor][variant])
        return bool(len(measured) == 0 or batch > measured.max())

    def sigma(self, variant: int, accelerator: str) -> float:
        return float(self._t.sigma[self.factor(accelerator).anchor][variant])

    def busy_power_w(self, variant: int, accelerator: str, batch: int) -> float:
        """Board power while a batch of this variant runs (utilisation-dependent draw)."""
        acc = self.accelerator(accelerator)
        cf = self._t.compute_fraction[self.factor(accelerator).anchor][variant, batch]
        return acc.idle_w + (acc.max_w - acc.idle_w) * (cal.POWER_FLOOR + (1 - cal.POWER_FLOOR) * cf)

    def compute_fraction(self, variant: int, accelerator: str, batch: int) -> float:
        return float(self._t.compute_fraction[self.factor(accelerator).anchor][variant, batch])

    @staticmethod
    def concurrency_factor(accelerator: str, concurrency: int) -> float:
        """Per-batch slowdown of running ``concurrency`` executors of one job on one device."""
        cost = cal.OVERLAP_COST["cpu" if accelerator == "cpu" else "gpu"]
        return 1.0 + cost * (concurrency - 1)

    def interference(self, variant: int, co: list[tuple[int, float]]) -> tuple[float, float]:
        """(slowdown >= 1, extra log-sigma) from co-runners given as (variant index, load in [0, 1])."""
        mine = self._class[variant]
        slow, var = 1.0, 0.0
        for v, load in co:
            w = min(1.0, max(0.0, load))
            other = self._class[v]
            slow += (self._slow[mine, other] - 1.0) * w
            var += (self._slow_sigma[mine, other] * w) ** 2
        return slow, math.sqrt(var)

    @staticmethod
    def sharing_factor(accelerator: str, total_load: float, shared: bool) -> float:
        """Time-slicing slowdown when co-runners together ask more than the device has (gavel packing)."""
        if not shared:
            return 1.0
        return max(1.0, total_load / cal.FACTORS[accelerator].packing)

    # ------------------------------------------------------------------ candidate-level API
    def _service(self, job: JobSpec, cand: Candidate) -> tuple[float, float, int]:
        """(noiseless p50 batch latency incl. all slowdowns, sigma, variant index) for a candidate."""
        vi = self.variant_index(cand.variant.name)
        b = min(cand.batch_size, cal.MAX_BATCH)
        base = float(self.latency_row(vi, cand.accelerator)[b])
        co = [(self.variant_index(r.variant), r.load) for r in cand.co_runners if r.variant in self._index]
        slow, extra = self.interference(vi, co)
        kappa = self.concurrency_factor(cand.accelerator, cand.concurrency)
        own = self.load(job, cand) if job.kind == "streaming" else 1.0
        share = self.sharing_factor(cand.accelerator, own + sum(r.load for r in cand.co_runners), bool(co))
        sigma = math.hypot(self.sigma(vi, cand.accelerator), extra)
        return base * slow * kappa * share, sigma, vi

    # ------------------------------------------------------------------ the oltunes.profiles.Profile interface
    def accelerators(self) -> list[str]:
        """Every accelerator type with a speed factor (the rows of the profile table)."""
        return list(cal.FACTORS)

    def grid(self, job: JobSpec, accelerator: str, variants: Sequence[Variant], batches: Sequence[int],
             concurrencies: Sequence[int], co_runners: Sequence[CoRunner] = ()) -> Grid:
        """Every (variant, batch, concurrency) at once on a device shared with ``co_runners`` (sim.grid)."""
        from oltunes.sim.grid import evaluate  # it builds on this module's constants

        co = [(self._index[r.variant], r.load) for r in co_runners if r.variant in self._index]
        return evaluate(self, job, accelerator, variants, batches, concurrencies, co)

    def load(self, job: JobSpec, cand: Candidate) -> float:
        """Busy fraction of its device a streaming job would keep at its expected rate (isolated, noiseless)."""
        vi = self.variant_index(cand.variant.name)
        b = min(cand.batch_size, cal.MAX_BATCH)
        per_item_s = float(self.latency_row(vi, cand.accelerator)[b]) / b / 1000.0
        kappa = self.concurrency_factor(cand.accelerator, cand.concurrency)
        return job.arrival_rate_rps * per_item_s * kappa / cand.concurrency

    def truth(self, job: JobSpec, candidate: Candidate) -> Prediction:
        """Noiseless expected p99 batch latency, energy per item and throughput capacity (oracle only)."""
        s50, sigma, vi = self._service(job, candidate)
        b = min(candidate.batch_size, cal.MAX_BATCH)
        mean = s50 * math.exp(sigma**2 / 2)
        power = self.busy_power_w(vi, candidate.accelerator, b)
        return Prediction(
            latency_p99_ms=s50 * math.exp(Z99 * sigma),
            energy_j_per_item=power * mean / 1000.0 / b,
            throughput_items_per_s=candidate.concurrency * b * 1000.0 / mean,
        )

    def measure(
        self,
        job: JobSpec,
        candidate: Candidate,
        *,
        items: int,
        rng: np.random.Generator,
        drift: float = 1.0,
        decision_id: str | None = None,
    ) -> Measurement:
        """Simulate running ``items`` items flat out with this candidate: noisy per-batch latencies."""
        if items < 1:
            raise ConfigError(f"measure: items must be >= 1, got {items}")
        s50, sigma, vi = self._service(job, candidate)
        b = min(candidate.batch_size, cal.MAX_BATCH)
        n = max(1, math.ceil(items / b))
        lat = s50 * drift * rng.lognormal(0.0, sigma, size=n)
        wall_s = float(lat.sum()) / 1000.0 / candidate.concurrency
        power = self.busy_power_w(vi, candidate.accelerator, b)
        p50, p95, p99 = np.percentile(lat, [50, 95, 99])
        return Measurement(
            job_id=job.job_id,
            decision_id=decision_id,
            kind=job.kind,
            arrival_rate_rps=job.arrival_rate_rps,
            candidate=candidate,
            items=items,
            wall_s=wall_s,
            latency_p50_ms=float(p50),
            latency_p95_ms=float(p95),
            latency_p99_ms=float(p99),
            throughput_items_per_s=items / wall_s if wall_s > 0 else 0.0,
            energy_j_per_item=power * float(lat.sum()) / 1000.0 / items,
            energy_source="simulated",
            accuracy=candidate.variant.accuracy,
            gpu_util=self.compute_fraction(vi, candidate.accelerator, b),
            simulated=True,
        )

    def table(self) -> pd.DataFrame:
        """The calibrated latency table (one row per variant x accelerator x batch), with provenance flags."""
        rows = []
        for vi, v in enumerate(self._variants):
            for acc in cal.FACTORS:
                row = self.latency_row(vi, acc)
                for b in (1, 2, 4, 8, 16, 32, 64):
                    rows.append(
                        {
                            "variant": v.name,
                            "family": v.family,
                            "accelerator": acc,
                            "batch": b,
                            "p50_ms": float(row[b]),
                            "measured": self.is_measured(vi, acc, b),
                            "extrapolated": self.is_extrapolated(vi, acc, b),
                            "factor_source": cal.FACTORS[acc].source,
                        }
                    )
        return pd.DataFrame(rows)


@lru_cache(maxsize=4)
def _cached(data_dir: str) -> PerformanceModel:
    return PerformanceModel(Path(data_dir))


def load_performance_model(settings: Settings | None = None) -> PerformanceModel:
    """The model calibrated on ``settings.shared_data`` (cached per folder: loading reads a few CSV files)."""
    s = settings or get_settings()
    return _cached(str(s.shared_data))


def variants(settings: Settings | None = None) -> list[Variant]:
    """The variants the performance model knows."""
    return load_performance_model(settings).variants()
