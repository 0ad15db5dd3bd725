"""Telemetry: NVML faked only at the pynvml seam; RAPL read from a sysfs-shaped tree; CPU time from real processes."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from oltunes.errors import MissingDependency
from oltunes.telemetry import Monitor, estimate_energy_j, rapl_zones
from oltunes.telemetry import nvml as nvml_mod


class FakeNvml(types.ModuleType):
    """The pynvml API surface our adaptor uses, with a controllable energy counter and power."""

    def __init__(self, energy_supported: bool = True):
        super().__init__("pynvml")
        self.energy_mj = {"GPU-a": 1_000_000.0, "GPU-b": 5_000_000.0}
        self.power_mw = 100_000
        self.util = 50
        self.energy_supported = energy_supported
        self.shutdowns = 0

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.energy_mj:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return uuid

    def nvmlDeviceGetHandleByIndex(self, i):
        return list(self.energy_mj)[i]

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.energy_supported:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.energy_mj[h]

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=self.util, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=2 * 2**30, total=16 * 2**30, free=14 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h):
        return self.power_mw


@pytest.fixture
def fake_nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_gpu_energy_comes_from_the_total_energy_counter(fake_nvml):
    s = nvml_mod.GpuSession(("GPU-a", "GPU-b"))
    s.start()
    fake_nvml.energy_mj["GPU-a"] += 3_000.0  # 3 J
    fake_nvml.energy_mj["GPU-b"] += 7_000.0  # 7 J
    fake_nvml.util = 100
    r = s.stop()
    assert r.energy_counter is True
    assert r.energy_j == pytest.approx(10.0)
    assert 0.5 <= r.mean_util <= 1.0
    assert r.max_memory_used_mb == pytest.approx(2048)
    assert r.mean_power_w == pytest.approx(200.0)  # two devices at 100 W each
    assert fake_nvml.shutdowns == 1


def test_gpu_without_energy_counter_integrates_power(monkeypatch):
    fake = FakeNvml(energy_supported=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    s = nvml_mod.GpuSession(("GPU-a",))
    s.start()
    import time

    time.sleep(0.2)
    r = s.stop()
    assert r.energy_counter is False
    # 100 W over ~0.2 s
    assert 10.0 <= r.energy_j <= 100.0


def test_unknown_gpu_uuid_is_a_clear_error(fake_nvml):
    with pytest.raises(MissingDependency, match="GPU-zzz"):
        nvml_mod.GpuSession(("GPU-zzz",)).start()


def test_missing_nvml_library_is_missing_dependency(monkeypatch):
    class Broken(FakeNvml):
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", Broken())
    assert nvml_mod.available() is False
    with pytest.raises(MissingDependency, match="NVIDIA driver"):
        Monitor(gpu=True, gpu_device_ids=("GPU-a",)).start()


def test_monitor_on_a_gpu_pool_reports_measured_nvml_energy(fake_nvml, tmp_path):
    m = Monitor(gpu_device_ids=("GPU-a",), powercap_root=tmp_path / "none", interval_s=0.05)
    m.start()
    fake_nvml.energy_mj["GPU-a"] += 12_000.0
    r = m.stop()
    assert (r.energy_source, r.energy_meter) == ("measured", "nvml")
    assert r.energy_j == pytest.approx(12.0)
    assert r.gpu_util == pytest.approx(0.5)


def _make_rapl(root: Path, energy_uj: int, max_uj: int = 1000_000_000) -> Path:
    z = root / "intel-rapl:0"
    z.mkdir(parents=True, exist_ok=True)
    (z / "energy_uj").write_text(f"{energy_uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    sub = root / "intel-rapl:0:0"  # a sub-zone (core): must not be double counted
    sub.mkdir(exist_ok=True)
    (sub / "energy_uj").write_text("5\n")
    (sub / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def test_rapl_is_a_measurement_and_handles_wraparound(tmp_path):
    z = _make_rapl(tmp_path, energy_uj=999_000_000)
    assert [zone.path.name for zone in rapl_zones(tmp_path)] == ["intel-rapl:0"]
    m = Monitor(pid=None, powercap_root=tmp_path, interval_s=0.05)
    m.start()
    (z / "energy_uj").write_text("1000000\n")  # wrapped: 1 J before the wrap + 1 J after
    r = m.stop()
    assert (r.energy_source, r.energy_meter) == ("measured", "rapl")
    assert r.energy_j == pytest.approx(2.0)


def test_unreadable_rapl_falls_back_to_an_estimate(tmp_path):
    z = _make_rapl(tmp_path, energy_uj=10)
    (z / "energy_uj").write_text("not-a-number")
    assert rapl_zones(tmp_path) == []


def test_cpu_energy_without_counter_is_an_estimate_from_real_cpu_time(tmp_path):
    burn = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<0.8: pass"])
    try:
        m = Monitor(pid=burn.pid, cores=1, watts_per_core=20.0, interval_s=0.1, powercap_root=tmp_path / "none")
        m.start()
        burn.wait(timeout=10)
        r = m.stop()
    finally:
        burn.kill()
    assert (r.energy_source, r.energy_meter) == ("estimated", "cpu_time_x_watts_per_core")
    assert r.cpu_time_s > 0.1
    assert r.energy_j == pytest.approx(estimate_energy_j(r.cpu_time_s, 20.0))
    assert r.gpu_util is None


def test_exact_cpu_time_overrides_the_sampled_one(tmp_path):
    m = Monitor(pid=None, cores=2, watts_per_core=10.0, powercap_root=tmp_path / "none")
    m.start()
    r = m.stop(cpu_time_s=3.0)
    assert r.energy_j == pytest.approx(30.0)
    assert r.cpu_time_s == 3.0
