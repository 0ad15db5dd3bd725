"""The simulator's calibration constants: ONE table of every factor that is not read from data at run time.

Measured latencies come from ``proteus/aggregate_profiled.csv`` (read at run time from ``shared_data``; its licence
forbids copying it here): ONNX Runtime on a CPU, a Pascal GPU (taken as a P100) and an Ampere GPU (taken as an
A100). Every other accelerator is an anchor's latency divided by a relative-throughput factor below. Co-location
interference comes from ``lucid/colocate_info.csv`` (pair classes, read at run time) and the packing efficiency of
a shared, saturated device from ``gavel/throughputs_pairs.csv.gz`` (values below were computed from it once; the
file is MIT and could be shipped, but the three medians are all the simulator needs).

How the factors were computed (one run over the files named, 2026-11-22):

* lambda ``train_throughput_long.csv``, ResNet-50 fp32, 1 GPU, images/s: A100 40GB PCIe 882, V100 16GB 369,
  A10 349, H100 80GB SXM5 1,753.
* sia ``seed_1gpu_profiles.csv``: per application, step time at the largest batch size every GPU type ran; ratio
  A100(dgx)/T4 and A100/V100 = relative throughput. Medians over the six applications: T4 0.411 (range
  0.19-0.92), V100 0.664 (range 0.06-1.56).
* gavel ``throughputs_pairs.csv.gz``, source=simulation, consolidated, 1 GPU each: median over pairs of
  (co-located throughput / isolated throughput) summed over the two jobs = how much work a saturated shared
  device does relative to time-slicing: k80 1.056, p100 1.130, v100 1.371.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Factor:
    """How one accelerator type's latency is derived."""

    anchor: str  # proteus accelerator column the latency is read from: cpu | pascal | ampere
    speed: float  # throughput relative to the anchor (latency = anchor latency / speed)
    packing: float  # work a saturated shared device does, relative to plain time-slicing (gavel)
    source: str


# accelerator -> Factor. Measured anchors have speed 1.0. "estimate" marks values with no measured table here.
FACTORS: dict[str, Factor] = {
    "cpu": Factor("cpu", 1.0, 1.0, "measured: proteus onnxruntime_cpu; packing 1.0 = assumption (no CPU pair data)"),
    "p100": Factor("pascal", 1.0, 1.130, "measured: proteus onnxruntime_gpu_pascal; packing gavel p100 median"),
    "a100": Factor("ampere", 1.0, 1.371, "measured: proteus onnxruntime_gpu_ampere; packing = gavel v100 (estimate)"),
    "t4": Factor("ampere", 0.411, 1.371, "sia seed profiles: median A100/T4 step-time ratio over 6 apps"),
    "v100": Factor(
        "ampere",
        0.527,
        1.371,
        "geometric mean of lambda resnet50 fp32 369/882=0.418 and sia median 0.664; packing gavel v100 median",
    ),
    "a10": Factor("ampere", 0.396, 1.371, "lambda resnet50 fp32 A10 349 / A100-40GB-PCIe 882"),
    "l4": Factor(
        "ampere",
        0.534,
        1.371,
        "estimate: no measured table in the store; 1.3 x T4 (about 3.7x T4's fp32 FLOPS but the same ~300 GB/s "
        "memory bandwidth, and small-batch inference is bandwidth-bound)",
    ),
    "h100": Factor("ampere", 1.988, 1.371, "lambda resnet50 fp32 H100-80GB-SXM5 1753 / A100-40GB-PCIe 882"),
}

# Pascal/Ampere fallback when one GPU anchor lacks a variant: the median ratio over variants measured on both is
# computed at load time (perfmodel); this is only the default if no variant is measured on both.
DEFAULT_PASCAL_OVER_AMPERE = 1.0

# Batch sizes above the largest measured one (16) are extrapolated linearly from the fitted latency(b) = a + c*b
# and flagged `extrapolated` in the model's table.
MAX_BATCH = 64

# Concurrency (several executors of one job on one device): each batch is slowed by 1 + OVERLAP_COST*(c-1)
# (assumption; GPU streams overlap partially, so c executors give c / (1 + 0.6 (c-1)) times the throughput:
# 1.25x at c=2, 1.43x at c=4). A CPU socket gains nothing: ONNX Runtime already uses all its threads.
OVERLAP_COST = {"gpu": 0.6, "cpu": 1.0}

# Power while a batch runs: idle + (max - idle) * (POWER_FLOOR + (1 - POWER_FLOOR) * compute_fraction), where
# compute_fraction = c*b / (a + c*b) from the fitted latency curve (the per-item share of the batch time: the
# fixed part a is launch/transfer overhead that draws little power). POWER_FLOOR is an assumption.
POWER_FLOOR = 0.3

# Measurement noise: per-batch lognormal with sigma from the measured p90/p50 ratio, clipped to this range; the
# 3% floor is an assumption (a shared production node never jitters less than that)
# (rows without a p90 get the median sigma of their accelerator).
NOISE_SIGMA_RANGE = (0.03, 0.25)

# Slow drift per device (thermal, firmware, neighbour churn): multiplicative 1 + DRIFT_AMPLITUDE * sin(...) with a
# random phase and a period drawn from DRIFT_PERIOD_S, plus a fixed per-device factor within +-DEVICE_SPREAD.
DRIFT_AMPLITUDE = 0.06
DRIFT_PERIOD_S = (600.0, 1800.0)
DEVICE_SPREAD = 0.04

# Loading a model onto a device when a job is placed or moved (assumption): requests wait this long.
SWITCH_COST_S = 0.25

# Interference pair classes: a variant's class is the tercile of its per-item ampere latency at batch 8 among all
# variants (0 light, 1 medium, 2 heavy), mirroring Lucid's 3-level sharing-intensity labels of its jobs.
N_CLASSES = 3
