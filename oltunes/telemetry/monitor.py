"""`Monitor`: watch one worker process (and its GPUs) over a run and report utilisation and energy."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from oltunes.telemetry.cpu import POWERCAP, CpuUtilSampler, RaplCounter, estimate_energy_j, rapl_zones
from oltunes.telemetry.nvml import GpuSession


class TelemetryReport(BaseModel):
    """What a run consumed. ``energy_source`` says whether `energy_j` is a measurement or an estimate."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_s: float = Field(ge=0)
    cpu_time_s: float | None = Field(default=None, ge=0)
    cpu_util: float | None = Field(default=None, ge=0, description="CPU time / (wall x assigned cores)")
    energy_j: float = Field(ge=0)
    energy_source: Literal["measured", "estimated"]
    energy_meter: str = Field(description="nvml | rapl | cpu_time_x_watts_per_core")
    gpu_util: float | None = Field(default=None, ge=0, le=1)
    gpu_memory_used_mb: float | None = Field(default=None, ge=0)
    power_w: float | None = Field(default=None, ge=0)


class Monitor:
    """Sample a worker while it runs.

    Parameters
    ----------
    pid
        The worker process (CPU time and utilisation); None when only GPUs are watched.
    cores
        CPU cores assigned to the worker (utilisation is relative to these).
    gpu_device_ids
        GPU UUIDs/indices to read through NVML; empty for CPU pools.
    watts_per_core
        Per-core power figure for the CPU estimate (``settings.cpu_watts_per_core``).
    interval_s
        Sampling period of the background thread.

    Examples
    --------
    >>> import os
    >>> m = Monitor(pid=os.getpid(), cores=1, watts_per_core=15.0, powercap_root=Path("/nonexistent"))
    >>> m.start()
    >>> r = m.stop(cpu_time_s=2.0)
    >>> (r.energy_source, r.energy_j)
    ('estimated', 30.0)
    """

    def __init__(
        self,
        *,
        pid: int | None = None,
        cores: int = 1,
        gpu_device_ids: tuple[str, ...] = (),
        gpu: bool = False,
        watts_per_core: float = 15.0,
        interval_s: float = 0.5,
        powercap_root: Path = POWERCAP,
    ):
        self.pid = pid
        self.cores = max(cores, 1)
        self.gpu = gpu or bool(gpu_device_ids)
        self.gpu_device_ids = gpu_device_ids
        self.watts_per_core = watts_per_core
        self.interval_s = interval_s
        self.powercap_root = powercap_root
        self._cpu: CpuUtilSampler | None = None
        self._gpu: GpuSession | None = None
        self._rapl: RaplCounter | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._cpu_t0 = 0.0

    def start(self) -> None:
        self._t0 = time.monotonic()
        if self.gpu:
            self._gpu = GpuSession(self.gpu_device_ids)
            self._gpu.start()  # raises MissingDependency when NVML is absent: a GPU pool needs it
        zones = rapl_zones(self.powercap_root)
        if zones:
            self._rapl = RaplCounter(zones)
            self._rapl.start()
        if self.pid is not None:
            self._cpu = CpuUtilSampler(self.pid)
            self._cpu.start()
            self._cpu_t0 = self._cpu.last_cpu_s  # a long-running worker has CPU time from before this interval
        self._thread = threading.Thread(target=self._loop, name="oltunes-telemetry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        if self._cpu is not None:
            self._cpu.sample()
        if self._gpu is not None:
            self._gpu.sample()

    def stop(self, cpu_time_s: float | None = None) -> TelemetryReport:
        """End the interval. `cpu_time_s` (exact, e.g. from ``os.wait4``) overrides the sampled CPU time."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()
        wall = time.monotonic() - self._t0
        if cpu_time_s is None and self._cpu is not None:
            cpu_time_s = max(self._cpu.last_cpu_s - self._cpu_t0, 0.0)
        cpu_util = cpu_time_s / (wall * self.cores) if cpu_time_s is not None and wall > 0 else None
        gpu_util = mem = power = None
        if self._gpu is not None:
            g = self._gpu.stop()
            energy, source, meter = g.energy_j, "measured", "nvml"
            gpu_util, mem, power = g.mean_util, g.max_memory_used_mb, g.mean_power_w
        elif self._rapl is not None:
            energy, source, meter = self._rapl.stop(), "measured", "rapl"
            power = energy / wall if wall > 0 else None
        else:
            energy = estimate_energy_j(cpu_time_s or 0.0, self.watts_per_core)
            source, meter = "estimated", "cpu_time_x_watts_per_core"
        return TelemetryReport(
            wall_s=wall,
            cpu_time_s=cpu_time_s,
            cpu_util=cpu_util,
            energy_j=max(energy, 0.0),
            energy_source=source,
            energy_meter=meter,
            gpu_util=None if gpu_util is None else min(max(gpu_util, 0.0), 1.0),
            gpu_memory_used_mb=mem,
            power_w=power,
        )

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._stop.is_set():
            self.stop()
