"""The profile store: real measurements of inference latency, throughput and power, one row per (source, model,
accelerator, precision, runtime, scenario, batch, concurrency), every row with its provenance.

Shipped rows (``oltunes/data/profiles/*.csv``, figures copied from permissively licensed public repositories, see
``docs/world.md`` and ``oltunes/data/profiles/SOURCES.md``): NVIDIA DeepLearningExamples' inference tables and MLPerf
Inference v2.1 / v4.1 closed results. Rows whose licence forbids copying are read at run time from ``shared_data``
(:func:`runtime_rows`): Proteus's ONNX Runtime profile (its CPU and its two GPUs, which it calls "pascal" and
"ampere" without naming them: recorded as ``gpu-unidentified-pascal`` / ``gpu-unidentified-ampere``) and Lambda's
single-GPU training throughputs. ``oltunes zoo profile`` adds rows measured by this machine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from oltunes.errors import DataError

STORE_DIR = Path(__file__).resolve().parents[1] / "data" / "profiles"
COLUMNS = [
    "source", "model", "accelerator", "device_label", "precision", "runtime", "scenario", "batch", "concurrency",
    "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_avg_ms", "throughput_items_s", "power_w",
    "repo", "path", "commit", "licence", "provenance",
]
PROVENANCE_PREFIXES = ("measured by", "derived from")
PROTEUS_COMMIT = "6967c9327e66f6d6fe94993dcaa7521efc2f72f5"
LAMBDA_COMMIT = "aa5addb6a53675a649a80036dad548f1c27cbcc4"
_PROTEUS_ACCEL = {"onnxruntime_cpu": "cpu", "onnxruntime_gpu_pascal": "gpu-unidentified-pascal",
                  "onnxruntime_gpu_ampere": "gpu-unidentified-ampere"}
_LAMBDA_ACCEL = [(r"V100", "v100"), (r"A100 80GB PCIe", "a100-pcie"), (r"A100 40GB PCIe", "a100-pcie"),
                 (r"A100 80GB SXM", "a100"), (r"\bA10\b", "a10"), (r"H100 80GB PCIe", "h100-pcie"),
                 (r"H100 80GB SXM", "h100"), (r"RTX 6000 Ada", "rtx6000-ada"), (r"RTX A6000", "rtx-a6000"),
                 (r"RTX 4090", "rtx4090"), (r"RTX 3090", "rtx3090"), (r"Quadro RTX 8000", "quadro-rtx8000")]
_LAMBDA_MODELS = ("resnet50", "bert_large_squad", "bert_base_squad")


def check_rows(df: pd.DataFrame, where: str, columns: list[str] = COLUMNS) -> pd.DataFrame:
    """The store's columns in order; a clear error naming the column or row when provenance is missing."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"profile store {where}: missing column(s) {missing}")
    for col in ("repo", "commit", "licence", "provenance"):
        bad = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if bad.any():
            raise DataError(f"profile store {where}: row {int(bad.idxmax())} has no {col}")
    ok = df["provenance"].astype(str).str.startswith(PROVENANCE_PREFIXES)
    if not ok.all():
        raise DataError(f"profile store {where}: row {int((~ok).idxmax())}: provenance must start with "
                        f"{' or '.join(repr(p) for p in PROVENANCE_PREFIXES)}")
    return df[columns].copy()


def shipped_rows(store_dir: Path = STORE_DIR) -> pd.DataFrame:
    """Every row of the shipped CSV files."""
    files = sorted(store_dir.glob("*.csv"))
    if not files:
        raise DataError(f"profile store: no CSV files in {store_dir}")
    return pd.concat([check_rows(pd.read_csv(f), f.name) for f in files], ignore_index=True)


def proteus_rows(data_dir: Path) -> pd.DataFrame:
    """Proteus's profile as store rows (read at run time: its licence allows comparison use, not copying)."""
    f = data_dir / "proteus" / "aggregate_profiled.csv"
    if not f.is_file():
        return pd.DataFrame(columns=COLUMNS)
    df = pd.read_csv(f)
    df = df[df["Accel"].isin(_PROTEUS_ACCEL)]
    out = pd.DataFrame({
        "source": "proteus", "model": df["Model"], "accelerator": df["Accel"].map(_PROTEUS_ACCEL),
        "device_label": df["Accel"], "precision": "fp32", "runtime": "onnxruntime", "scenario": "offline-batch",
        "batch": df["batchsize"].astype(int), "concurrency": 1, "latency_p50_ms": df["50th_pct"],
        "latency_p90_ms": df["90th_pct"], "latency_p99_ms": None, "latency_avg_ms": df["avg_latency(ms)"],
        "throughput_items_s": None, "power_w": None, "repo": "UMass-LIDS/Proteus",
        "path": "profiling/aggregate_profiled.csv", "commit": PROTEUS_COMMIT,
        "licence": "comparison use only (read at run time, not shipped)",
        "provenance": "measured by the Proteus authors (ONNX Runtime; GPU models not named)",
    })
    return check_rows(out.reset_index(drop=True), "proteus")


def lambda_rows(data_dir: Path) -> pd.DataFrame:
    """Lambda's single-GPU training throughputs as store rows (no licence: read at run time, not shipped)."""
    f = data_dir / "lambda" / "train_throughput_long.csv"
    if not f.is_file():
        return pd.DataFrame(columns=COLUMNS)
    df = pd.read_csv(f)
    df = df[(df["num_gpu"] == 1) & df["model"].isin(_LAMBDA_MODELS)].copy()

    def accel(system: str) -> str | None:
        return next((key for pat, key in _LAMBDA_ACCEL if re.search(pat, system)), None)

    df["accelerator"] = df["system"].map(accel)
    df = df[df["accelerator"].notna()]
    out = pd.DataFrame({
        "source": "lambda", "model": df["model"], "accelerator": df["accelerator"], "device_label": df["system"],
        "precision": df["precision"], "runtime": "pytorch-training", "scenario": "training",
        "batch": df["batch_size_per_gpu"].astype(int), "concurrency": 1, "latency_p50_ms": None,
        "latency_p90_ms": None, "latency_p99_ms": None, "latency_avg_ms": None,
        "throughput_items_s": df["throughput"], "power_w": None, "repo": "lambdal/deeplearning-benchmark",
        "path": "pytorch/pytorch-train-throughput-*.csv", "commit": LAMBDA_COMMIT,
        "licence": "none stated (read at run time, not shipped)",
        "provenance": "measured by Lambda (PyTorch training throughput, samples/s)",
    })
    return check_rows(out.reset_index(drop=True), "lambda")


def load_store(data_dir: Path | None, store_dir: Path = STORE_DIR) -> pd.DataFrame:
    """Shipped rows plus, when ``data_dir`` holds them, the run-time sources."""
    parts = [shipped_rows(store_dir)]
    if data_dir is not None:
        parts += [proteus_rows(Path(data_dir)), lambda_rows(Path(data_dir))]
    df = pd.concat([p for p in parts if len(p)], ignore_index=True)
    for c in ("batch", "concurrency", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_avg_ms",
              "throughput_items_s", "power_w"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def summary(df: pd.DataFrame) -> dict[str, int]:
    """Rows, independent sources and accelerator types of a store."""
    return {"rows": len(df), "sources": int(df["source"].nunique()), "accelerators": int(df["accelerator"].nunique())}


# ---------------------------------------------------------------------------------------------------- sharing
# Jobs sharing one device: one row per (source, setting, model, batch, share, co-runner), each with its provenance.
# ``setting``: ``mps-partition`` (Gpulet: MPS, the job holds ``share`` of the SMs, its co-runner the rest),
# ``mig-slice`` (MIGProfiler: an A100 MIG slice of ``share`` = k/7 of the GPU, alone on it: no co-runner),
# ``colocated`` (Lucid: two training jobs on one GPU, sharing mechanism and GPU not named). ``*_util`` are fractions:
# compute = the share of time the GPU's SMs were busy running the job alone (nvidia-smi / DCGM GRACT), memory = its
# DRAM bandwidth utilisation. ``unknown`` where a source does not say (device, mechanism).
SHARING_DIR = STORE_DIR / "sharing"
SHARING_COLUMNS = [
    "source", "setting", "accelerator", "device_label", "model", "batch", "share", "co_model", "co_batch", "co_share",
    "latency_solo_ms", "latency_shared_ms", "throughput_solo_items_s", "throughput_shared_items_s", "compute_util",
    "mem_util", "co_compute_util", "co_mem_util", "power_w", "repo", "path", "commit", "licence", "provenance",
]
LUCID_COMMIT = "63685a3ab7d15d8e940bb47ef98b6d5cca472b13"


def lucid_sharing_rows(data_dir: Path) -> pd.DataFrame:
    """Lucid's co-location profile as sharing rows (S-Lab licence, non-commercial: read at run time, never shipped):
    each job's speed next to its co-runner, normalised to its speed alone, with both jobs' solo utilisations."""
    co, single = data_dir / "lucid" / "colocate_info.csv", data_dir / "lucid" / "single_data.csv"
    if not (co.is_file() and single.is_file()):
        return pd.DataFrame(columns=SHARING_COLUMNS)
    c, s = pd.read_csv(co), pd.read_csv(single)
    key = ["model", "dataset", "batchsize", "amp"]
    solo = s[key + ["gpu_util", "gmem_util"]].drop_duplicates(key)
    for side in ("1", "2"):
        c = c.merge(solo.rename(columns={x: x + side for x in solo.columns}), on=[x + side for x in key], how="left")
    c = c.dropna(subset=["gpu_util1", "gpu_util2", "speed1"])
    out = pd.DataFrame({
        "source": "lucid", "setting": "colocated", "accelerator": "unknown", "device_label": "unknown",
        "model": c["model1"] + "/" + c["dataset1"] + "/amp" + c["amp1"].astype(str), "batch": c["batchsize1"],
        "share": None, "co_model": c["model2"] + "/" + c["dataset2"] + "/amp" + c["amp2"].astype(str),
        "co_batch": c["batchsize2"], "co_share": None, "latency_solo_ms": None, "latency_shared_ms": None,
        "throughput_solo_items_s": 1.0, "throughput_shared_items_s": c["speed1"], "compute_util": c["gpu_util1"] / 100,
        "mem_util": c["gmem_util1"] / 100, "co_compute_util": c["gpu_util2"] / 100,
        "co_mem_util": c["gmem_util2"] / 100,
        "power_w": None, "repo": "S-Lab-System-Group/Lucid", "path": "simulation/data/colocate_info.csv",
        "commit": LUCID_COMMIT, "licence": "S-Lab License 1.0, non-commercial (read at run time, not shipped)",
        "provenance": "measured by the Lucid authors (training throughput normalised to the job alone)",
    })
    return check_rows(out.reset_index(drop=True), "lucid", SHARING_COLUMNS)


def sharing_rows(data_dir: Path | None, sharing_dir: Path = SHARING_DIR) -> pd.DataFrame:
    """Every sharing row: the shipped CSVs plus, when ``data_dir`` holds it, Lucid's; with ``slowdown`` = the job's
    time per item shared over alone (throughput alone / throughput shared)."""
    files = sorted(sharing_dir.glob("*.csv"))
    if not files:
        raise DataError(f"sharing store: no CSV files in {sharing_dir}")
    parts = [check_rows(pd.read_csv(f), f.name, SHARING_COLUMNS) for f in files]
    if data_dir is not None:
        parts.append(lucid_sharing_rows(Path(data_dir)))
    df = pd.concat([p for p in parts if len(p)], ignore_index=True)
    for col in SHARING_COLUMNS[5:19]:
        if col != "co_model":
            df[col] = pd.to_numeric(df[col], errors="coerce")
    df["slowdown"] = df["throughput_solo_items_s"] / df["throughput_shared_items_s"]
    return df
