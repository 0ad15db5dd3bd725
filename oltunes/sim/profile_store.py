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


def check_rows(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """The store's columns in order; a clear error naming the column or row when provenance is missing."""
    missing = [c for c in COLUMNS if c not in df.columns]
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
    return df[COLUMNS].copy()


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
