"""MLflow naming conventions: one place that says what every run looks like (see ``mlflow/README.md``).

- experiment per flow kind: ``oltunes-batch``, ``oltunes-streaming``, ``oltunes-simulation``;
- run per batch job / per streaming service;
- params = the decision (pool, accelerator, variant, precision, batch, concurrency, group, ...): what differs
  between configurations, so the parallel-coordinates plot and "show diff only" stay readable;
- metrics = `METRICS` (same names everywhere, so runs compare in the UI without post-processing);
- tags = ids (job, decision, measurement), policy, energy source, simulated; a batch run's measurement JSON; the
  decision's chosen and would-have-chosen candidates (``oltunes.tracking.decisions``);
- artifacts = each decision's explanation (``oltunes/decisions/<id>.json`` and ``.txt``);
- a streaming run's per-step measurement records: JSON-lines chunks under the artifact folder `STEPS_DIR`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from oltunes.types import Candidate, Decision, Measurement

EXPERIMENTS: dict[str, str] = {
    "batch": "oltunes-batch",
    "streaming": "oltunes-streaming",
    "simulation": "oltunes-simulation",
    "models": "oltunes-models",
}

# MLflow 3's UI opens experiments in its GenAI view unless they say they hold model-development runs.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}

LATENCY_P50 = "latency_p50_ms"
LATENCY_P99 = "latency_p99_ms"
THROUGHPUT = "throughput_items_per_s"
ENERGY = "energy_j_per_item"
ENERGY_MJ = "energy_mj_per_item"  # the same in millijoules: MLflow's tables round to 3 decimals (0.004 J/item)
ACCURACY = "accuracy"
SLO_MET = "slo_met"
GPU_UTIL = "gpu_util"
METRICS = (LATENCY_P99, ENERGY_MJ, ENERGY, LATENCY_P50, THROUGHPUT, ACCURACY, SLO_MET, GPU_UTIL)

TAG_JOB = "job_id"
TAG_POLICY = "policy"
TAG_ENERGY_SOURCE = "energy_source"
TAG_SIMULATED = "simulated"
TAG_KIND = "flow_kind"
TAG_DECISION_SOURCE = "decision_source"
TAG_DECISION_ID = "decision_id"  # random ids are tags, not params: they would clutter every comparison
TAG_MEASUREMENT_ID = "measurement_id"
TAG_KEY = "oltunes.idempotency_key"  # one run per key (a batch job's measurement_id)
TAG_SERVICE = "oltunes.service_id"  # one run per streaming service
TAG_SERVICE_URL = "oltunes.service_url"  # where the streaming service's clients reach it (its gateway)
TAG_MEASUREMENT = "oltunes.measurement"  # a batch run's Measurement as JSON
TAG_MEASUREMENT_PREFIX = "oltunes.measurement."  # older runs: + measurement_id (read, no longer written)
STEPS_DIR = "oltunes/steps"  # streaming runs: <first>-<last>.jsonl, one Measurement JSON per line
TAG_FAILURE = "oltunes.failure"  # a job that failed: why (its run has status FAILED and no measurement)
LAST_STEP = "oltunes.last_step"  # metric: the last step whose chunk landed (replay skips chunks up to it)


def measurements_in_tags(tags: dict[str, str]) -> list[Measurement]:
    """The Measurements a run's tags hold (the current tag, and the per-id tags older runs carry)."""
    return [parse_measurement(v) for k, v in tags.items() if k == TAG_MEASUREMENT or k.startswith(TAG_MEASUREMENT_PREFIX)]


def experiment_for(kind: str) -> str:
    return EXPERIMENTS.get(kind, f"oltunes-{kind}")


def decision_params(candidate: Candidate, decision: Decision | None = None) -> dict[str, str]:
    """The decision as MLflow params (strings; MLflow params are immutable once logged)."""
    v = candidate.variant
    params: dict[str, Any] = {
        "pool": candidate.pool,
        "accelerator": candidate.accelerator,
        "family": v.family,
        "variant": v.name,
        "variant_size": v.size,
        "precision": v.precision,
        "batch_size": candidate.batch_size,
        "concurrency": candidate.concurrency,
        "co_runners": ",".join(c.job_id for c in candidate.co_runners) or "none",
        "group": "none",
    }
    if decision is not None:
        if decision.group is not None:
            params["group"] = f"{decision.group.pool}/{decision.group.device}:{'+'.join(decision.group.members)}"
    return {k: str(val) for k, val in params.items()}


def measurement_metrics(m: Measurement, slo_ms: float | None = None) -> dict[str, float]:
    """The standard metrics of one Measurement; absent values are left out rather than logged as 0."""
    out: dict[str, float] = {  # what a user compares first, first (MLflow's compare views open on the first)
        LATENCY_P99: m.latency_p99_ms,
        ENERGY_MJ: m.energy_j_per_item * 1000.0,
        ENERGY: m.energy_j_per_item,
        LATENCY_P50: m.latency_p50_ms,
        "latency_p95_ms": m.latency_p95_ms,
        THROUGHPUT: m.throughput_items_per_s,
        "items": float(m.items),
        "wall_s": m.wall_s,
    }
    if m.accuracy is not None:
        out[ACCURACY] = m.accuracy
    if m.gpu_util is not None:
        out[GPU_UTIL] = m.gpu_util
    if m.request_latency_p99_ms is not None:
        out["request_latency_p99_ms"] = m.request_latency_p99_ms
    if m.queueing_delay_ms is not None:
        out["queueing_delay_ms"] = m.queueing_delay_ms
    if slo_ms is not None:
        out[SLO_MET] = 1.0 if m.latency_p99_ms <= slo_ms else 0.0
    return out


def measurement_tags(m: Measurement, policy: str = "", decision: Decision | None = None) -> dict[str, str]:
    return {
        TAG_MEASUREMENT_ID: m.measurement_id,
        TAG_ENERGY_SOURCE: m.energy_source,
        TAG_MEASUREMENT: m.model_dump_json(),
        **job_tags(m.job_id, m.kind, m.simulated, policy, decision),
    }


def job_tags(
    job_id: str, kind: str, simulated: bool, policy: str = "", decision: Decision | None = None
) -> dict[str, str]:
    """The ids and labels of a job's run, measured or not."""
    tags = {TAG_JOB: job_id, TAG_KIND: kind, TAG_SIMULATED: str(simulated).lower()}
    if policy:
        tags[TAG_POLICY] = policy
    if decision is not None:
        tags[TAG_DECISION_SOURCE] = decision.source
        tags[TAG_DECISION_ID] = decision.decision_id
    return tags


def steps_chunk(first: int, last: int) -> str:
    return f"{STEPS_DIR}/{first:09d}-{last:09d}.jsonl"


def dataset_record(path: Path, rows: int) -> dict[str, Any]:
    """The input dataset as ``log_input`` wants it: name, content digest, rows, source."""
    from oltunes.atomic import sha256_file

    path = Path(path).resolve()
    return {"name": path.stem, "digest": sha256_file(path)[:16], "rows": int(rows), "source": path.as_uri()}


def to_dataset_input(d: dict[str, Any]) -> Any:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    ds = Dataset(
        name=d["name"], digest=d["digest"], source_type="local", source=json.dumps({"uri": d["source"]}),
        profile=json.dumps({"num_rows": d["rows"]}),
    )  # fmt: skip
    return DatasetInput(ds, tags=[InputTag("mlflow.data.context", "inference")])


def parse_measurement(value: str) -> Measurement:
    return Measurement.model_validate(json.loads(value))
