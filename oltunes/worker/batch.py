"""Batch mode: run a whole dataset through a model, write predictions as resumable parquet shards.

Output layout (``output`` directory)::

    _job.json              what this directory holds (model hash, input fingerprint, shard size)
    part-00000.parquet     rows [0, shard_size) of the input: id, pred[, label]
    part-00001.parquet     ...

Each shard is written to a temp file and renamed into place, so a shard file exists only when complete. A
re-run after a crash skips finished shards and redoes the rest: no row is lost or written twice. A
directory holding shards of another job (other model, input or shard size) is refused unless ``overwrite``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oltunes.atomic import (
    atomic_write,
    atomic_write_json,
    check_writable_dir,
    sha256_file,
)
from oltunes.errors import ConfigError, DataError, invalid
from oltunes.worker.dataset import Dataset, read_dataset
from oltunes.worker.session import Device, ModelSession, SessionPool
from oltunes.worker.stats import LatencyHistogram, latency_summary

JOB_FILE = "_job.json"
SHARD_GLOB = "part-*.parquet"


def shard_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


class BatchConfig(BaseModel):
    """Parameters of one batch job, validated before any work starts."""

    model_config = ConfigDict(extra="forbid")

    model: Path
    input: Path
    output: Path
    batch_size: int = Field(default=64, ge=1)
    threads: int = Field(default=1, ge=1, description="ONNX Runtime intra-op threads per session")
    concurrency: int = Field(default=1, ge=1, description="sessions running batches in parallel")
    shard_size: int = Field(default=10_000, ge=1, description="rows per output file (the resume unit)")
    max_shards: int | None = Field(default=None, ge=0, description="stop after writing this many new shards")
    device: Device = "auto"
    report: Path | None = None
    overwrite: bool = False


class BatchReport(BaseModel):
    """The measurement record of one batch run (also written as JSON to ``report``)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    input: str
    output: str
    items: int = Field(description="items inferred in this run (skipped shards excluded)")
    items_total: int
    shards_total: int
    shards_done: int = Field(description="shards written in this run")
    shards_skipped: int = Field(description="shards already complete from an earlier run")
    complete: bool = Field(description="every shard of the input exists now")
    batches: int
    wall_s: float = Field(description="end to end: reading input, loading the model, inference, writing")
    compute_s: float = Field(description="sum of per-batch inference times")
    throughput_items_per_s: float
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    latency_mean_ms: float | None
    latency_max_ms: float | None
    latency_hdr: str | None = Field(default=None, description="the batch latencies as an encoded HDR histogram (exact merging of parts)")
    accuracy: float | None = Field(description="on this run's items, when the input has labels")
    cpu_time_s: float = Field(description="process CPU time (user+system, all threads) used by this run")
    device: str
    provider: str
    threads: int
    batch_size: int
    concurrency: int
    host: str
    pid: int
    started_at: float
    finished_at: float


def _fingerprint(cfg: BatchConfig, data: Dataset) -> dict:
    """What a shard directory must match to be resumed: same model bytes, same ids in the same order, same sharding."""
    return {
        "model_sha256": sha256_file(cfg.model),
        "input_ids_sha256": hashlib.sha256(np.ascontiguousarray(data.ids).tobytes()).hexdigest(),
        "items": len(data),
        "shard_size": cfg.shard_size,
    }


def _prepare_output(cfg: BatchConfig, job: dict) -> None:
    out = cfg.output
    for stale in out.glob(".part-*.tmp"):  # temp files of a run that was killed mid-write
        stale.unlink(missing_ok=True)
    job_path = out / JOB_FILE
    existing = None
    if job_path.is_file():
        try:
            existing = json.loads(job_path.read_text())
        except ValueError:
            existing = None
    if existing is not None and existing != job and not cfg.overwrite:
        diff = ", ".join(k for k in job if existing.get(k) != job[k])
        raise DataError(
            f"output directory {out} holds shards of a different job (differs in: {diff}); use an empty directory or --overwrite"
        )
    if existing is None and any(out.glob(SHARD_GLOB)) and not cfg.overwrite:
        raise DataError(
            f"output directory {out} has shard files but no {JOB_FILE}; use an empty directory or --overwrite"
        )
    if cfg.overwrite and existing != job:
        for old in out.glob(SHARD_GLOB):
            old.unlink()
    if existing != job:
        atomic_write_json(job_path, job)


def _shard_complete(path: Path, rows: int) -> bool:
    if not path.is_file():
        return False
    try:
        return pq.read_metadata(path).num_rows == rows
    except (OSError, pa.ArrowException):
        return False  # unreadable: redo it


def shards_complete(output: Path | str, items: int, shard_size: int) -> bool:
    """Whether `output` holds every shard of an ``items``-row input, each with its rows (a finished job or part):
    what a re-run would skip, known without loading a model."""
    out = Path(output)
    n_shards = (items + shard_size - 1) // shard_size
    return all(_shard_complete(out / shard_name(i), min(shard_size, items - i * shard_size)) for i in range(n_shards))


def _write_shard(path: Path, ids: np.ndarray, preds: np.ndarray, labels: np.ndarray | None) -> None:
    # class ids from (n, classes) scores are int64; a model with one output value per item keeps its floats
    cols = {"id": pa.array(ids, pa.int64()), "pred": pa.array(preds)}
    if labels is not None:
        cols["label"] = pa.array(labels, pa.int64())
    atomic_write(path, lambda tmp: pq.write_table(pa.table(cols), tmp))


def config_from(**kwargs) -> BatchConfig:
    try:
        return BatchConfig(**kwargs)
    except ValidationError as e:
        raise invalid(e, "invalid batch job") from e


def run_batch(
    model: Path | str,
    input: Path | str,
    output: Path | str,
    *,
    batch_size: int = 64,
    threads: int = 1,
    concurrency: int = 1,
    shard_size: int = 10_000,
    max_shards: int | None = None,
    device: Device = "auto",
    report: Path | str | None = None,
    overwrite: bool = False,
) -> BatchReport:
    """Run every item of `input` through `model` and write predictions to shards under `output`.

    Parameters
    ----------
    model
        ONNX file (single input; first output = class scores).
    input
        ``.npz`` or ``.parquet`` dataset (see `oltunes.worker.dataset`).
    output
        Directory for ``part-NNNNN.parquet`` shards; created if missing.
    batch_size, threads, concurrency
        Items per inference call, intra-op threads per session, sessions running in parallel.
    shard_size
        Rows per shard: the unit of atomic output and of resumption.
    max_shards
        Stop after writing this many new shards (a bounded slice of the job, or a simulated crash in tests).
    device
        ``auto`` (CUDA when it really loads), ``cpu`` or ``cuda``.
    report
        Where to write the measurement record as JSON (atomically).
    overwrite
        Discard shards of a different earlier job in `output` instead of refusing.

    Returns
    -------
    BatchReport
        The measurement record. Raises `ConfigError`, `ModelError` or `DataError` on bad input, before
        any output file is written.
    """
    started = time.time()
    t0, cpu0 = time.perf_counter(), time.process_time()
    cfg = config_from(
        model=Path(model),
        input=Path(input),
        output=Path(output),
        batch_size=batch_size,
        threads=threads,
        concurrency=concurrency,
        shard_size=shard_size,
        max_shards=max_shards,
        device=device,
        report=None if report is None else Path(report),
        overwrite=overwrite,
    )
    check_writable_dir(cfg.output)
    if cfg.report is not None:
        check_writable_dir(cfg.report.parent)
    sessions = [ModelSession(cfg.model, threads=cfg.threads, device=cfg.device) for _ in range(cfg.concurrency)]
    first = sessions[0]
    if first.fixed_batch is not None and first.fixed_batch != cfg.batch_size:
        raise ConfigError(
            f"model {cfg.model} has a fixed batch dimension of {first.fixed_batch}; use batch_size {first.fixed_batch}"
        )
    data = read_dataset(cfg.input)
    x = first.prepare(data.x)  # once for the whole input: the per-batch path only slices
    _prepare_output(cfg, _fingerprint(cfg, data))

    n = len(data)
    n_shards = (n + cfg.shard_size - 1) // cfg.shard_size
    latencies: list[float] = []
    items = correct = done = skipped = 0
    pool = ThreadPoolExecutor(cfg.concurrency) if cfg.concurrency > 1 else None
    idle = SessionPool(sessions)  # each lane borrows a session while it runs a batch

    def infer(start: int, stop: int) -> tuple[np.ndarray, float]:
        return idle.predict(x[start:stop])

    try:
        for shard in range(n_shards):
            lo, hi = shard * cfg.shard_size, min(n, (shard + 1) * cfg.shard_size)
            path = cfg.output / shard_name(shard)
            if _shard_complete(path, hi - lo):
                skipped += 1
                continue
            if cfg.max_shards is not None and done >= cfg.max_shards:
                break
            bounds = [(s, min(hi, s + cfg.batch_size)) for s in range(lo, hi, cfg.batch_size)]
            results = pool.map(lambda b: infer(*b), bounds) if pool else (infer(*b) for b in bounds)
            parts = []
            for p, ms in results:  # map() keeps batch order
                parts.append(p)
                latencies.append(ms)
            preds = np.concatenate(parts)
            labels = None if data.labels is None else data.labels[lo:hi]
            if labels is not None:
                correct += int(np.sum(preds == labels))
            _write_shard(path, data.ids[lo:hi], preds, labels)
            items += hi - lo
            done += 1
    finally:
        if pool:
            pool.shutdown(wait=True)

    wall = time.perf_counter() - t0
    complete = skipped + done == n_shards  # every shard was verified complete or written by this run
    result = BatchReport(
        model=str(cfg.model),
        input=str(cfg.input),
        output=str(cfg.output),
        items=items,
        items_total=n,
        shards_total=n_shards,
        shards_done=done,
        shards_skipped=skipped,
        complete=complete,
        batches=len(latencies),
        wall_s=round(wall, 6),
        compute_s=round(sum(latencies) / 1e3, 6),
        throughput_items_per_s=round(items / wall, 3) if wall > 0 else 0.0,
        **latency_summary(latencies),
        latency_hdr=_encoded(latencies),
        accuracy=(correct / items) if (items and data.labels is not None) else None,
        cpu_time_s=round(time.process_time() - cpu0, 6),
        device=first.device_kind,
        provider=first.provider,
        threads=cfg.threads,
        batch_size=cfg.batch_size,
        concurrency=cfg.concurrency,
        host=socket.gethostname(),
        pid=os.getpid(),
        started_at=started,
        finished_at=time.time(),
    )
    if cfg.report is not None:
        atomic_write_json(cfg.report, result.model_dump(mode="json"))
    return result


def read_predictions(output: Path | str) -> pa.Table:
    """All shards of an output directory as one table, in shard order."""
    paths = sorted(Path(output).glob(SHARD_GLOB))
    if not paths:
        raise DataError(f"no prediction shards ({SHARD_GLOB}) in {output}")
    return pa.concat_tables([pq.read_table(p) for p in paths])


def _encoded(latencies: list[float]) -> str | None:
    if not latencies:
        return None
    h = LatencyHistogram()
    for ms in latencies:
        h.record(ms)
    return h.encode()
