"""Job traces for the batch queue, read at run time from ``settings.shared_data`` (never copied into the repo).

Each loader turns one public trace into a :class:`Trace` — arrays of submit time, run time, GPUs, allowed pools
(GPU-type constraints) and a group (virtual cluster / QoS) — for one of the paper's cluster shapes. Bad files get a
:class:`DataError` that names the file and the column, never a value from it.

Sequences have the paper's length (256 jobs by default). Training sequences come from the first 70 % of a trace
(by submit order), evaluation sequences from the last 30 %, so evaluation never sees a training job.
Each sequence's arrivals keep their order and relative gaps but are rescaled so its offered load (GPU-seconds asked
within the arrival span / (cluster GPUs x span)) is ``load``: raw windows range from a near-empty cluster (Alibaba)
to thousands of times its capacity (Philly bursts), and a queue policy only matters when there is a queue. A job
counts only for the part of its run time inside the span, so one months-long job does not stretch the sequence.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from oltunes.errors import DataError
from oltunes.registry import Registered
from oltunes.rltune.cluster import SHAPES, ClusterShape

TRAIN_SHARE = 0.7
TEST_SEED = 10_000
DEFAULT_LOAD = 1.5  # a busy cluster: 1.5x its GPUs asked during the arrival span


@dataclass(frozen=True)
class Trace:
    """Jobs sorted by submit time. ``allowed[j, p]``: job j may run in pool p."""

    name: str
    shape: ClusterShape
    submit: np.ndarray  # s
    duration: np.ndarray  # s (the trace's real run time; SJF/F1 and RLTune read it as the requested time)
    gpus: np.ndarray
    allowed: np.ndarray
    group: np.ndarray
    job: np.ndarray  # position in the whole trace (what tells a held-out job from a training one)
    dropped: int = 0  # jobs that fit no allowed pool of the shape even when it is empty

    def __len__(self) -> int:
        return len(self.submit)

    def take(self, idx: np.ndarray) -> Trace:
        return replace(self, submit=self.submit[idx], duration=self.duration[idx], gpus=self.gpus[idx],
                       allowed=self.allowed[idx], group=self.group[idx], job=self.job[idx])


def _read(path: Path, columns: tuple[str, ...], ctx: str) -> pd.DataFrame:
    if not path.exists():
        raise DataError(f"{ctx}: trace file {path} not found (traces are read from settings.shared_data)")
    try:
        df = pd.read_csv(path)
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{ctx}: {path.name} is not a readable CSV ({type(e).__name__})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"{ctx}: {path.name} is missing column {missing[0]!r} (needs {', '.join(columns)})")
    if df.empty:
        raise DataError(f"{ctx}: {path.name} has no rows")
    return df


def _numeric(df: pd.DataFrame, col: str, ctx: str, *, allow_nan: bool = False) -> np.ndarray:
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(v) if not allow_nan else np.isinf(v) | (pd.isna(v) & df[col].notna().to_numpy())
    if bad.any():
        raise DataError(f"{ctx}: column {col!r} has {int(bad.sum())} non-numeric or infinite value(s)")
    if np.any(v[np.isfinite(v)] < 0):
        raise DataError(f"{ctx}: column {col!r} has negative value(s)")
    return v


def build_trace(name: str, shape: ClusterShape, submit, duration, gpus, allowed, group) -> Trace:
    """A trace from columns: drops jobs without run time or GPUs and those no allowed pool can hold; sorts by submit."""
    gpus = np.asarray(gpus, dtype=np.int64)
    ok = (np.asarray(duration) > 0) & (gpus >= 1)
    # a gang job must fit in one pool it may use
    pool_cap = np.array([p.nodes * p.gpus_per_node for p in shape.pools])
    fits = (allowed & (gpus[:, None] <= pool_cap[None, :])).any(axis=1)
    dropped = int((ok & ~fits).sum())
    keep = np.flatnonzero(ok & fits)
    order = keep[np.argsort(np.asarray(submit)[keep], kind="stable")]
    if not len(order):
        raise DataError(f"{name}: no usable job (positive duration, at least one GPU, fits the {shape.name} shape)")
    s = np.asarray(submit, float)[order]
    return Trace(name, shape, s - s[0], np.asarray(duration, float)[order], gpus[order], allowed[order],
                 np.asarray(group)[order], np.arange(len(order)), dropped)


class TraceLoader(Registered, root=True):
    """One trace format, loaded onto a cluster shape. ``default`` (file, relative to ``settings.shared_data``) and
    ``shape`` (a name in ``SHAPES``) are None for formats that have neither (the generic CSV)."""

    default: ClassVar[str | None]
    shape: ClassVar[str | None]

    def load(self, path: Path, shape: ClusterShape) -> Trace:
        raise NotImplementedError


class Philly(TraceLoader, name="philly"):
    default = "pollux/philly_jobs.csv.gz"
    shape = "philly"

    def load(self, path: Path, shape: ClusterShape) -> Trace:
        ctx = "philly trace"
        df = _read(path, ("timestamp", "duration", "num_gpus", "cluster"), ctx)
        t = pd.to_datetime(df["timestamp"], errors="coerce")
        if t.isna().any():
            raise DataError(f"{ctx}: column 'timestamp' has {int(t.isna().sum())} unparsable date(s)")
        submit = (t - t.min()).dt.total_seconds().to_numpy()
        gpus = _numeric(df, "num_gpus", ctx)
        small = gpus <= 64  # the paper's jobs ask for 1-64 GPUs
        allowed = np.ones((len(df), len(shape.pools)), bool)
        group = pd.factorize(df["cluster"].astype(str))[0]
        tr = build_trace("philly", shape, submit[small], _numeric(df, "duration", ctx)[small], gpus[small],
                    allowed[small], group[small])
        return replace(tr, dropped=tr.dropped + int((~small).sum()))


# Alibaba GPU models -> the paper's five pools (G1-G3 / A10 are undisclosed or rare: the MISC pool).
_ALIBABA_POOL = {"T4": "T4", "P100": "P100", "V100M16": "V100-16GB", "V100M32": "V100-32GB",
                 "G1": "MISC", "G2": "MISC", "G3": "MISC", "A10": "MISC"}


class Alibaba(TraceLoader, name="alibaba"):
    default = "alibaba/gpu_v2023/openb_pod_list_gpuspec33.csv"
    shape = "alibaba"

    def load(self, path: Path, shape: ClusterShape) -> Trace:
        ctx = "alibaba trace"
        df = _read(path, ("num_gpu", "gpu_milli", "gpu_spec", "qos", "creation_time", "deletion_time",
                          "scheduled_time"), ctx)
        num = _numeric(df, "num_gpu", ctx)
        milli = _numeric(df, "gpu_milli", ctx)
        created = _numeric(df, "creation_time", ctx)
        started = _numeric(df, "scheduled_time", ctx, allow_nan=True)
        deleted = _numeric(df, "deletion_time", ctx, allow_nan=True)
        gpus = np.where((num == 0) & (milli > 0), 1, num)  # a GPU-sharing pod holds one whole GPU here
        duration = np.nan_to_num(deleted - started, nan=-1.0)  # pods never deleted have no run time
        allowed = np.zeros((len(df), len(shape.pools)), bool)
        for i, spec in enumerate(df["gpu_spec"].fillna("").astype(str)):
            models = [m for m in spec.split("|") if m]
            if not models:
                allowed[i] = True
            for m in models:
                if m not in _ALIBABA_POOL:
                    raise DataError(f"{ctx}: column 'gpu_spec' names an unknown GPU model (row {i + 2})")
                allowed[i, shape.pool_index(_ALIBABA_POOL[m])] = True
        group = pd.factorize(df["qos"].astype(str))[0]
        return build_trace("alibaba", shape, created, duration, gpus, allowed, group)


class Helios(TraceLoader, name="helios"):
    """Helios-like: the Saturn-sampled workloads of the Sia artifact (submit time, GPUs), one after another.

    They carry no run time: each job's is drawn (seeded by its name) from a log-normal whose median and mean are the
    Saturn cluster's GPU-job run times in ``helios/helios_cluster_summary.csv`` — an estimate, labelled as such.
    Jobs go to one of the five virtual clusters, weighted by VC size, by a hash of their name.
    """

    default = "sia/workloads_saturn.csv"
    shape = "helios"

    def load(self, path: Path, shape: ClusterShape) -> Trace:
        ctx = "helios trace"
        df = _read(path, ("workload_id", "name", "time", "num_replicas"), ctx)
        summary = _read(path.parent.parent / "helios" / "helios_cluster_summary.csv",
                        ("id", "med_run_time_gpu", "avg_run_time_gpu"), "helios summary")
        row = summary[summary["id"] == "Saturn"]
        if row.empty:
            raise DataError("helios summary: column 'id' has no 'Saturn' row")
        med, mean = float(row["med_run_time_gpu"].iloc[0]), float(row["avg_run_time_gpu"].iloc[0])
        mu, sigma = np.log(med), float(np.sqrt(2 * np.log(max(mean / med, 1.0))))
        time = _numeric(df, "time", ctx)
        gpus = _numeric(df, "num_replicas", ctx)
        wid = df[[c for c in ("workload_set", "workload_id") if c in df.columns]].astype(str).agg("/".join, axis=1)
        # workloads one after another: each starts where the previous one's submissions ended
        submit = np.empty(len(df))
        offset = 0.0
        for key in pd.unique(wid):
            m = (wid == key).to_numpy()
            submit[m] = time[m] - time[m].min() + offset
            offset = submit[m].max() + 1.0
        weights = np.array([p.nodes for p in shape.pools], float)
        edges = np.cumsum(weights / weights.sum())
        duration = np.empty(len(df))
        allowed = np.zeros((len(df), len(shape.pools)), bool)
        for i, key in enumerate((wid + "/" + df["name"].astype(str)).tolist()):
            h = zlib.crc32(key.encode())
            rng = np.random.default_rng(h)
            duration[i] = max(1.0, float(np.exp(mu + sigma * rng.standard_normal())))
            allowed[i, min(int(np.searchsorted(edges, rng.random())), len(shape.pools) - 1)] = True
        group = allowed.argmax(axis=1)
        return build_trace("helios", shape, submit, duration, gpus, allowed, group)


class JobsCsv(TraceLoader, name="csv"):
    """Your own batch-job log: ``submit_s``, ``duration_s``, ``gpus``, optional ``pools`` (allowed pool names joined
    by ``|``; empty = any) and ``group`` (any label: user, virtual cluster, QoS). Needs a cluster shape."""

    default = None
    shape = None

    def load(self, path: Path, shape: ClusterShape) -> Trace:
        ctx = "csv trace"
        df = _read(path, ("submit_s", "duration_s", "gpus"), ctx)
        names = [p.name for p in shape.pools]
        allowed = np.ones((len(df), len(names)), bool)
        if "pools" in df.columns:
            for i, spec in enumerate(df["pools"].fillna("").astype(str)):
                wanted = [x for x in spec.split("|") if x]
                if any(w not in names for w in wanted):
                    raise DataError(f"{ctx}: column 'pools' names a pool the cluster lacks (row {i + 2})")
                if wanted:
                    allowed[i] = [n in wanted for n in names]
        gpus = _numeric(df, "gpus", ctx)
        if np.any(gpus != np.round(gpus)):
            raise DataError(f"{ctx}: column 'gpus' has non-integer value(s)")
        group = pd.factorize(df["group"].astype(str))[0] if "group" in df.columns else np.zeros(len(df), int)
        return build_trace(path.stem, shape, _numeric(df, "submit_s", ctx), _numeric(df, "duration_s", ctx), gpus,
                           allowed, group)


def load_trace(name: str, path: Path | None = None, shape: ClusterShape | None = None) -> Trace:
    """Load a trace by loader name from `path` (default: its file under ``settings.shared_data``) onto `shape`
    (default: the loader's cluster shape)."""
    from oltunes.config import get_settings

    loader = TraceLoader.make(name)
    if path is None and loader.default is None:
        raise DataError(f"trace {name!r}: needs a file")
    if shape is None and loader.shape is None:
        raise DataError(f"trace {name!r}: needs a cluster shape")
    return loader.load(Path(path) if path else get_settings().shared_data / loader.default,
                       shape or SHAPES[loader.shape])


def _rescale(tr: Trace, load: float) -> Trace:
    # the span T at which the GPU-seconds asked inside it, sum(gpus x min(duration, T)), are load x capacity x T
    work = lambda t: float((tr.gpus * np.minimum(tr.duration, t)).sum())  # noqa: E731
    lo, hi = 1e-3, float((tr.gpus * tr.duration).sum()) / (tr.shape.capacity * load) + 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if work(mid) > load * tr.shape.capacity * mid else (lo, mid)
    s = tr.submit - tr.submit[0]
    span = float(s[-1])
    s = s * (hi / span) if span > 0 else np.linspace(0.0, hi, len(s))
    return replace(tr, submit=s)


def sequences(tr: Trace, *, split: str, n: int, length: int = 256, seed: int = 0,
              load: float = DEFAULT_LOAD) -> list[Trace]:
    """`n` sequences of `length` jobs drawn (seeded, without replacement, kept in submit order) from the train
    (first 70 %) or test (last 30 %) part of the trace.

    Drawn rather than consecutive: consecutive windows of these traces are mostly one user's burst of identical
    single-GPU jobs (Philly), which leaves nothing to order. Test sequences use their own fixed seeds, so every run
    evaluates the same held-out sequences whatever the training seed.
    """
    cut = int(len(tr) * TRAIN_SHARE)
    lo, hi = {"train": (0, cut), "test": (cut, len(tr))}[split]
    if hi - lo < length:
        raise DataError(f"{tr.name}: the {split} part has {hi - lo} jobs, fewer than one sequence of {length}")
    base = seed if split == "train" else TEST_SEED
    out = []
    for i in range(n):
        rng = np.random.default_rng([base, i])
        out.append(_rescale(tr.take(np.sort(rng.choice(np.arange(lo, hi), size=length, replace=False))), load))
    return out
