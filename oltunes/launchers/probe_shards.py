"""Probe shards of a batch job: which candidates a large job tries first, on how many rows, and their record.

Before a large job commits to one candidate, its first rows run as small shards, one per candidate: the decision's
own choice and the top trials it suggests (`oltunes.types.Decision.trials`). Each shard's measurement is observed
with ``purpose='probe'``, then the job is decided again and runs the rest of its rows on that decision. The probe
shards' rows are part of the output: they are the job's first parts (`oltunes.launchers.batch_job.part_bounds`).

`ProbeRecord` (``<output>/_probes.json``, written atomically before any probe runs) is what a re-run resumes:
the first decision and, per probe shard, its decision and its row count, so an interrupted probe continues on
the same candidate (its worker skips the finished shards) and a finished one is not run again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from oltunes.errors import DataError
from oltunes.launchers.batch_job import read_record
from oltunes.types import MAX_TRIALS, ColocationGroup, Decision, Prediction, new_id

__all__ = ["MIN_PROBE_BATCHES", "PROBES_FILE", "MAX_PROBED_SHARE", "ProbeRecord", "ProbeShard", "probe_decisions",
           "probe_sizes", "recorded_probes"]

PROBES_FILE = "_probes.json"
MIN_PROBE_BATCHES = 4  # fewer batches say little about a candidate's latency
MAX_PROBED_SHARE = 0.25  # the probe shards together never take more of a job than this


class ProbeShard(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: int = Field(ge=1, description="rows of the shard")
    decision: Decision = Field(description="the candidate it runs on, leased as its own job")


class ProbeRecord(BaseModel):
    """What a job's probe shards are: written before the first runs, read back by a re-run."""

    model_config = ConfigDict(extra="forbid")

    first: Decision = Field(description="the decision the probes were chosen from (its choice and its trials)")
    probes: list[ProbeShard] = Field(min_length=1, max_length=MAX_TRIALS + 1)

    @property
    def items(self) -> list[int]:
        return [p.items for p in self.probes]

    def save(self, output: Path) -> None:
        from oltunes.atomic import atomic_write_text

        atomic_write_text(Path(output) / PROBES_FILE, self.model_dump_json(indent=2))


def recorded_probes(output: Path) -> ProbeRecord | None:
    """The probe shards a job in `output` was started with, if any."""
    return read_record(output, PROBES_FILE, ProbeRecord, "probe")


def probe_sizes(items: int, predicted: Sequence[tuple[int, Prediction]], share: float, max_s: float) -> list[int]:
    """Rows of each probe shard: ``share`` of the job, at least `MIN_PROBE_BATCHES` batches of the candidate's
    batch size, at most what the candidate is predicted to do in ``max_s`` seconds (and at least one batch); all
    of them together at most `MAX_PROBED_SHARE` of the job (scaled down evenly), each at least one row.

    `predicted`: per probe, the candidate's batch size and its prediction."""
    if items < 1 or not predicted:
        raise DataError("probe_sizes: a job of >= 1 items and >= 1 candidate")
    want = math.ceil(share * items)
    sizes = []
    for batch, pred in predicted:
        n = max(want, MIN_PROBE_BATCHES * batch)
        thr = pred.throughput_items_per_s
        if thr > 0:
            n = min(n, max(math.floor(thr * max_s), batch))
        sizes.append(max(n, 1))
    budget = max(math.floor(MAX_PROBED_SHARE * items), len(sizes))
    if sum(sizes) > budget:
        scale = budget / sum(sizes)
        sizes = [max(1, math.floor(n * scale)) for n in sizes]
        while sum(sizes) > budget:  # the rows the floor of 1 added back, taken from the largest
            sizes[sizes.index(max(sizes))] -= 1
    if sum(sizes) >= items:
        raise DataError(f"items: a job of {items} rows is too small for {len(sizes)} probe shards")
    return sizes


def probe_decisions(first: Decision, device: int, limit: int) -> list[Decision]:
    """One decision per probe shard, each for a job of its own (``<job>.probe-<i>``, leased apart): the first
    decision's choice on `device` (where its lease put it), then up to `limit` of its trials, each on its own device."""
    targets = [(first.candidate, device, first.explanation.predicted, "the decision's choice")]
    targets += [(t.candidate, t.device, t.predicted, f"trial {i + 1}, expected improvement {t.value:.4g} "
                 f"({first.explanation.ranked_on or 'objective'})") for i, t in enumerate(first.trials[:limit])]
    out = []
    for i, (cand, dev, pred, why) in enumerate(targets):
        job_id = probe_job_id(first.job_id, i)
        note = f"probe shard {i} of job {first.job_id} (decision {first.decision_id}): {why}"
        changes = {"predicted": pred, "note": note[:500], "runner_ups": ()} if i else {"note": note[:500]}
        expl = first.explanation.model_copy(update=changes)
        out.append(first.model_copy(update={
            "decision_id": new_id(), "job_id": job_id, "candidate": cand, "trials": (), "advice": None,
            "source": first.source if i == 0 else "explore", "explanation": expl,
            "group": ColocationGroup(pool=cand.pool, device=dev, members=(job_id,)),
        }))
    return out


def probe_job_id(job_id: str, index: int) -> str:
    """The id a probe shard is leased (and its measurement's decision made) under."""
    suffix = f".probe-{index}"
    return job_id[: 128 - len(suffix)] + suffix
