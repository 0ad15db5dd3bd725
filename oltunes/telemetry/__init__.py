"""Telemetry: what a worker consumed (utilisation, energy), measured where a counter exists, else estimated.

- GPU pools: NVML (`oltunes.telemetry.nvml`, imported lazily) — utilisation, memory, power, total energy.
- CPU pools: psutil utilisation; RAPL package energy when ``/sys/class/powercap`` is readable; otherwise
  CPU time x ``settings.cpu_watts_per_core`` tagged ``energy_source=estimated``.
"""

from oltunes.telemetry.cpu import estimate_energy_j, process_cpu_time, rapl_zones
from oltunes.telemetry.monitor import Monitor, TelemetryReport

__all__ = ["Monitor", "TelemetryReport", "estimate_energy_j", "process_cpu_time", "rapl_zones"]
