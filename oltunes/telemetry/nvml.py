"""NVML adaptor: GPU utilisation, memory, power and the total-energy counter.

`pynvml` (the ``nvidia-ml-py`` package) is imported only when a GPU reading is asked for, so a machine without
a GPU imports OLTunes without touching NVML; when NVML is absent the calls raise `MissingDependency` with what
to install or check. This module is the only place that talks to NVML (tests fake exactly this seam).
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from oltunes.errors import MissingDependency


def _nvml() -> ModuleType:
    """Import and initialise NVML, translating every failure into `MissingDependency`."""
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError as e:
        raise MissingDependency("NVML bindings are not installed: pip install nvidia-ml-py") from e
    try:
        pynvml.nvmlInit()
    except Exception as e:  # pynvml raises NVMLError subclasses built at run time
        raise MissingDependency(
            f"NVML is not usable on this machine ({e}); GPU telemetry needs an NVIDIA driver (nvidia-smi must work)"
        ) from e
    return pynvml


def available() -> bool:
    """True when NVML initialises (a driver and at least the library are present)."""
    try:
        _nvml()
    except MissingDependency:
        return False
    return True


@dataclass(frozen=True)
class GpuSample:
    """One instantaneous reading of one device."""

    util: float  # fraction of time a kernel was running, in [0, 1]
    memory_used_mb: float
    power_w: float


@dataclass
class GpuReading:
    """What a `GpuSession` measured between `start()` and `stop()`, summed/averaged over its devices."""

    wall_s: float
    energy_j: float
    mean_util: float | None
    max_memory_used_mb: float | None
    mean_power_w: float | None  # all devices together
    samples: int
    energy_counter: bool  # False when energy was integrated from power samples (pre-Volta GPUs)


@dataclass
class GpuSession:
    """Read a set of GPUs (by UUID, or by index when given digits) over an interval.

    Energy comes from ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since driver load) where the device has it;
    otherwise power samples are integrated over time (still a measurement, only coarser).
    """

    device_ids: tuple[str, ...]
    _nv: Any = None
    _handles: list[Any] = field(default_factory=list)
    _energy0: list[float | None] = field(default_factory=list)
    _t0: float = 0.0
    _t_last: float = 0.0
    _samples: list[list[GpuSample]] = field(default_factory=list)
    _integrated_j: list[float] = field(default_factory=list)

    def start(self) -> None:
        self._nv = _nvml()
        nv = self._nv
        self._handles = []
        for dev in self.device_ids or ("0",):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(int(dev)) if dev.isdigit() else nv.nvmlDeviceGetHandleByUUID(dev)
            except Exception as e:
                raise MissingDependency(f"GPU {dev!r} not found by NVML ({e}); check the pool's device_ids") from e
            self._handles.append(h)
        self._energy0 = [self._energy_mj(h) for h in self._handles]
        self._samples = [[] for _ in self._handles]
        self._integrated_j = [0.0 for _ in self._handles]
        self._t0 = self._t_last = time.monotonic()
        self.sample()

    def _energy_mj(self, handle: Any) -> float | None:
        try:
            return float(self._nv.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception:  # NotSupported on devices older than Volta
            return None

    def sample(self) -> list[GpuSample]:
        nv = self._nv
        now = time.monotonic()
        dt = now - self._t_last
        self._t_last = now
        out = []
        for i, h in enumerate(self._handles):
            util = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
            mem = nv.nvmlDeviceGetMemoryInfo(h).used / 2**20
            power = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
            s = GpuSample(util=util, memory_used_mb=mem, power_w=power)
            self._samples[i].append(s)
            self._integrated_j[i] += power * dt
            out.append(s)
        return out

    def stop(self) -> GpuReading:
        self.sample()
        wall = time.monotonic() - self._t0
        energy = 0.0
        counter = True
        for i, h in enumerate(self._handles):
            e1 = self._energy_mj(h)
            if self._energy0[i] is not None and e1 is not None:
                energy += (e1 - self._energy0[i]) / 1000.0
            else:
                counter = False
                energy += self._integrated_j[i]
        flat = [s for dev in self._samples for s in dev]
        n = len(flat)
        per_device = len(self._samples[0]) if self._samples else 0
        try:
            self._nv.nvmlShutdown()
        except Exception:  # shutting down is best effort; the reading is already taken
            pass
        return GpuReading(
            wall_s=wall,
            energy_j=energy,
            mean_util=sum(s.util for s in flat) / n if n else None,
            max_memory_used_mb=max((s.memory_used_mb for s in flat), default=None),
            mean_power_w=sum(s.power_w for s in flat) / per_device if per_device else None,  # summed over devices
            samples=n,
            energy_counter=counter,
        )
