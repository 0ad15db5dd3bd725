"""What one simulated (scenario, policy) run leaves for the metrics and the report."""

from __future__ import annotations

from dataclasses import dataclass, field

from oltunes.sim.jobrun import JobRun


@dataclass
class RunResult:
    """Everything metrics and the report need from one (scenario, policy) run."""

    policy: str
    duration_s: float
    interval_s: float
    runs: list[JobRun]
    best_accuracy: dict[str, float]
    # per control interval
    t: list[float] = field(default_factory=list)
    util: list[float] = field(default_factory=list)
    energy_j: list[float] = field(default_factory=list)
    active_devices: list[int] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)
    capacity_violations: int = 0
    floor_violations: int = 0
    invalid_decisions: int = 0
    decisions: int = 0
    wall_s: float = 0.0
