"""The simulator's performance model: a Decision's candidate -> latency, throughput, energy, with noise and drift.

GPU latency comes from the **grounded world** (:mod:`oltunes.sim.world`): a few-parameter model (datasheet compute
and bandwidth against each variant's FLOPs and bytes, a batch-efficiency curve, a fixed overhead) fitted to the
profile store (:mod:`oltunes.sim.profile_store`: NVIDIA DeepLearningExamples, MLPerf Inference, Lambda, Proteus),
its parameters shipped in ``oltunes/data/world_fit.json``. CPU latency is Proteus's measured ONNX Runtime CPU profile,
read at run time from ``shared_data`` (``proteus/aggregate_profiled.csv``, never copied into the repository), which
also gives each variant its accuracy, family and per-batch noise sigma. Co-runner interference is
:class:`~oltunes.sim.perftables.Interference`, fitted to the sharing store (Gpulet, Lucid). Every other factor is in
:mod:`oltunes.sim.calibration` with its source; :meth:`PerformanceModel.basis` says how each (variant, accelerator)
is known (measured, grounded model, derived from FLOPs / a datasheet).

Two faces:

* :meth:`PerformanceModel.truth` — noiseless expected behaviour;
* :meth:`PerformanceModel.measure` — what a run would report: per-batch lognormal noise and slow device drift,
  ``simulated=True``, ``energy_source="simulated"``. The learner only ever sees these.

The model loaded from the data is the *public profile table* (what a user can know). The simulator's physics is
:meth:`PerformanceModel.perturbed`: the same table with seeded hierarchical log-normal factors (accelerator, family,
variant, pair; the **grounded** world's sigma per level is estimated from real disagreement between sources,
:mod:`oltunes.sim.world_noise`; the **stress** world is one independent factor per pair with sigma 0.5), slowed further
by drift events (:meth:`slow_down`) — one physics, the perturbation is data. Baselines and ``oltunes-profiled`` read
the table; only the oracle reads the truth.

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
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from oltunes.config import Settings, get_settings
from oltunes.errors import ConfigError
from oltunes.inventory import CATALOG
from oltunes.profiles import Grid
from oltunes.sim import calibration as cal
from oltunes.sim.perftables import AccelTable, cpu_table, fit_interference, grounded_table, load_profiles
from oltunes.sim.profile_store import sharing_rows
from oltunes.sim.world import load_fit
from oltunes.sim.world_noise import LEVELS, WorldSpec, stress_world
from oltunes.sim.world_specs import DATASHEETS
from oltunes.types import (
    Accelerator,
    Candidate,
    CoRunner,
    JobSpec,
    Measurement,
    Prediction,
    Variant,
)

Z99 = 2.3263  # standard-normal p99 quantile


class PerformanceModel:
    """Calibrated latency/energy model over the variants of ``proteus`` and the accelerators of the catalog."""

    def __init__(self, data_dir: Path, accelerators: dict[str, Accelerator] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self._accels: dict[str, Accelerator] = dict(CATALOG)
        if accelerators:
            self._accels.update(accelerators)
        # Truth perturbation (data, not a mode): hierarchical log-normal latency factors per (accelerator, family,
        # variant, pair) with the world's sigma per level, drawn from (seed, names) on first use; the table = sigma 0.
        self._world, self._perturb_seed = WorldSpec("table", {}), 0
        self._scale: dict[str, np.ndarray] = {}
        # time-varying per-accelerator slowdowns (drift events: throttling, a driver change)
        self._slowdown: dict[str, float] = {}
        self._load()

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        self._variants, self._t = load_profiles(self.data_dir)
        self._index = {v.name: i for i, v in enumerate(self._variants)}
        self._fit, self.grounded_sigma = load_fit()
        self._tables: dict[str, AccelTable] = {"cpu": cpu_table(self._t)}
        self._best = {}
        for v in self._variants:
            self._best[v.family] = max(self._best.get(v.family, 0.0), v.accuracy)
        self.interference_model = fit_interference(sharing_rows(self.data_dir))
        acc, batch = cal.INTERFERENCE_REFERENCE
        # each variant's compute share as a list, for `interference` (per job per interval: numpy's scalars cost more
        # than the arithmetic, which is the same on floats)
        self._compute_share = self._tab(acc).compute_fraction[:, batch].tolist()

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
        """The accelerator's sharing factor; any GPU with a datasheet is known (its latency from the grounded model)."""
        f = cal.FACTORS.get(accelerator)
        if f is not None:
            return f
        if accelerator in DATASHEETS:
            return cal.DEFAULT_GPU_FACTOR
        raise ConfigError(
            f"accelerator {accelerator!r} is unknown to the simulator; known: {', '.join(cal.FACTORS)}, "
            f"{', '.join(sorted(set(DATASHEETS) - set(cal.FACTORS)))} (add a datasheet to oltunes/sim/world_specs.py "
            "or a row to oltunes/sim/calibration.py FACTORS, with its source)")

    def _tab(self, accelerator: str) -> AccelTable:
        t = self._tables.get(accelerator)
        if t is None:
            self.factor(accelerator)
            t = self._tables[accelerator] = grounded_table(self._variants, self._t, self._fit, accelerator)
        return t

    # ------------------------------------------------------------------ the truth differs from the public table
    def perturbed(self, world: WorldSpec | float, seed: int) -> PerformanceModel:
        """A copy whose latencies differ from this (public) table by the world's seeded hierarchical log-normal
        factors (a float = the stress world with that independent per-pair sigma): the simulator's truth, which only
        the oracle may read. Tables are shared, not copied."""
        if not isinstance(world, WorldSpec):
            if not (isinstance(world, (int, float)) and math.isfinite(world) and world >= 0):
                raise ConfigError(f"truth perturbation sigma must be finite and >= 0, got {world!r}")
            world = stress_world(float(world))
        for level, sd in world.sigma.items():
            if level not in LEVELS or not (math.isfinite(sd) and sd >= 0):
                raise ConfigError(f"world {world.name!r}: sigma.{level} must be a level of {LEVELS} and >= 0")
        twin = copy.copy(self)
        twin._accels = dict(self._accels)
        twin._world, twin._perturb_seed = world, int(seed)
        twin._scale, twin._slowdown = {}, dict(self._slowdown)
        return twin

    def grounded_world(self) -> WorldSpec:
        """The default world: sigma per level estimated from the store (:mod:`oltunes.sim.world_noise`)."""
        return WorldSpec("grounded", dict(self.grounded_sigma))

    @property
    def world(self) -> WorldSpec:
        return self._world

    def truth_factor(self, variant: int, accelerator: str) -> float:
        """How much slower than the public table this (variant, accelerator) really is (1.0 on the table)."""
        return float(self._scales(accelerator)[variant]) * self._slowdown.get(accelerator, 1.0)

    def _draw(self, sd: float, *names: str) -> np.ndarray | float:
        """One seeded N(0, sd) draw per variant (names end in an accelerator or not) or a scalar; seeded by names so
        adding a pool never reshuffles the other factors."""
        rng = np.random.default_rng([self._perturb_seed, *(zlib.crc32(n.encode()) for n in names)])
        return rng.normal(0.0, sd, len(self._variants)) if sd > 0 else np.zeros(len(self._variants))

    def _scales(self, accelerator: str) -> np.ndarray:
        s = self._scale.get(accelerator)
        if s is None:
            sd = self._world.sigma
            z = np.zeros(len(self._variants))
            if sd.get("accelerator", 0) > 0:
                z += self._draw(sd["accelerator"], "accelerator", accelerator)[0]
            if sd.get("family", 0) > 0:
                fams = {v.family for v in self._variants}
                per = {f: self._draw(sd["family"], "family", f, accelerator)[0] for f in fams}
                z += np.array([per[v.family] for v in self._variants])
            if sd.get("variant", 0) > 0:
                z += self._draw(sd["variant"], "variant")
            if sd.get("pair", 0) > 0:  # the stress world's draw, as before: (seed, accelerator name)
                rng = np.random.default_rng([self._perturb_seed, zlib.crc32(accelerator.encode())])
                z += np.log(rng.lognormal(0.0, sd["pair"], len(self._variants)))
            s = self._scale[accelerator] = np.exp(z)
        return s

    def slow_down(self, accelerator: str, factor: float) -> None:
        """From now on ``accelerator`` runs ``factor`` times slower (a drift event; multiplies earlier ones)."""
        if not (math.isfinite(factor) and factor > 0):
            raise ConfigError(f"slowdown factor must be finite and > 0, got {factor!r}")
        self.factor(accelerator)
        self._slowdown[accelerator] = self._slowdown.get(accelerator, 1.0) * float(factor)

    def latency_row(self, variant: int, accelerator: str) -> np.ndarray:
        """Noiseless isolated p50 batch latency (ms) for batch 0..MAX_BATCH (index = batch size)."""
        return self._tab(accelerator).lat[variant] * self.truth_factor(variant, accelerator)

    def is_measured(self, variant: int, accelerator: str, batch: int) -> bool:
        """True when the latency comes straight from a measured row (the CPU's measured batch sizes)."""
        return bool(self._tab(accelerator).measured[variant, batch])

    def is_extrapolated(self, variant: int, accelerator: str, batch: int) -> bool:
        """True for a CPU batch size beyond the largest one measured (GPU rows come from the model at every batch)."""
        if accelerator != "cpu":
            return False
        measured = np.flatnonzero(self._tab("cpu").measured[variant])
        return bool(len(measured) == 0 or batch > measured.max())

    def basis(self, variant: int, accelerator: str) -> str:
        """How this (variant, accelerator)'s latency is known (measured, grounded model, derived)."""
        return self._tab(accelerator).basis[variant]

    def sigma(self, variant: int, accelerator: str) -> float:
        return float(self._tab(accelerator).sigma[variant])

    def busy_power_w(self, variant: int, accelerator: str, batch: int) -> float:
        """Board power while a batch of this variant runs (utilisation-dependent draw; an estimate, calibration)."""
        acc = self.accelerator(accelerator)
        cf = self._tab(accelerator).compute_fraction[variant, batch]
        return acc.idle_w + (acc.max_w - acc.idle_w) * (cal.POWER_FLOOR + (1 - cal.POWER_FLOOR) * cf)

    def compute_fraction(self, variant: int, accelerator: str, batch: int) -> float:
        return float(self._tab(accelerator).compute_fraction[variant, batch])

    @staticmethod
    def concurrency_factor(accelerator: str, concurrency: int) -> float:
        """Per-batch slowdown of running ``concurrency`` executors of one job on one device."""
        cost = cal.OVERLAP_COST["cpu" if accelerator == "cpu" else "gpu"]
        return 1.0 + cost * (concurrency - 1)

    def interference(self, variant: int, co: list[tuple[int, float]]) -> tuple[float, float]:
        """(slowdown >= 1, extra log-sigma) from co-runners given as (variant index, load in [0, 1]): the fitted
        :class:`~oltunes.sim.perftables.Interference`, each co-runner weighted by its load."""
        share, model = self._compute_share, self.interference_model
        mine, sigma = share[variant], model.sigma
        slow, var = 1.0, 0.0
        for v, load in co:
            w = min(1.0, max(0.0, load))
            slow += model.pair(mine, share[v]) * w
            var += (sigma * w) ** 2
        return slow, math.sqrt(var)

    @staticmethod
    def sharing_factor(accelerator: str, total_load: float, shared: bool) -> float:
        """Time-slicing slowdown when co-runners together ask more than the device has (gavel packing)."""
        if not shared:
            return 1.0
        return max(1.0, total_load / PerformanceModel.factor(accelerator).packing)

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
        """Every accelerator type of the simulator (the rows of the profile table)."""
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
                            "basis": self.basis(vi, acc),
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
