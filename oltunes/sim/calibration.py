"""The simulator's calibration constants: ONE table of every factor that is not read from data at run time.

Latency on a GPU comes from the grounded world's performance model (:mod:`oltunes.sim.world`), fitted to the profile
store (:mod:`oltunes.sim.profile_store`: NVIDIA DeepLearningExamples, MLPerf Inference, Lambda, Proteus); latency on
the CPU is Proteus's ONNX Runtime CPU profile, measured (read at run time from ``shared_data``; its licence forbids
copying it here). Co-runner interference is a two-parameter model fitted at load time to the sharing store
(:func:`oltunes.sim.perftables.fit_interference` over :func:`oltunes.sim.profile_store.sharing_rows`: Gpulet's MPS
pairs, shipped, and Lucid's co-location pairs, read at run time; fit and leave-one-source-out error in
``benchmarks/interference_fidelity.py``), and the packing efficiency of a shared, saturated device from
``gavel/throughputs_pairs.csv.gz`` (values below were computed from it once; the file is MIT and could be shipped, but the three medians are all the simulator needs).

How the packing factors were computed (one run over the file named, 2026-11-22): gavel ``throughputs_pairs.csv.gz``,
source=simulation, consolidated, 1 GPU each: median over pairs of (co-located throughput / isolated throughput)
summed over the two jobs = how much work a saturated shared device does relative to time-slicing: k80 1.056,
p100 1.130, v100 1.371. Every value below not computed from a file is labelled "estimate".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Factor:
    """How a saturated device of one accelerator type shares its time (gavel), and where that figure comes from."""

    packing: float  # work a saturated shared device does, relative to plain time-slicing (gavel)
    source: str


_V100_PACKING = "gavel v100 median"
_ESTIMATE = "estimate: gavel v100 median (no pair data for this GPU)"

# accelerator -> Factor: the simulator's accelerator types (latency from the grounded model for GPUs).
FACTORS: dict[str, Factor] = {
    "cpu": Factor(1.0, "estimate: 1.0 (no CPU pair data)"),
    "p100": Factor(1.130, "gavel p100 median"),
    "v100": Factor(1.371, _V100_PACKING),
    "t4": Factor(1.371, _ESTIMATE),
    "a10": Factor(1.371, _ESTIMATE),
    "l4": Factor(1.371, _ESTIMATE),
    "a100": Factor(1.371, _ESTIMATE),
    "h100": Factor(1.371, _ESTIMATE),
}
DEFAULT_GPU_FACTOR = Factor(1.371, _ESTIMATE)  # any other GPU with a datasheet in oltunes.sim.world_specs

# The precision and runtime the simulator's variants run at on a GPU: ONNX Runtime (the workers' runtime), FP32
# weights; ONNX Runtime's CUDA provider allows TF32 math by default, so GPUs with TF32 tensor cores run TF32.
SIM_RUNTIME = "onnxruntime"

# The largest batch the model's tables hold. On the CPU, batch sizes above the largest measured one (16) are
# extrapolated linearly from the fitted latency(b) = a + c*b and flagged `extrapolated` in the model's table.
MAX_BATCH = 64

# Concurrency (several executors of one job on one device): each batch is slowed by 1 + OVERLAP_COST*(c-1)
# (assumption; GPU streams overlap partially, so c executors give c / (1 + 0.6 (c-1)) times the throughput:
# 1.25x at c=2, 1.43x at c=4). A CPU socket gains nothing: ONNX Runtime already uses all its threads.
OVERLAP_COST = {"gpu": 0.6, "cpu": 1.0}

# Power while a batch runs: idle + (max - idle) * (POWER_FLOOR + (1 - POWER_FLOOR) * compute_fraction), where
# compute_fraction is the share of the batch time the grounded model spends computing (the rest, overhead and weight
# reads, draws little power). POWER_FLOOR is an estimate: the store holds node wall power only (MLPerf).
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

# Co-runner interference reads each variant's compute share (the share of its batch time spent computing, grounded
# world) on this accelerator at this batch: Lucid's and MIGProfiler's utilisations are of jobs alone on a datacentre
# GPU, and the simulator's co-runners carry no batch of their own (a reference point, not a fit).
INTERFERENCE_REFERENCE = ("a100", 8)
