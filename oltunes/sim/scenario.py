"""Scenario files: cluster (inventory ``pools:``) + workload + duration + seed, validated with pydantic.

A scenario is a YAML file; the shipped ones live in ``oltunes/scenarios/<name>.yaml`` and are found by name::

    name: light
    seed: 0
    duration_s: 300
    pools:                      # the inventory format of infra/inventory.yaml
      - {name: a100, accelerator: a100, count: 4}
    workload:
      streaming:
        - {trace: proteus, scenario: equal_gamma_300, families: [resnet, bert], replicas: 1}
        - {trace: azure, scenario: conv, families: [gpt2], slo_ms: 2000}
      batch:
        - {trace: philly, jobs: 10, families: [resnet], slo_ms: 2000}

Optional ``world`` (``grounded``, the default: the truth differs from the public profile table by hierarchical factors
with sigma per level estimated from real measurements, :mod:`oltunes.sim.world_noise`; ``stress``: one independent
log-normal factor per (variant, accelerator) with sigma ``truth_sigma``, default 0.5; giving ``truth_sigma`` alone
selects the stress world) and ``events`` (drift events, :mod:`oltunes.sim.events`). Errors name the offending field (``scenario light.yaml: field 'workload.streaming.0.replicas': ...``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from oltunes.errors import ConfigError, invalid
from oltunes.inventory import pools_from_data
from oltunes.sim.events import Event
from oltunes.types import Pool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamSpec(_Strict):
    """Streaming jobs replaying a real per-request arrival trace; one job per (family, replica)."""

    trace: Literal["proteus", "azure"]
    scenario: str = Field(default="equal_gamma_300", description="proteus sub-folder, or azure: conv | code")
    families: list[str] | None = Field(default=None, min_length=1, description="default: every proteus family")
    replicas: int = Field(default=1, ge=1, description="time-shifted copies of each stream")
    rate_scale: float = Field(default=1.0, gt=0, description="arrival-rate multiplier (thinning / shifted copies)")
    slo_ms: float | None = Field(default=None, gt=0, description="default: the trace's own SLO")
    accuracy_drop_max_pts: float = Field(default=4.0, ge=0, le=100, description="floor = family best - this")


class BatchSpec(_Strict):
    """Offline batch-inference jobs whose arrivals and sizes come from a cluster job trace."""

    trace: Literal["philly", "alibaba"]
    jobs: int = Field(ge=1)
    families: list[str] = Field(min_length=1)
    slo_ms: float = Field(gt=0, description="p99 latency bound per batch")
    items_per_gpu_second: float = Field(default=0.05, gt=0, description="items = trace GPU-seconds x this")
    min_items: int = Field(default=500, ge=1)
    max_items: int = Field(default=20_000, ge=1)
    arrival_window_s: float | None = Field(default=None, gt=0, description="default: first half of the run")
    accuracy_drop_max_pts: float = Field(default=4.0, ge=0, le=100)


class Workload(_Strict):
    streaming: list[StreamSpec] = []
    batch: list[BatchSpec] = []


class Scenario(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    seed: int = 0
    duration_s: float = Field(gt=0)
    control_interval_s: float = Field(default=5.0, gt=0, description="measurement / load-update period")
    retune_interval_s: float = Field(default=30.0, gt=0, description="adaptive policies re-decide this often")
    drop_after_slo: float = Field(default=5.0, gt=1, description="a request waiting longer than this x SLO is shed")
    world: Literal["grounded", "stress"] = Field(
        default="grounded", description="grounded: sigma per level from real disagreement; stress: independent sigma")
    truth_sigma: float | None = Field(
        default=None, ge=0, le=2, allow_inf_nan=False,
        description="stress world only: log-sigma of the seeded per-(variant, accelerator) factor between the public "
                    "profile table and the simulator's truth (default 0.5; 0 = the table is exact)")
    pools: list[dict[str, Any]] = Field(min_length=1)
    batch_sizes: list[int] = Field(default=[1, 2, 4, 8, 16], min_length=1)
    concurrencies: list[int] = Field(default=[1, 2, 3, 4], min_length=1)
    workload: Workload
    events: list[Event] = Field(default=[], max_length=100, description="drift events (oltunes.sim.events)")

    @model_validator(mode="after")
    def _world_fits(self) -> Scenario:
        if self.truth_sigma is not None and self.world == "grounded":
            if "world" in self.model_fields_set:
                raise ValueError("truth_sigma: only the stress world takes one (the grounded world's sigma is measured)")
            self.world = "stress"
        return self

    @model_validator(mode="after")
    def _events_fit(self) -> Scenario:
        pools = {str(p.get("name")): _accelerator_name(p.get("accelerator")) for p in self.pools}
        for i, ev in enumerate(self.events):
            if ev.at_s >= self.duration_s:
                raise ValueError(f"events.{i}.at_s: must fall inside the run (< duration_s)")
            pool = getattr(ev, "pool", None)
            if pool is not None and pool not in pools:
                raise ValueError(f"events.{i}.pool: no such pool in 'pools'")
            acc = getattr(ev, "accelerator", None)
            if acc is not None and acc not in pools.values():
                raise ValueError(f"events.{i}.accelerator: no pool of that accelerator type")
        return self

    @field_validator("batch_sizes", "concurrencies")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(x < 1 or x > 64 for x in v):
            raise ValueError("every value must be in 1..64")
        return sorted(set(v))

    def pool_list(self, source: str | None = None) -> list[Pool]:
        return pools_from_data({"pools": self.pools}, source=source or f"scenario {self.name}")


def _accelerator_name(spec: Any) -> str:
    """A pool's accelerator: a catalog name or an inline mapping with a ``name`` (inventory format)."""
    return str(spec.get("name")) if isinstance(spec, dict) else str(spec)


def scenario_from_data(data: Any, source: str = "scenario") -> Scenario:
    """Validate a mapping into a Scenario (pools included); errors name the field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as e:
        raise invalid(e, source) from e
    if not sc.workload.streaming and not sc.workload.batch:
        raise ConfigError(f"{source}: field 'workload': needs at least one streaming or batch entry")
    sc.pool_list(source)  # validate the inventory part now, not mid-run
    return sc


def shipped() -> list[str]:
    """Names of the scenarios shipped with the package."""
    root = resources.files("oltunes") / "scenarios"
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A shipped scenario by name, or a YAML file by path."""
    path = Path(name_or_path)
    if not path.is_file():
        candidate = resources.files("oltunes") / "scenarios" / f"{name_or_path}.yaml"
        if not candidate.is_file():
            raise ConfigError(f"scenario {str(name_or_path)!r}: no such file or shipped name; shipped: {', '.join(shipped())}")
        text, source = candidate.read_text(), f"scenario {name_or_path}"
    else:
        text, source = path.read_text(), f"scenario {path}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from e
    return scenario_from_data(data, source)
