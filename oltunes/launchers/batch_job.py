"""A batch job split into parts, one worker per part, and the parts' results folded into one `Measurement`.

Layout of a job's output directory::

    _decision.json             the Decision this job runs with (a resumed job keeps it: one job, one model)
    _probes.json               probe shards only: the first decision and each probe's decision and size
    _plan.json                 what the parts are (input fingerprint, items, items per worker, probe sizes)
    _inputs/input-00000.parquet  part inputs (only when the job has more than one part)
    worker-00000/part-*.parquet  each worker's resumable shards (see `oltunes.worker.batch`)
    worker-00000/_run/           the worker's log and measurement report

The plan is the manifest: part ``i`` holds input rows ``[start, start + items)``, the parts in order partition
the input (probe shards first, then the rest in parts of at most ``items_per_worker``). Every file is written
atomically and the plan is checked on re-run, so a resumed job continues the very same parts, each with the
model its decision names; the worker skips its finished shards. Rows are therefore neither lost nor written twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from oltunes.atomic import sha256_file
from oltunes.errors import DataError
from oltunes.launchers.base import WorkerResult
from oltunes.types import Candidate, Decision, EnergySource, JobSpec, Measurement, Variant

R = TypeVar("R", bound=BaseModel)

PLAN_FILE = "_plan.json"
DECISION_FILE = "_decision.json"


@dataclass(frozen=True)
class Part:
    index: int
    input_path: Path | None  # None for simulated jobs (no data)
    output_dir: Path
    run_dir: Path
    items: int
    start: int = 0  # the part's first row in the job's input: it holds rows [start, start + items)
    probe: int | None = None  # the probe shard it is (its index in `ProbeRecord.probes`), None for the rest

    def complete(self, shard_size: int) -> bool:
        """Every output shard of the part is on disk with its rows (no worker needed to tell)."""
        from oltunes.worker.batch import shards_complete

        return shards_complete(self.output_dir, self.items, shard_size)


def check_input(dataset: Path, variants: list[Variant]) -> int:
    """Read and validate a job's dataset once, before anything is decided or written; returns its item count.

    `oltunes.worker.dataset.read_dataset` checks the file (readable, schema, non-empty, finite, unique ids);
    then every model the tuner may pick must take the items (dtype and shape). A bad dataset is refused here,
    naming the file and the column, instead of starting (and retrying) workers that would all refuse it.
    """
    from oltunes.worker.dataset import read_dataset
    from oltunes.worker.session import ModelSession

    data = read_dataset(dataset)
    for path in sorted({v.path for v in variants if v.path}):
        try:
            ModelSession(Path(path), threads=1, device="cpu").prepare(data.x[:1])
        except DataError as e:
            raise DataError(f"dataset {dataset}: column 'x': {e} (model {Path(path).name})") from e
    return len(data)


def part_bounds(items: int, items_per_worker: int, probe_items: Sequence[int] = ()) -> list[tuple[int, int]]:
    """Row ranges ``[lo, hi)`` of a job's parts, in order: one per probe shard (`probe_items`), then the rest in
    parts of at most `items_per_worker`. They partition ``[0, items)`` exactly (no gap, no overlap, none empty)."""
    if items < 1 or items_per_worker < 1:
        raise DataError("items and items_per_worker: must be >= 1")
    if any(n < 1 for n in probe_items) or sum(probe_items) >= items:
        raise DataError(f"probe_items: each >= 1 and fewer than the job's {items} items together")
    bounds, lo = [], 0
    for n in probe_items:
        bounds.append((lo, lo + n))
        lo += n
    rest = items - lo
    n_rest = math.ceil(rest / items_per_worker)
    bounds += [(lo + i * items_per_worker, min(items, lo + (i + 1) * items_per_worker)) for i in range(n_rest)]
    return bounds


def plan_parts(output: Path, items: int, items_per_worker: int, dataset: Path | None,
               probe_items: Sequence[int] = ()) -> list[Part]:  # fmt: skip
    """Split `items` into parts (`part_bounds`) and write their inputs (idempotent).

    A re-run with the same dataset, split and probe sizes finds the same plan and the same files; a different
    one on an output directory that already holds a plan is refused, naming the parameter to change.
    """
    from oltunes.atomic import atomic_write_json
    from oltunes.worker.dataset import (  # the worker owns the dataset format
        read_dataset,
        write_dataset,
    )

    output = Path(output)
    bounds = part_bounds(items, items_per_worker, probe_items)
    n_parts = len(bounds)
    plan = {
        "dataset": str(dataset) if dataset else None,
        "dataset_sha256": sha256_file(dataset) if dataset else None,
        "items": items,
        "items_per_worker": items_per_worker,
        "parts": n_parts,
    }
    if probe_items:  # a plan without probes stays what it always was (older outputs resume)
        plan["probe_items"] = list(probe_items)
    plan_path = output / PLAN_FILE
    if plan_path.is_file():
        old = json.loads(plan_path.read_text())
        if {k: v for k, v in old.items() if k != "dataset"} != {k: v for k, v in plan.items() if k != "dataset"}:
            raise DataError(
                f"output: {output} holds another job's parts (planned {old}); use a new output directory"
            )
    else:
        output.mkdir(parents=True, exist_ok=True)
        atomic_write_json(plan_path, plan)
    parts = []
    data = None
    for i, (lo, hi) in enumerate(bounds):
        inp = dataset
        if dataset is not None and n_parts > 1:
            inp = output / "_inputs" / f"input-{i:05d}{dataset.suffix}"
            if not inp.is_file():
                data = data or read_dataset(dataset)
                write_dataset(inp, data.slice(lo, hi))
        wdir = output / f"worker-{i:05d}"
        parts.append(Part(index=i, input_path=inp, output_dir=wdir, run_dir=wdir / "_run", items=hi - lo, start=lo,
                          probe=i if i < len(probe_items) else None))
    return parts


def read_record(output: Path, name: str, model: type[R], what: str) -> R | None:
    """The record ``name`` a job in `output` wrote (``model``), or None; a damaged one is a clear error naming the
    file (the job's output directory is then not resumable)."""
    path = Path(output) / name
    if not path.is_file():
        return None
    try:
        return model.model_validate_json(path.read_text())
    except ValueError as e:
        raise DataError(f"output: {path} is not a valid {what} record; use a new output directory") from e


def recorded_decision(output: Path) -> Decision | None:
    """The decision a job in `output` was started with, if any (a re-run resumes with it, not a new one)."""
    return read_record(output, DECISION_FILE, Decision, "decision")


def record_decision(output: Path, decision: Decision) -> None:
    from oltunes.atomic import atomic_write_text

    atomic_write_text(Path(output) / DECISION_FILE, decision.model_dump_json(indent=2))


def job_outputs(output: Path) -> list[Path]:
    """Every prediction shard of a job, in part then shard order."""
    return sorted(Path(output).glob("worker-*/part-*.parquet"))


@dataclass(frozen=True)
class _PartStats:
    items: int
    wall_s: float
    p50: float
    p95: float
    p99: float
    accuracy: float | None
    energy_j: float
    energy_source: EnergySource
    gpu_util: float | None
    simulated: bool
    hdr: str | None = None  # the part's encoded latency histogram, when its worker wrote one


def _stats(r: WorkerResult) -> _PartStats | None:
    if r.measurement is not None:
        m = r.measurement
        return _PartStats(
            m.items, m.wall_s, m.latency_p50_ms, m.latency_p95_ms, m.latency_p99_ms, m.accuracy,
            m.energy_j_per_item * m.items, m.energy_source, m.gpu_util, m.simulated,
        )  # fmt: skip
    rep = r.report
    if not rep or not rep.get("items") or rep.get("latency_p99_ms") is None:
        return None  # everything was resumed from an earlier run: nothing was measured now
    t = r.telemetry
    return _PartStats(
        items=int(rep["items"]),
        wall_s=float(rep["wall_s"]),
        p50=float(rep["latency_p50_ms"]),
        p95=float(rep["latency_p95_ms"]),
        p99=float(rep["latency_p99_ms"]),
        accuracy=rep.get("accuracy"),
        energy_j=t.energy_j if t else 0.0,
        energy_source=t.energy_source if t else "estimated",
        gpu_util=t.gpu_util if t else None,
        simulated=False,
        hdr=rep.get("latency_hdr"),
    )


def _merged_percentiles(parts: list[_PartStats]) -> tuple[float, float, float] | None:
    """p50/p95/p99 of all parts' batches together (exact up to the histogram's 3 digits); None if a part has none."""
    if any(p.hdr is None for p in parts):
        return None
    from oltunes.worker.stats import LatencyHistogram

    merged = LatencyHistogram()
    for p in parts:
        merged.merge(LatencyHistogram.from_encoded(p.hdr))  # type: ignore[arg-type]
    return merged.percentile(50), merged.percentile(95), merged.percentile(99)  # type: ignore[return-value]


def measurement_from_results(
    job: JobSpec, candidate: Candidate, results: list[WorkerResult], decision: Decision | None = None
) -> Measurement | None:
    """Fold the parts of one job into one Measurement; None when no part measured anything (all resumed).

    Folding: items and energy add up; throughput is items per worker-second (the rate of one worker with this
    candidate, what the learner predicts); latency percentiles are those of every part's batches together,
    merged from the parts' HDR histograms. Parts without one (the simulator) fall back to the items-weighted
    mean of the parts' p50 and the worst part's p95/p99.
    Energy is ``measured`` only if every part measured it, ``simulated`` if simulated, else ``estimated``.
    """
    parts = [s for r in results if (s := _stats(r)) is not None]
    if not parts:
        return None
    items = sum(p.items for p in parts)
    wall = sum(p.wall_s for p in parts)
    with_acc = [p for p in parts if p.accuracy is not None]
    acc = sum(p.accuracy * p.items for p in with_acc) / sum(p.items for p in with_acc) if with_acc else None
    utils = [p.gpu_util for p in parts if p.gpu_util is not None]
    sources = {p.energy_source for p in parts}
    source: EnergySource = (
        "simulated" if "simulated" in sources else "measured" if sources == {"measured"} else "estimated"
    )
    merged = _merged_percentiles(parts)
    p50, p95, p99 = merged or (sum(p.p50 * p.items for p in parts) / items, max(p.p95 for p in parts), max(p.p99 for p in parts))
    return Measurement(
        job_id=job.job_id,
        decision_id=decision.decision_id if decision else None,
        kind=job.kind,
        arrival_rate_rps=job.arrival_rate_rps,
        candidate=candidate,
        items=items,
        wall_s=wall,
        latency_p50_ms=p50,
        latency_p95_ms=p95,
        latency_p99_ms=p99,
        throughput_items_per_s=items / wall if wall > 0 else 0.0,
        energy_j_per_item=sum(p.energy_j for p in parts) / items,
        energy_source=source,
        accuracy=None if acc is None else min(max(acc, 0.0), 1.0),
        gpu_util=sum(utils) / len(utils) if utils else None,
        simulated=any(p.simulated for p in parts),
    )
