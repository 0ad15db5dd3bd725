"""Profile the zoo on this machine: every variant x batch size (x its precision) with ONNX Runtime's best provider,
written as rows of the profile store (:mod:`oltunes.sim.profile_store`) with "measured by this machine" provenance.

On a GPU (CUDA provider) each row also carries the board power NVML reports while the batches run (``power_w``: the
energy counter's joules over the run's seconds, else the mean of one power sample per batch; each (variant, batch)
runs at least ``POWER_WINDOW_S``) when ``pynvml`` is installed, and its accelerator is the store's key for the NVML
device name (``gpu_key``: ``NVIDIA H100 80GB HBM3`` -> ``h100``); on a CPU there is no power meter: the row's provenance
states the process CPU time per batch instead, labelled as such. One command on any CUDA machine adds GPU rows::

    oltunes zoo profile --out gpu_rows.csv
"""

from __future__ import annotations

import importlib
import os
import platform
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from oltunes.atomic import atomic_write_text
from oltunes.errors import ConfigError
from oltunes.sim.profile_store import COLUMNS, check_rows
from oltunes.worker.session import ModelSession
from oltunes.zoo.catalog import list_entries

LICENCE = "this project's own measurement"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# NVML device names -> the store's accelerator keys (the datasheets of oltunes.sim.world_specs); first match wins.
# A name no pattern knows keeps its own slug ("gpu-<name>"): never guessed onto a neighbour (an A10G is not an A10).
_GPU_KEYS = [(r"H100.*NVL", "h100-nvl"), (r"H100.*PCIe", "h100-pcie"), (r"H100", "h100"), (r"H200", "h200"),
             (r"A100.*PCIe", "a100-pcie"), (r"A100", "a100"), (r"\bA30\b", "a30"), (r"\bA40\b", "a40"),
             (r"\bA10\b", "a10"), (r"\bA2\b", "a2"), (r"\bL40S\b", "l40s"), (r"\bL4\b", "l4"), (r"\bT4\b", "t4"),
             (r"V100", "v100"), (r"P100", "p100"), (r"RTX 4090", "rtx4090"), (r"RTX 3090", "rtx3090"),
             (r"RTX 6000 Ada", "rtx6000-ada"), (r"RTX A6000", "rtx-a6000"), (r"Quadro RTX 8000", "quadro-rtx8000")]
POWER_WINDOW_S = 1.0  # on a metered GPU, each (variant, batch) runs at least this long: NVML's counters need time


def gpu_key(name: str) -> str:
    """The store's accelerator key for an NVML device name; a MIG instance keeps its profile (``a100-mig-1g.10gb``)."""
    key = next((k for pat, k in _GPU_KEYS if re.search(pat, name, re.IGNORECASE)), None)
    if key is None:
        key = "gpu-" + (re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-") or "unknown")
    mig = re.search(r"MIG\s+(\d+g\.\d+gb)", name, re.IGNORECASE)
    return f"{key}-mig-{mig.group(1).lower()}" if mig else key


class _Meter:
    """NVML power and energy of the GPU ONNX Runtime runs on: the first entry of ``CUDA_VISIBLE_DEVICES`` (an index
    or a ``GPU-``/``MIG-`` UUID), which NVML itself ignores, else device 0. Unavailable (no pynvml, driver or GPU):
    every reading is None and rows say that no power was measured."""

    def __init__(self, nvml=None) -> None:
        self.handle, self.name, self._nvml = None, None, None
        try:
            nvml = nvml if nvml is not None else importlib.import_module("pynvml")
            nvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
            if visible.startswith(("GPU-", "MIG-")):
                self.handle = nvml.nvmlDeviceGetHandleByUUID(visible)
            else:
                self.handle = nvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)
            name = nvml.nvmlDeviceGetName(self.handle)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
            self._nvml = nvml
        except Exception:  # no pynvml, no driver, no GPU: power is simply not measured
            self.handle = None

    def watts(self) -> float | None:
        """Board power now (NVML reports mW)."""
        try:
            return self._nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0 if self.handle is not None else None
        except Exception:
            return None

    def energy_j(self) -> float | None:
        """The board's energy counter (NVML reports mJ since the driver loaded; Volta and newer), else None."""
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0 \
                if self.handle is not None else None
        except Exception:
            return None


def _accelerator(session: ModelSession, meter: _Meter) -> tuple[str, str]:
    """(accelerator key, device label): a GPU by its NVML name, else this CPU."""
    if session.device_kind == "cuda":
        return (gpu_key(meter.name), meter.name) if meter.name else ("gpu-unknown", "unknown CUDA GPU (no NVML)")
    return "cpu-local", f"{platform.processor() or platform.machine()} ({os.cpu_count()} logical CPUs)"


def _timed(sess: ModelSession, x, repeats: int,
           meter: _Meter | None) -> tuple[list[float], list[float], str, float | None]:
    """Per-batch wall ms and process CPU ms of ``repeats`` batches (on a metered GPU: as many more as
    ``POWER_WINDOW_S`` needs), with the power: NVML's energy counter over the whole run when the board has one,
    else the mean of one power sample per batch. Returns (latencies, cpu times, how power was measured, watts)."""
    lat, cpu, watts = [], [], []
    e0, start = (meter.energy_j() if meter else None), time.perf_counter()
    while len(lat) < repeats or (meter is not None and time.perf_counter() - start < POWER_WINDOW_S):
        t0, c0 = time.perf_counter(), time.process_time()
        sess.run(x)
        lat.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        w = meter.watts() if meter else None
        if w is not None:
            watts.append(w)
    elapsed = time.perf_counter() - start
    e1 = meter.energy_j() if meter else None
    if e0 is not None and e1 is not None and e1 > e0 and elapsed > 0:
        return lat, cpu, f"NVML energy counter, {e1 - e0:.3f} J over {elapsed:.2f} s", (e1 - e0) / elapsed
    if watts:
        return lat, cpu, f"NVML board power, mean of {len(watts)} samples", float(np.mean(watts))
    return lat, cpu, f"no power meter; process CPU time per batch median {np.median(cpu):.3f} ms", None


def profile_zoo(zoo_dir: Path | None = None, *, batches: Sequence[int] = (1, 2, 4, 8, 16), repeats: int = 20,
                variants: Sequence[str] | None = None, precisions: Sequence[str] | None = None,
                device: str = "auto", progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Store rows for every chosen zoo variant x batch size, measured here."""
    if repeats < 3 or any(b < 1 for b in batches):
        raise ConfigError("zoo profile: repeats must be >= 3 and every batch size >= 1")
    entries = [e for e in list_entries(zoo_dir) if (not variants or e.name in variants)
               and (not precisions or e.precision in precisions)]
    if not entries:
        raise ConfigError("zoo profile: no zoo variant matches --variant / --precision")
    meter, commit, rows = _Meter(), _commit(), []
    rng = np.random.default_rng(0)
    for e in entries:
        sess = ModelSession(Path(e.path), threads=os.cpu_count() or 1, device=device)  # type: ignore[arg-type]
        acc, label = _accelerator(sess, meter)
        metered = meter if sess.device_kind == "cuda" and meter.handle is not None else None
        item = tuple(d or 1 for d in sess.item_shape)
        for b in batches:
            if sess.fixed_batch not in (None, b):
                continue
            x = sess.prepare(rng.standard_normal((b, *item)).astype(np.float32))
            for _ in range(2):
                sess.run(x)
            lat, cpu, how, watts = _timed(sess, x, repeats, metered)
            p50, p90, p99 = np.percentile(lat, [50, 90, 99])
            avg = float(np.mean(lat))
            rows.append({
                "source": "this-machine", "model": e.name, "accelerator": acc, "device_label": label,
                "precision": e.precision, "runtime": f"onnxruntime/{sess.provider}", "scenario": "offline-batch",
                "batch": b, "concurrency": 1, "latency_p50_ms": float(p50), "latency_p90_ms": float(p90),
                "latency_p99_ms": float(p99), "latency_avg_ms": avg, "throughput_items_s": b * 1000.0 / avg,
                "power_w": watts, "repo": "this machine (oltunes zoo profile)",
                "path": str(Path(e.path).name), "commit": commit, "licence": LICENCE,
                "provenance": (f"measured by this machine: ONNX Runtime {sess.provider}, {len(lat)} timed batches; "
                               f"{how}"),
            })
            if progress:
                progress(f"{e.name} batch {b}: p50 {p50:.3f} ms on {acc}")
    return check_rows(pd.DataFrame(rows, columns=COLUMNS), "zoo profile")


def write_rows(df: pd.DataFrame, out: Path) -> Path:
    """Write store rows as CSV, atomically."""
    return atomic_write_text(Path(out), df.to_csv(index=False, float_format="%.6g"))
