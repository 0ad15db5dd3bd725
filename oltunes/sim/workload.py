"""Workloads from real traces: streaming jobs (per-request arrivals) and batch jobs (job submissions).

* ``proteus/twitter/<scenario>/<family>.csv.gz``: ``arrival_ms,count,slo_ms`` per request (read at run time).
* ``azure/AzureLLMInferenceTrace_<conv|code>.csv.gz``: per-request ``TIMESTAMP``.
* ``pollux/philly_jobs.csv.gz``: Philly job submissions (``timestamp``, ``duration``, ``num_gpus``).
* ``alibaba/gpu_v2023/openb_pod_list_default.csv``: pods (``creation_time``, ``scheduled_time``,
  ``deletion_time``, ``num_gpu``, ``gpu_milli``).

Rate-step events (``oltunes.sim.events.RateStep``) reshape a stream's arrivals after their time. A stream shorter
than the run is looped; replicas of one stream start at seeded random offsets so they are not in
lock-step; ``rate_scale`` thins the trace (below 1) or superposes shifted copies (above 1). Batch jobs take a seeded window of consecutive submissions,
compressed into the arrival window; their work (items) is the trace's GPU-seconds times ``items_per_gpu_second``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from oltunes.errors import ConfigError, DataError
from oltunes.sim.perfmodel import PerformanceModel
from oltunes.sim.scenario import BatchSpec, Scenario, StreamSpec
from oltunes.types import JobSpec


@dataclass
class SimJob:
    """One job of a run: its spec, when it is submitted, and its requests (streaming) or work (batch)."""

    spec: JobSpec
    submit_s: float
    arrivals: np.ndarray | None = None  # seconds, sorted (streaming)
    source: str = ""

    @property
    def n_requests(self) -> int:
        return 0 if self.arrivals is None else len(self.arrivals)


def _read(path: Path, **kw) -> pd.DataFrame:
    if not path.is_file():
        raise DataError(f"workload trace {path} not found; set OLTUNES_SHARED_DATA to the public data folder")
    return pd.read_csv(path, **kw)


@lru_cache(maxsize=64)
def _proteus(data_dir: str, scenario: str, family: str) -> tuple[np.ndarray, float]:
    df = _read(Path(data_dir) / "proteus" / "twitter" / scenario / f"{family}.csv.gz", header=None,
               names=["arrival_ms", "count", "slo_ms"])
    arr = np.repeat(df["arrival_ms"].to_numpy(float), df["count"].to_numpy(int)) / 1000.0
    return np.sort(arr), float(df["slo_ms"].median())


@lru_cache(maxsize=4)
def _azure(data_dir: str, kind: str) -> np.ndarray:
    df = _read(Path(data_dir) / "azure" / f"AzureLLMInferenceTrace_{kind}.csv.gz")
    ts = pd.to_datetime(df["TIMESTAMP"]).astype("int64").to_numpy() / 1e9
    return np.sort(ts - ts.min())


@lru_cache(maxsize=2)
def _jobs(data_dir: str, trace: str) -> pd.DataFrame:
    """Columns: submit_s, gpu_seconds; sorted by submission."""
    root = Path(data_dir)
    if trace == "philly":
        df = _read(root / "pollux" / "philly_jobs.csv.gz")
        submit = pd.to_datetime(df["timestamp"]).astype("int64") / 1e9
        out = pd.DataFrame({"submit_s": submit, "gpu_seconds": df["duration"] * df["num_gpus"]})
    else:
        df = _read(root / "alibaba" / "gpu_v2023" / "openb_pod_list_default.csv")
        df = df[df["num_gpu"] > 0]
        # whole GPUs for multi-GPU pods, the GPU share for fractional single-GPU pods
        share = np.where(df["gpu_milli"] > 0, df["gpu_milli"] / 1000.0, 1.0)
        gpus = np.where(df["num_gpu"] > 1, df["num_gpu"], share)
        life = (df["deletion_time"] - df["scheduled_time"]).clip(lower=1)
        out = pd.DataFrame({"submit_s": df["creation_time"].astype(float), "gpu_seconds": life * gpus})
    out = out.dropna().sort_values("submit_s", kind="stable").reset_index(drop=True)
    return out


def _loop(base: np.ndarray, duration_s: float, offset: float) -> np.ndarray:
    """Arrivals in [0, duration) from a base trace looped over its span, shifted by ``offset`` seconds.

    Copy ``k`` of arrival ``j`` is at ``(base[j] + span * k) - offset``. Only the part of each copy that can fall
    in the window is computed (a window is often a fraction of one copy); the exact test is on the computed times,
    so the result is what tiling every copy whole would give, float for float."""
    if len(base) == 0:
        return base
    span = float(base[-1]) + float(np.mean(np.diff(base))) if len(base) > 1 else float(base[-1]) + 1.0
    copies = int(np.ceil((duration_s + offset) / span)) + 1
    margin = 1e-6 * (abs(duration_s) + abs(offset) + span * copies + abs(float(base[-1])))  # >> rounding error
    parts = []
    for k in range(copies):
        shift = span * k
        lo, hi = np.searchsorted(base, (offset - shift - margin, duration_s + offset - shift + margin))
        if lo < hi:
            times = (base[lo:hi] + shift) - offset
            parts.append(times[(times >= 0) & (times < duration_s)])
    return np.concatenate(parts) if parts else base[:0]


def scaled(base: np.ndarray, duration_s: float, rate_scale: float, rng: np.random.Generator) -> np.ndarray:
    """Scale a trace's rate without changing its shape over time: whole copies at random offsets for the integer
    part, Bernoulli thinning for the fraction (thinning also shrinks the trace's clumps of simultaneous requests,
    which compressing time would not)."""
    whole, frac = int(rate_scale), rate_scale - int(rate_scale)
    parts = [_loop(base, duration_s, 0.0 if k == 0 else float(rng.uniform(0, base[-1]))) for k in range(whole)]
    if frac > 1e-9:
        extra = _loop(base, duration_s, float(rng.uniform(0, base[-1])) if whole else 0.0)
        parts.append(extra[rng.random(len(extra)) < frac])
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0)


def _floor(model: PerformanceModel, family: str, drop_pts: float) -> float:
    return max(0.0, model.best_accuracy(family) - drop_pts / 100.0)


def _streams(spec: StreamSpec, sc: Scenario, model: PerformanceModel, data_dir: str, rng, idx: int) -> list[SimJob]:
    events_rng = np.random.default_rng([sc.seed, 101, idx])  # its own stream: events never reshuffle the rest
    if spec.trace == "proteus":
        families = spec.families or model.families()
    else:
        if spec.scenario not in ("conv", "code"):
            raise ConfigError(f"scenario {sc.name}: field 'workload.streaming.{idx}.scenario': azure needs conv or code")
        if not spec.families:
            raise ConfigError(f"scenario {sc.name}: field 'workload.streaming.{idx}.families': azure needs a family")
        families = spec.families
    jobs: list[SimJob] = []
    for fam in families:
        model.best_accuracy(fam)  # unknown family -> clear error
        if spec.trace == "proteus":
            base, slo = _proteus(data_dir, spec.scenario, fam)
        else:
            base, slo = _azure(data_dir, spec.scenario), None
        slo_ms = spec.slo_ms or slo
        if slo_ms is None:
            raise ConfigError(f"scenario {sc.name}: field 'workload.streaming.{idx}.slo_ms': required for azure")
        for r in range(spec.replicas):
            offset = 0.0 if r == 0 else float(rng.uniform(0, base[-1] if len(base) else 0))
            arr = scaled(_loop(base, sc.duration_s + float(base[-1]), offset), sc.duration_s, spec.rate_scale, rng)
            rate = len(arr) / sc.duration_s  # the rate a user declares: before any rate step
            for ev in sc.events:
                arr = ev.reshape(fam, arr, sc.duration_s, events_rng)
            job = JobSpec(
                job_id=f"s{idx}-{fam}-{r}",
                kind="streaming",
                family=fam,
                slo_ms=slo_ms,
                accuracy_floor=_floor(model, fam, spec.accuracy_drop_max_pts),
                arrival_rate_rps=rate,
            )
            jobs.append(SimJob(job, 0.0, arr, f"{spec.trace}:{spec.scenario}"))
    return jobs


def _batches(spec: BatchSpec, sc: Scenario, model: PerformanceModel, data_dir: str, rng, idx: int) -> list[SimJob]:
    df = _jobs(data_dir, spec.trace)
    if len(df) < spec.jobs:
        raise ConfigError(f"scenario {sc.name}: field 'workload.batch.{idx}.jobs': trace has only {len(df)} jobs")
    start = int(rng.integers(0, len(df) - spec.jobs + 1))
    win = df.iloc[start : start + spec.jobs]
    rel = win["submit_s"].to_numpy() - float(win["submit_s"].iloc[0])
    window = spec.arrival_window_s or sc.duration_s / 2
    rel = rel * (window / rel[-1]) if rel[-1] > 0 else rel
    items = np.clip(win["gpu_seconds"].to_numpy() * spec.items_per_gpu_second, spec.min_items, spec.max_items)
    jobs = []
    for k, (t, n) in enumerate(zip(rel, items)):
        fam = spec.families[k % len(spec.families)]
        model.best_accuracy(fam)
        job = JobSpec(
            job_id=f"b{idx}-{k}",
            kind="batch",
            family=fam,
            slo_ms=spec.slo_ms,
            accuracy_floor=_floor(model, fam, spec.accuracy_drop_max_pts),
            items=int(n),
        )
        jobs.append(SimJob(job, float(t), None, spec.trace))
    return jobs


def build_workload(sc: Scenario, model: PerformanceModel, data_dir: Path) -> list[SimJob]:
    """Every job of the scenario, deterministic for its seed."""
    rng = np.random.default_rng(sc.seed)
    jobs: list[SimJob] = []
    for i, s in enumerate(sc.workload.streaming):
        jobs += _streams(s, sc, model, str(data_dir), rng, i)
    for i, b in enumerate(sc.workload.batch):
        jobs += _batches(b, sc, model, str(data_dir), rng, i)
    return jobs
