"""`oltunes zoo profile`: real ONNX Runtime timings of zoo variants on this machine, as profile-store rows."""

from __future__ import annotations

import pandas as pd
from typer.testing import CliRunner

from oltunes.cli import app
from oltunes.sim.profile_store import COLUMNS, check_rows
from oltunes.zoo import list_entries


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
