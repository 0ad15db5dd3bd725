"""The sharing store (co-located and MIG-slice rows with provenance) and the interference model fitted to it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from oltunes.errors import DataError
from oltunes.sim.perftables import fit_interference, pair_rows, predict_slowdown
from oltunes.sim.profile_store import SHARING_COLUMNS, SHARING_DIR, sharing_rows


def test_shipped_sharing_rows_carry_provenance_and_slowdowns():
    df = sharing_rows(None)
    assert {"gpulet", "migprofiler"} <= set(df["source"])
    assert df["provenance"].str.startswith(("measured by", "derived from")).all()
    assert df["commit"].str.fullmatch(r"[0-9a-f]{40}").all()
    assert (df["slowdown"] > 0).all()
    mig = df[df["setting"] == "mig-slice"]
    assert mig["co_model"].isna().all() and mig["share"].between(0, 1).all()
    # a MIG slice of k/7 of the GPU is never faster than the whole GPU (beyond noise), and slower once the batch
    # fills it (at batch 1-2 these models are overhead-bound: a slice barely slows them)
    assert (mig["slowdown"] > 0.95).all()
    assert (mig.loc[(mig["share"] < 0.5) & (mig["batch"] >= 32), "slowdown"] > 1.5).all()
    assert (df.loc[df["source"] == "gpulet", "accelerator"] == "unknown").all()  # Gpulet names no GPU


def test_a_sharing_row_without_a_licence_is_refused_naming_the_column(tmp_path):
    df = pd.read_csv(next(SHARING_DIR.glob("*.csv")), nrows=3)
    df.loc[1, "licence"] = " "
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError, match="no licence"):
        sharing_rows(None, tmp_path)
    pd.DataFrame(columns=[c for c in SHARING_COLUMNS if c != "co_share"]).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError, match="co_share"):
        sharing_rows(None, tmp_path)


def _synthetic(source: str, n: int, base: float, compute: float, shares: bool, rng) -> pd.DataFrame:
    c, cj = rng.uniform(0.1, 1.0, n), rng.uniform(0.1, 1.0, n)
    slow = 1.0 + base + compute * c * cj
    return pd.DataFrame({"source": source, "setting": "colocated", "co_model": "x", "slowdown": slow,
                         "compute_util": c if shares else np.nan, "co_compute_util": cj if shares else np.nan})


def test_the_fit_recovers_base_and_compute_terms_and_weighs_sources_equally():
    rng = np.random.default_rng(0)
    rows = pd.concat([_synthetic("a", 200, 0.05, 0.8, True, rng), _synthetic("b", 20, 0.05, 0.8, True, rng)])
    m = fit_interference(rows)
    assert m.base == pytest.approx(0.05, abs=1e-6) and m.compute == pytest.approx(0.8, abs=1e-6)
    assert m.sigma == pytest.approx(0.0, abs=1e-6) and m.sources == ("a", "b")
    assert np.allclose(predict_slowdown(m, rows), rows["slowdown"])
    # a source without compute shares is predicted at the typical product of those that have them
    blind = _synthetic("c", 5, 0.0, 0.0, False, rng)
    assert np.allclose(predict_slowdown(m, blind), 1.0 + 0.05 + 0.8 * m.typical_cc)
    # 200 rows of one source do not outvote 20 of another: each source weighs the same
    skew = pd.concat([_synthetic("a", 200, 0.0, 0.4, True, rng), _synthetic("b", 20, 0.4, 0.4, True, rng)])
    assert 0.1 < fit_interference(skew).base < 0.3


def test_mig_rows_and_rows_without_a_co_runner_are_not_interference():
    rows = sharing_rows(None)
    assert set(pair_rows(rows)["setting"]) == {"mps-partition"}
    with pytest.raises(DataError, match="no co-located rows"):
        fit_interference(rows[rows["setting"] == "mig-slice"])


def test_the_benchmarks_tuner_without_fm_ignores_who_the_co_runner_is():
    """interference_fidelity's ablation: without its FM the tuner (prior + pooled correction) sees only the co-runners'
    load, so two placements that differ only in the co-runner's model get one prediction; with the FM they differ."""
    from benchmarks.interference_fidelity import tuner_predict, tuner_rows

    solo, pairs = tuner_rows(sharing_rows(None), "gpulet")
    train = solo + list(zip(pairs["candidate"].iloc[:60], pairs["latency_ms"].iloc[:60]))
    one = pairs.iloc[0]
    other = pairs[(pairs["model"] == one["model"]) & (pairs["batch"] == one["batch"])
                  & (pairs["co_model"] != one["co_model"])].iloc[0]
    test = [one["candidate"], other["candidate"]]
    without = tuner_predict(train, test, seed=0, fm=False)
    assert without[0] == pytest.approx(without[1], rel=1e-9)
    with_fm = tuner_predict(train, test, seed=0, fm=True)
    assert with_fm[0] != pytest.approx(with_fm[1], rel=1e-6)
