"""`oltunes zoo profile`: real ONNX Runtime timings of zoo variants on this machine, as profile-store rows."""

from __future__ import annotations

import sys
import time

import pandas as pd
import pytest
from typer.testing import CliRunner

from oltunes.cli import app
from oltunes.sim.profile_store import COLUMNS, check_rows
from oltunes.zoo import list_entries
from oltunes.zoo import profile as profile_module


def test_profile_writes_store_rows_measured_here(built_zoo, tmp_path):
    e = next(x for x in list_entries(built_zoo) if x.precision == "fp32")
    out = tmp_path / "rows.csv"
    res = CliRunner().invoke(app, ["zoo", "profile", "--zoo-dir", str(built_zoo), "--variant", e.name,
                                   "--batches", "1,4", "--repeats", "3", "--device", "cpu", "--out", str(out)])
    assert res.exit_code == 0, res.output
    df = check_rows(pd.read_csv(out), "test")
    assert list(df.columns) == COLUMNS and len(df) == 2 and set(df["batch"]) == {1, 4}
    assert (df["model"] == e.name).all() and (df["accelerator"] == "cpu-local").all()
    assert df["provenance"].str.startswith("measured by this machine").all()
    assert df["provenance"].str.contains("CPU time per batch").all() and df["power_w"].isna().all()
    assert (df["latency_p50_ms"] > 0).all() and (df["latency_p50_ms"] <= df["latency_p99_ms"]).all()
    assert (df["throughput_items_s"] > 0).all()


def test_profile_names_a_bad_option(built_zoo, tmp_path):
    res = CliRunner().invoke(app, ["zoo", "profile", "--zoo-dir", str(built_zoo), "--variant", "no-such",
                                   "--out", str(tmp_path / "x.csv")])
    assert res.exit_code != 0 and "--variant" in res.output
    res = CliRunner().invoke(app, ["zoo", "profile", "--zoo-dir", str(built_zoo), "--batches", "a,b",
                                   "--out", str(tmp_path / "x.csv")])
    assert res.exit_code != 0 and "--batches" in res.output


# ------------------------------------------------------------------------------------------------ the GPU path
# Faked only at the hardware seam: ONNX Runtime's provider list (the real CPU session computes) and NVML.
class _FakeNvml:
    """pynvml's calls the profiler makes: GPUs by index or UUID, a name each, a power reading and an energy counter
    that grows at ``energy_w`` watts (None: the board has no counter, as before Volta)."""

    NAMES = {0: b"Tesla T4", 2: b"NVIDIA H100 80GB HBM3"}

    def __init__(self, energy_w: float | None = 300.0, power_w: float = 250.0):
        self.energy_w, self.power_w, self.t0 = energy_w, power_w, time.perf_counter()

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return 2 if uuid == "GPU-h100" else 0

    def nvmlDeviceGetName(self, handle):
        return self.NAMES[handle]

    def nvmlDeviceGetPowerUsage(self, handle):
        return int(self.power_w * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if self.energy_w is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return int((time.perf_counter() - self.t0) * self.energy_w * 1000)


@pytest.fixture
def fake_cuda(monkeypatch):
    """ONNX Runtime that lists and reports the CUDA provider (the real CPU session computes)."""
    import onnxruntime as ort

    real = ort.InferenceSession

    class CudaReported(real):
        def __init__(self, path, opts=None, providers=None):
            super().__init__(path, opts, providers=["CPUExecutionProvider"])

        def get_providers(self):
            return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(ort, "InferenceSession", CudaReported)
    monkeypatch.setattr(profile_module, "POWER_WINDOW_S", 0.2)


def _gpu_rows(built_zoo, tmp_path, monkeypatch, nvml, visible):
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    e = next(x for x in list_entries(built_zoo) if x.precision == "fp32")
    out = tmp_path / "gpu.csv"
    res = CliRunner().invoke(app, ["zoo", "profile", "--zoo-dir", str(built_zoo), "--variant", e.name,
                                   "--batches", "1,4", "--repeats", "3", "--device", "cuda", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return check_rows(pd.read_csv(out), "test")


def test_gpu_rows_carry_the_visible_gpus_name_and_energy_counter_power(fake_cuda, built_zoo, tmp_path, monkeypatch):
    """CUDA_VISIBLE_DEVICES=2 runs ONNX Runtime on physical GPU 2; NVML ignores that variable, so the profiler must
    read GPU 2's name and counters (not GPU 0's T4), and take power from the energy counter over the run."""
    df = _gpu_rows(built_zoo, tmp_path, monkeypatch, _FakeNvml(energy_w=300.0, power_w=250.0), "2")
    assert (df["accelerator"] == "h100").all() and (df["device_label"] == "NVIDIA H100 80GB HBM3").all()
    assert (df["runtime"] == "onnxruntime/CUDAExecutionProvider").all()
    assert df["power_w"].between(270, 330).all()  # the counter's 300 W, not the 250 W samples
    assert df["provenance"].str.startswith("measured by this machine").all()
    assert df["provenance"].str.contains("NVML energy counter").all()
    # each (variant, batch) ran at least the power window, so more batches than --repeats
    assert df["provenance"].str.extract(r"(\d+) timed batches")[0].astype(int).gt(3).all()


def test_gpu_without_an_energy_counter_falls_back_to_power_samples(fake_cuda, built_zoo, tmp_path, monkeypatch):
    df = _gpu_rows(built_zoo, tmp_path, monkeypatch, _FakeNvml(energy_w=None, power_w=250.0), "GPU-h100")
    assert (df["accelerator"] == "h100").all()
    assert (df["power_w"] == 250.0).all() and df["provenance"].str.contains("NVML board power").all()


def test_gpu_without_nvml_says_no_power_was_measured(fake_cuda, built_zoo, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no pynvml installed
    e = next(x for x in list_entries(built_zoo) if x.precision == "fp32")
    out = tmp_path / "gpu.csv"
    res = CliRunner().invoke(app, ["zoo", "profile", "--zoo-dir", str(built_zoo), "--variant", e.name,
                                   "--batches", "1", "--repeats", "3", "--device", "cuda", "--out", str(out)])
    assert res.exit_code == 0, res.output
    df = check_rows(pd.read_csv(out), "test")
    assert (df["accelerator"] == "gpu-unknown").all() and df["power_w"].isna().all()
    assert df["provenance"].str.contains("no power meter").all()


@pytest.mark.parametrize("name, key", [
    ("Tesla T4", "t4"), ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA L4", "l4"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ("NVIDIA A10G", "gpu-a10g"), ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "a100-mig-1g.5gb"),
])
def test_nvml_names_map_to_the_stores_accelerator_keys(name, key):
    assert profile_module.gpu_key(name) == key
