"""The types every part shares: the real path (Prefect + worker) and the simulator pass exactly these.

    JobSpec ──► Tuner.decide(job, ClusterState) ──► Decision(candidate, group, explanation)
    Measurement (what really happened for one Decision) ──► Tuner.observe(...)

Units: latency in milliseconds, energy in joules, accuracy as a fraction in [0, 1], power in watts.
"""

from __future__ import annotations

import os
import time
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Precision = Literal["fp32", "fp16", "int8"]
JobKind = Literal["batch", "streaming"]
Objective = Literal["energy", "completion_time", "cost"]
DecisionSource = Literal["model", "prior", "explore", "fallback", "policy"]
EnergySource = Literal["measured", "estimated", "simulated"]
Purpose = Literal["serve", "shadow", "probe"]  # why a measurement was taken (exploration is shadow or probe)
MAX_TRIALS = 8  # candidates a decision may suggest trying (shadows, probe shards)
SHADOW_SHARE = 0.02  # default share of a stream's requests mirrored to its shadow (gateway, flow, simulator)
PROBE_SHARE = 0.02  # default share of a batch job's items in each probe shard (the batch flow, the simulator)


# Limits on everything that enters from outside (HTTP bodies, CLI files, flow parameters). Ids and names become
# file names, MLflow tags and dict keys, so they share one strict pattern: no path separators, no leading dot.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_ID_CHARS = 128
MAX_TEXT_CHARS = 4096  # free text (notes, reasons) and file paths
MAX_QUANTITY = 1e12  # any measured or configured quantity (ms, J, items/s, W, GB, rps, s)
MAX_COUNT = 10**12  # items, parameters, bytes
MAX_SETTING = 1 << 20  # batch sizes, concurrencies, device counts and slots
MAX_LIST = 10_000  # pools, placements, co-runners, group members

# Physical bounds on what a measurement may report (the learner's inputs). Wider than any real run, narrow enough
# that no accepted value drives a prediction out of `Quantity`'s range:
MIN_LATENCY_MS = 1e-3  # 1 us: no batch, timed from the host, completes faster (one kernel launch alone is ~5 us)
MAX_LATENCY_MS = 86_400_000.0  # one day for one batch: beyond that it is a hang, not a latency
MAX_THROUGHPUT = 1e9  # items/s on one candidate: the largest accelerator (~4e15 op/s) over a 1e6-op model, or a
#                       host feeding a billion items a second; 0 = nothing completed (an empty run)
MAX_ENERGY_J_PER_ITEM = 1e7  # a 10 kW server busy for 1,000 s per item; 0 = no energy counter and no estimate

Id = Annotated[str, StringConstraints(max_length=MAX_ID_CHARS, pattern=ID_PATTERN)]
Label = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS)]  # display only, never a path
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)]
Quantity = Annotated[float, Field(ge=0, le=MAX_QUANTITY)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Setting = Annotated[int, Field(ge=1, le=MAX_SETTING)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Latency = Annotated[float, Field(ge=MIN_LATENCY_MS, le=MAX_LATENCY_MS)]  # measured: within physics
Delay = Annotated[float, Field(ge=0, le=MAX_LATENCY_MS)]  # a wait, may be none
Throughput = Annotated[float, Field(ge=0, le=MAX_THROUGHPUT)]
EnergyPerItem = Annotated[float, Field(ge=0, le=MAX_ENERGY_J_PER_ITEM)]


def clamp_quantity(x: float, nan: float = MAX_QUANTITY) -> float:
    """`x` forced into `Quantity`'s range; NaN becomes `nan` (by default the pessimistic top: a predicted
    latency or energy the learner cannot tell is never chosen over a known one). Where a `Prediction` is
    built from the learner's extrapolation, so that no learnt value can make a decision invalid."""
    if x != x:  # NaN
        return nan
    return min(max(float(x), 0.0), MAX_QUANTITY)


def new_id() -> str:
    """32 random hex digits (a UUID4's 122 random bits and more, at a fifth of ``uuid.uuid4().hex``'s cost: the
    simulator makes one per measurement)."""
    return os.urandom(16).hex()


def new_ids(n: int) -> list[str]:
    """``n`` ids of ``new_id``'s form from one draw of random bytes (one system call for a batch of them)."""
    digits = os.urandom(16 * n).hex()
    return [digits[32 * k : 32 * k + 32] for k in range(n)]


class _Frozen(BaseModel):
    # allow_inf_nan=False: NaN/Infinity are refused with the field's name (they would poison the learner)
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Accelerator(_Frozen):
    """One accelerator type (a GPU model, or a CPU socket share for local pools)."""

    name: Id = Field(description="e.g. cpu, t4, v100, a100, h100, l4")
    memory_gb: Quantity = Field(gt=0)
    idle_w: Quantity
    max_w: Quantity = Field(gt=0)
    cost_per_hour: Quantity = 0.0

    @model_validator(mode="after")
    def _power_order(self) -> Accelerator:
        if self.idle_w > self.max_w:
            raise ValueError(f"accelerator {self.name}: idle_w ({self.idle_w}) exceeds max_w ({self.max_w})")
        return self


class Pool(_Frozen):
    """A homogeneous group of devices; the unit the tuner chooses between."""

    name: Id
    accelerator: Accelerator
    count: Setting = Field(description="devices in the pool")
    slots_per_device: Setting = Field(default=4, description="max jobs co-running on one device")
    cpu_set: tuple[Annotated[int, Field(ge=0, le=MAX_SETTING)], ...] | None = Field(
        default=None, max_length=MAX_LIST, description="CPU cores (local CPU pools)")
    device_ids: tuple[Label, ...] = Field(default=(), max_length=MAX_LIST,
                                          description="GPU (or MIG) UUIDs (Docker launcher)")
    engine: str | None = Field(
        default=None,
        pattern=r"^(unix|tcp|ssh)://[^\s]{1,250}$",
        description="Docker engine of this pool's host (Docker launcher); default: DOCKER_HOST",
    )


class Variant(_Frozen):
    """One servable model variant: family × size × precision, with its measured accuracy."""

    family: Id
    name: Id = Field(description="unique id, e.g. cnn-m-int8")
    size: Label = Field(description="size label within the family, e.g. s/m/l or resnet50")
    precision: Precision = "fp32"
    accuracy: Fraction
    params: Count = 0
    bytes: Count = 0
    gflops: Quantity = Field(default=0.0, description="compute per item (GFLOPs, one inference at the architecture's "
                             "reference input, e.g. 224x224 or 128 tokens); 0 = unknown")
    path: Text | None = Field(default=None, description="ONNX file; the tuning service accepts only model-store files")


class CoRunner(_Frozen):
    """What the tuner knows about another job sharing the same device."""

    job_id: Id
    family: Id
    variant: Id
    size: Label
    precision: Precision = "fp32"
    batch_size: Setting = 1
    load: Quantity = Field(default=1.0, description="share of its device time the co-runner keeps busy")


class Candidate(_Frozen):
    """One configuration point: where and how a job would run."""

    pool: Id
    accelerator: Id
    variant: Variant
    batch_size: Setting
    concurrency: Setting = 1
    co_runners: tuple[CoRunner, ...] = Field(default=(), max_length=MAX_LIST)

    @property
    def key(self) -> str:
        """Stable identity (co-runners excluded): pool/variant/batch/concurrency."""
        return f"{self.pool}/{self.variant.name}/b{self.batch_size}/c{self.concurrency}"


class JobSpec(_Frozen):
    """An inference job as a user submits it."""

    job_id: Id = Field(default_factory=new_id,
                       description="any id: a letter or digit, then letters, digits, . _ -; default: a fresh one")
    kind: JobKind = Field(default="batch", description="batch (a fixed set of items) or streaming (requests over time)")
    family: Id = Field(description="model family to serve (a zoo family: `oltunes zoo list`)")
    slo_ms: Quantity = Field(gt=0, description="p99 latency bound: per request (streaming) or per batch (batch)")
    accuracy_floor: Fraction = Field(default=0.0, description="lowest acceptable variant accuracy, 0-1")
    objective: Objective = Field(default="energy", description=(
        "batch jobs: what to minimise per item over the job: energy (J/item), completion_time (s for all "
        "items) or cost ($/item); streaming jobs always minimise energy per item at the batch their rate fills"))
    arrival_rate_rps: Quantity = Field(default=0.0, description="expected request rate (streaming)")
    items: Count = Field(default=0, description="items to process (batch)")
    deadline_s: Quantity | None = Field(default=None, gt=0, description="optional: seconds the job should finish in")
    trials: int = Field(default=0, ge=0, le=MAX_TRIALS, description=(
        "how many other candidates the decision should suggest trying beside the chosen one: a shadow "
        "(streaming) or a probe shard (batch) each; 0 = none"))


class Placement(_Frozen):
    """A job currently running on one device of a pool."""

    job_id: Id
    pool: Id
    device: int = Field(ge=0, le=MAX_SETTING)
    candidate: Candidate
    slo_ms: Quantity = Field(gt=0)
    arrival_rate_rps: Quantity = 0.0


class ClusterState(BaseModel):
    """The pools and what runs on them now."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    pools: list[Pool] = Field(max_length=MAX_LIST)
    placements: list[Placement] = Field(default=[], max_length=MAX_LIST)

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(f"unknown pool {name!r}; known: {', '.join(p.name for p in self.pools)}")

    def jobs_on(self, pool: str, device: int | None = None) -> list[Placement]:
        return [pl for pl in self.placements if pl.pool == pool and (device is None or pl.device == device)]

    def free_slots(self, pool: str) -> int:
        p = self.pool(pool)
        return p.count * p.slots_per_device - len(self.jobs_on(pool))


class Prediction(_Frozen):
    latency_p99_ms: Quantity = Field(description="p99 latency of one batch")
    energy_j_per_item: Quantity
    throughput_items_per_s: Quantity
    margin_ms: Quantity = Field(default=0.0, description="uncertainty added to latency before the SLO check")

    @classmethod
    def clamped(cls, latency_p99_ms: float, energy_j_per_item: float, throughput_items_per_s: float,
                margin_ms: float) -> Prediction:
        """A model's prediction forced into range, so that an extrapolation from extreme but valid measurements
        never makes a decision invalid: NaN latency, energy or margin become the top (never preferred), NaN
        throughput 0."""
        return cls(latency_p99_ms=clamp_quantity(latency_p99_ms), energy_j_per_item=clamp_quantity(energy_j_per_item),
                   throughput_items_per_s=clamp_quantity(throughput_items_per_s, nan=0.0),
                   margin_ms=clamp_quantity(margin_ms))


class Alternative(_Frozen):
    """A runner-up candidate and why it lost."""

    candidate_key: Text
    prediction: Prediction
    reason: Text
    objective: Quantity | None = Field(
        default=None, description="the value candidates were ranked on (unit: Explanation.ranked_on); None: not ranked")


class ColocationGroup(_Frozen):
    """Jobs allowed to share one device, with each member's predicted slowdown (1.0 = none)."""

    group_id: Id = Field(default_factory=new_id)
    pool: Id
    device: int = Field(ge=0, le=MAX_SETTING)
    members: tuple[Id, ...] = Field(min_length=1, max_length=MAX_LIST, description="job ids")
    predicted_slowdown: dict[Id, Quantity] = Field(default={}, max_length=MAX_LIST)


class Explanation(_Frozen):
    predicted: Prediction
    n_candidates: Count
    n_feasible: Count
    runner_ups: tuple[Alternative, ...] = Field(default=(), max_length=MAX_LIST)
    note: Text = ""
    ranked_on: Text = Field(default="", description="what the objective values are, with their unit")
    objective: Quantity | None = Field(default=None, description="the chosen candidate's objective value")
    near_equal_band: Quantity = Field(default=0.0, description="relative objective gap counted as near-equal")
    would_have_chosen: Text = Field(
        default="", description="candidate key of the best feasible on the objective alone, when not the chosen")


class Advice(_Frozen):
    """Advisory mode (`oltunes.tuner.advisory`): what the tuner would have chosen for a job that ran on its baseline
    instead, and the tuner's predictions for both (the baseline's is None where the tuner cannot predict a given
    candidate: a tuning service behind its client)."""

    decision_id: Id = Field(description="the tuner's own decision (not run)")
    candidate_key: Text = Field(description="what the tuner would have chosen")
    source: DecisionSource = "model"
    predicted: Prediction = Field(description="the tuner's prediction for its own choice")
    ran_predicted: Prediction | None = Field(default=None, description="the tuner's prediction for what ran")
    ranked_on: Text = Field(default="", description="the quantity of predicted_saving, with its unit")
    predicted_saving: float | None = Field(
        default=None, allow_inf_nan=False, description="objective of what ran minus the tuner's choice's, both "
        "predicted by the tuner (> 0: the tuner's choice is predicted better)")


class Trial(_Frozen):
    """A candidate worth trying beside the chosen one (a shadow or a probe shard), and why: ``value`` is the net
    expected saving over the job's run if it were measured (`oltunes.tuner.decide.trials`)."""

    candidate: Candidate
    device: int = Field(ge=0, le=MAX_SETTING, description="device of the candidate's pool to try it on")
    predicted: Prediction
    value: Quantity = Field(description=(
        "net expected saving over the job's run, in the objective's unit (a per-item objective x the items), less "
        "the trial's own cost"))


class Decision(_Frozen):
    """The tuner's answer for one job."""

    decision_id: Id = Field(default_factory=new_id)
    job_id: Id
    candidate: Candidate
    group: ColocationGroup | None = None
    source: DecisionSource = "model"
    feasible: bool = True
    explanation: Explanation
    advice: Advice | None = Field(default=None, description="advisory mode: the tuner's choice, not run")
    trials: tuple[Trial, ...] = Field(default=(), max_length=MAX_TRIALS,
                                      description="candidates to try beside this one (JobSpec.trials), best first")

    @property
    def pool(self) -> str:
        return self.candidate.pool

    @property
    def variant(self) -> Variant:
        return self.candidate.variant


class Measurement(_Frozen):
    """What really happened when a Decision ran (or what the simulator says happened)."""

    measurement_id: Id = Field(default_factory=new_id, description="idempotency key: observed at most once")
    job_id: Id
    decision_id: Id | None = None
    kind: JobKind = "batch"
    arrival_rate_rps: Quantity = 0.0
    candidate: Candidate
    items: Count
    wall_s: Quantity
    latency_p50_ms: Latency
    latency_p95_ms: Latency
    latency_p99_ms: Latency = Field(description="p99 latency of one batch")
    throughput_items_per_s: Throughput
    energy_j_per_item: EnergyPerItem
    energy_source: EnergySource
    accuracy: Fraction | None = None
    gpu_util: Fraction | None = None
    request_latency_p99_ms: Latency | None = Field(
        default=None, description="streaming: p99 end-to-end request latency (queueing + batch fill + batch)")
    queueing_delay_ms: Delay | None = Field(
        default=None, description="streaming: mean wait of a request before its batch starts")
    simulated: bool = False
    purpose: Purpose = Field(default="serve", description=(
        "serve: the job's own work; shadow: mirrored requests whose answers were discarded; probe: a small first "
        "shard of a batch job run on a candidate before committing"))
    timestamp: Quantity = Field(default_factory=time.time, description="seconds since the epoch")
