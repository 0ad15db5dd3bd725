"""Profile the zoo on this machine: every variant x batch size (x its precision) with ONNX Runtime's best provider,
written as rows of the profile store (:mod:`oltunes.sim.profile_store`) with "measured by this machine" provenance.

On a GPU (CUDA provider) each row also carries the board power NVML reports while the batches run (``power_w``,
mean of one sample per batch) when ``pynvml`` is installed; on a CPU there is no power meter: the row's provenance
states the process CPU time per batch instead, labelled as such. One command on any CUDA machine adds GPU rows::

    oltunes zoo profile --out gpu_rows.csv
"""

from __future__ import annotations

import os
import platform
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


class _Power:
    """NVML board power of GPU 0 (None when pynvml or a GPU is absent)."""

    def __init__(self) -> None:
        self.handle, self.name = None, None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(self.handle)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
            self._read = lambda: pynvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
        except Exception:  # no pynvml, no driver, no GPU: power is simply not measured
            self.handle = None

    def watts(self) -> float | None:
        return self._read() if self.handle is not None else None


def _accelerator(session: ModelSession, power: _Power) -> tuple[str, str]:
    """(accelerator key, device label): a GPU by its NVML name, else this CPU."""
    if session.device_kind == "cuda":
        label = power.name or "unknown CUDA GPU"
        key = label.lower().replace("nvidia", "").strip().split()[0] if power.name else "gpu-unknown"
        return key, label
    return "cpu-local", f"{platform.processor() or platform.machine()} ({os.cpu_count()} logical CPUs)"


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
    power, commit, rows = _Power(), _commit(), []
    rng = np.random.default_rng(0)
    for e in entries:
        sess = ModelSession(Path(e.path), threads=os.cpu_count() or 1, device=device)  # type: ignore[arg-type]
        acc, label = _accelerator(sess, power)
        item = tuple(d or 1 for d in sess.item_shape)
        for b in batches:
            if sess.fixed_batch not in (None, b):
                continue
            x = sess.prepare(rng.standard_normal((b, *item)).astype(np.float32))
            for _ in range(2):
                sess.run(x)
            lat, cpu, watts = [], [], []
            for _ in range(repeats):
                t0, c0 = time.perf_counter(), time.process_time()
                sess.run(x)
                lat.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
                w = power.watts() if acc != "cpu-local" else None
                if w is not None:
                    watts.append(w)
            p50, p90, p99 = np.percentile(lat, [50, 90, 99])
            avg = float(np.mean(lat))
            how = (f"NVML board power, {len(watts)} samples" if watts else
                   f"no power meter; process CPU time per batch median {np.median(cpu):.3f} ms")
            rows.append({
                "source": "this-machine", "model": e.name, "accelerator": acc, "device_label": label,
                "precision": e.precision, "runtime": f"onnxruntime/{sess.provider}", "scenario": "offline-batch",
                "batch": b, "concurrency": 1, "latency_p50_ms": float(p50), "latency_p90_ms": float(p90),
                "latency_p99_ms": float(p99), "latency_avg_ms": avg, "throughput_items_s": b * 1000.0 / avg,
                "power_w": float(np.mean(watts)) if watts else None, "repo": "this machine (oltunes zoo profile)",
                "path": str(Path(e.path).name), "commit": commit, "licence": LICENCE,
                "provenance": f"measured by this machine: ONNX Runtime {sess.provider}, {repeats} timed batches; {how}",
            })
            if progress:
                progress(f"{e.name} batch {b}: p50 {p50:.3f} ms on {acc}")
    return check_rows(pd.DataFrame(rows, columns=COLUMNS), "zoo profile")


def write_rows(df: pd.DataFrame, out: Path) -> Path:
    """Write store rows as CSV, atomically."""
    return atomic_write_text(Path(out), df.to_csv(index=False, float_format="%.6g"))
