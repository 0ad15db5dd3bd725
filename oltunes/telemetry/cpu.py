"""CPU telemetry: utilisation from psutil, package energy from RAPL when readable, otherwise an estimate.

RAPL (``/sys/class/powercap/intel-rapl:N/energy_uj``) is a real energy counter of the whole CPU package (every
process on the socket counts), so a run that reads it is tagged ``energy_source=measured``. Containers and most
VMs do not expose it; then energy is estimated as CPU time x ``settings.cpu_watts_per_core`` and the run is
tagged ``energy_source=estimated`` — never presented as a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class RaplZone:
    path: Path  # e.g. /sys/class/powercap/intel-rapl:0
    max_uj: int  # the counter wraps at this value

    def read_uj(self) -> int:
        return int((self.path / "energy_uj").read_text().strip())


def rapl_zones(root: Path = POWERCAP) -> list[RaplZone]:
    """Readable top-level package zones (``intel-rapl:N``; sub-zones such as ``:N:M`` would double count)."""
    zones = []
    if not root.is_dir():
        return zones
    for d in sorted(root.glob("intel-rapl:*")):
        if d.name.count(":") != 1:
            continue
        try:
            zone = RaplZone(d, int((d / "max_energy_range_uj").read_text().strip()))
            zone.read_uj()
        except (OSError, ValueError):  # unreadable (permissions) or malformed: not usable
            continue
        zones.append(zone)
    return zones


class RaplCounter:
    """Package energy between `start()` and `stop()`, handling counter wrap-around."""

    def __init__(self, zones: list[RaplZone]):
        self.zones = zones
        self._e0: list[int] = []

    def start(self) -> None:
        self._e0 = [z.read_uj() for z in self.zones]

    def stop(self) -> float:
        total_uj = 0
        for z, e0 in zip(self.zones, self._e0, strict=True):
            e1 = z.read_uj()
            total_uj += e1 - e0 if e1 >= e0 else e1 + z.max_uj - e0
        return total_uj / 1e6


def process_cpu_time(pid: int) -> float | None:
    """User + system CPU seconds of a live process and its live children; None once it has gone."""
    try:
        p = psutil.Process(pid)
        t = p.cpu_times()
        total = t.user + t.system
        for c in p.children(recursive=True):
            try:
                ct = c.cpu_times()
                total += ct.user + ct.system
            except psutil.Error:
                continue
        return total
    except psutil.Error:
        return None


def estimate_energy_j(cpu_time_s: float, watts_per_core: float) -> float:
    """The documented estimate: each busy core-second costs `watts_per_core` joules."""
    return max(cpu_time_s, 0.0) * watts_per_core


@dataclass
class CpuUtilSampler:
    """Tracks the last known CPU time of a process (it cannot be read once the process has exited)."""

    pid: int
    last_cpu_s: float = 0.0

    def start(self) -> None:
        self.last_cpu_s = process_cpu_time(self.pid) or 0.0

    def sample(self) -> None:
        t = process_cpu_time(self.pid)
        if t is not None:
            self.last_cpu_s = max(self.last_cpu_s, t)
