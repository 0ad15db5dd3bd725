"""Performance model: calibrated on the real proteus profiles, scaled by the documented factor table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from oltunes.errors import ConfigError
from oltunes.sim import calibration as cal
from oltunes.sim.perfmodel import PerformanceModel
from oltunes.types import Candidate, CoRunner, JobSpec


@pytest.fixture(scope="module")
def pm(shared_data):
    return PerformanceModel(shared_data)


def _cand(pm, name, acc="a100", b=4, c=1, co=()):
    return Candidate(pool="p", accelerator=acc, variant=pm.variant(name), batch_size=b, concurrency=c, co_runners=co)


def test_variants_come_from_proteus(pm, shared_data):
    vs = pm.variants()
    df = pd.read_csv(shared_data / "proteus" / "aggregate_profiled.csv")
    assert len(vs) == df["Model"].nunique()
    assert len({v.name for v in vs}) == len(vs)
    assert all(0 < v.accuracy <= 1 and v.precision == "fp32" for v in vs)
    assert len(pm.families()) == 9


def test_measured_anchor_equals_the_data(pm, shared_data):
    df = pd.read_csv(shared_data / "proteus" / "aggregate_profiled.csv")
    row = df[(df["Model"] == "resnet50_v1") & (df["Accel"] == "onnxruntime_cpu") & (df["batchsize"] == 4)].iloc[0]
    vi = pm.variant_index("resnet50_v1")
    assert pm.latency_row(vi, "cpu")[4] == pytest.approx(row["50th_pct"])
    assert pm.is_measured(vi, "cpu", 4) and not pm.is_measured(vi, "cpu", 32)


def test_latency_grows_with_batch_and_follows_the_grounded_world(pm):
    for vi in range(len(pm.variants())):
        for acc in cal.FACTORS:
            row = pm.latency_row(vi, acc)
            assert np.all(np.diff(row[1:]) >= -1e-9), (pm.variants()[vi].name, acc)
            assert row[cal.MAX_BATCH] > row[16]  # big batches are never free
    vi = pm.variant_index("resnet50_v1")
    b64 = {acc: pm.latency_row(vi, acc)[64] for acc in cal.FACTORS}
    assert b64["h100"] < b64["a100"] < b64["v100"] < b64["t4"]  # a datasheet's faster GPU is faster when busy
    # the real CPU-to-GPU gap (50-100x at batch 8), not the old world's 5x
    assert 30 < pm.latency_row(vi, "cpu")[8] / pm.latency_row(vi, "a100")[8] < 200


def test_every_factor_names_a_source():
    for name, f in cal.FACTORS.items():
        assert f.source and f.packing >= 1.0, name


def test_truth_is_noiseless_and_measure_is_noisy_but_seeded(pm):
    job = JobSpec(family="resnet", slo_ms=200)
    c = _cand(pm, "resnet50_v1")
    assert pm.truth(job, c) == pm.truth(job, c)
    m1 = pm.measure(job, c, items=400, rng=np.random.default_rng(1))
    m2 = pm.measure(job, c, items=400, rng=np.random.default_rng(1))
    m3 = pm.measure(job, c, items=400, rng=np.random.default_rng(2))
    assert m1.latency_p99_ms == m2.latency_p99_ms != m3.latency_p99_ms
    assert m1.simulated and m1.energy_source == "simulated" and m1.items == 400
    t = pm.truth(job, c)
    assert m1.latency_p50_ms == pytest.approx(t.latency_p99_ms / math.exp(2.3263 * pm.sigma(pm.variant_index("resnet50_v1"), "a100")), rel=0.1)


def test_interference_and_concurrency_slow_a_batch_down(pm):
    job = JobSpec(family="resnet", slo_ms=200)
    alone = pm.truth(job, _cand(pm, "resnet152_v1"))
    heavy = CoRunner(job_id="x", family="gpt2", variant="gpt2-xl", size="gpt2-xl", load=1.0)
    light = heavy.model_copy(update={"load": 0.1})
    shared = pm.truth(job, _cand(pm, "resnet152_v1", co=(heavy,)))
    lightly = pm.truth(job, _cand(pm, "resnet152_v1", co=(light,)))
    assert shared.latency_p99_ms > lightly.latency_p99_ms >= alone.latency_p99_ms
    c4 = pm.truth(job, _cand(pm, "resnet152_v1", c=4))
    assert c4.latency_p99_ms > alone.latency_p99_ms and c4.throughput_items_per_s > alone.throughput_items_per_s


def test_interference_is_the_fitted_model_weighted_by_load(pm):
    """Each co-runner adds load x (base + compute x c x c_j), its load clipped to [0, 1]; the spread adds in
    quadrature; a compute-heavier co-runner interferes more (the fit's compute term is positive)."""
    model = pm.interference_model
    assert model.compute > 0 and model.base >= 0 and "gpulet" in model.sources
    n = len(pm.variants())
    rng = np.random.default_rng(4)
    for _ in range(200):
        vi = int(rng.integers(n))
        co = [(int(rng.integers(n)), float(rng.choice([0.0, 1.0, -0.2, 1.3, rng.uniform(0, 1)])))
              for _ in range(int(rng.integers(0, 5)))]
        slow, extra = pm.interference(vi, co)
        w = [min(1.0, max(0.0, load)) for _, load in co]
        assert slow == pytest.approx(1.0 + sum(model.pair(pm._compute_share[vi], pm._compute_share[v]) * x
                                               for (v, _), x in zip(co, w)))
        assert extra == pytest.approx(model.sigma * math.sqrt(sum(x * x for x in w)))
    share = pm._compute_share
    light, heavy = int(np.argmin(share)), int(np.argmax(share))
    assert pm.interference(0, [(heavy, 1.0)])[0] > pm.interference(0, [(light, 1.0)])[0] > 1.0


def test_energy_uses_the_accelerators_power_range(pm):
    job = JobSpec(family="bert", slo_ms=200)
    for acc in ("cpu", "t4", "h100"):
        vi = pm.variant_index("bert-base-uncased")
        a = pm.accelerator(acc)
        for b in (1, 16):
            assert a.idle_w < pm.busy_power_w(vi, acc, b) <= a.max_w
        assert pm.truth(job, _cand(pm, "bert-base-uncased", acc)).energy_j_per_item > 0


def test_unknown_names_are_clear_errors(pm):
    with pytest.raises(ConfigError, match="known"):
        pm.variant("no-such-model")
    with pytest.raises(ConfigError, match="world_specs.py"):
        pm.factor("tpu-v5")


def test_table_labels_measured_extrapolated_and_derived_rows(pm):
    t = pm.table()
    cpu = t[(t["variant"] == "resnet50_v1") & (t["accelerator"] == "cpu")].set_index("batch")
    assert cpu.loc[8, "measured"] and not cpu.loc[8, "extrapolated"] and cpu.loc[32, "extrapolated"]
    gpu = t[t["accelerator"] != "cpu"]
    assert not gpu["measured"].any() and gpu["basis"].str.startswith("grounded model").all()
    gpt2 = t[(t["variant"] == "gpt2") & (t["accelerator"] == "a100")]["basis"].iloc[0]
    assert "derived from FLOPs" in gpt2  # no GPU row of GPT-2 anywhere: it says so
    assert "derived from its datasheet" in t[t["accelerator"] == "p100"]["basis"].iloc[0]


def test_factor_table_matches_its_sources(shared_data):
    """The packing constants in calibration.FACTORS are recomputed here from the file their sources name."""
    p = pd.read_csv(shared_data / "gavel" / "throughputs_pairs.csv.gz")
    p = p[(p["source"] == "simulation") & (p["consolidated"] == 1) & (p["scale_factor"] == 1)]
    iso = p[p["colocated_job_type"].isna()].set_index(["gpu_type", "job_type"])["throughput_steps_per_s"]
    q = p[p["colocated_job_type"].notna() & (p["colocated_scale_factor"] == 1) & (p["throughput_steps_per_s"] > 0)]
    r1 = q["throughput_steps_per_s"].to_numpy() / iso.reindex(list(zip(q["gpu_type"], q["job_type"]))).to_numpy()
    r2 = q["colocated_throughput_steps_per_s"].to_numpy() / iso.reindex(
        list(zip(q["gpu_type"], q["colocated_job_type"]))).to_numpy()
    s = pd.Series(r1 + r2, index=q["gpu_type"].to_numpy())
    assert cal.FACTORS["p100"].packing == pytest.approx(s.loc["p100"].median(), abs=0.002)
    assert cal.FACTORS["v100"].packing == pytest.approx(s.loc["v100"].median(), abs=0.002)


def test_every_simulator_variant_has_a_published_param_count(pm):
    # The metadata table must cover every proteus variant (either name spelling) and order sizes within a family.
    from oltunes.sim.variant_params import published_params

    sizes = {v.name: published_params(v.name) for v in pm.variants()}
    assert all(n > 0 for n in sizes.values()), [name for name, n in sizes.items() if not n]
    assert all(published_params(v.size) == sizes[v.name] for v in pm.variants())  # raw proteus "Model" name
    assert sizes["resnet18_v1"] < sizes["resnet50_v1"] < sizes["resnet152_v1"]
    assert sizes["prajjwal1-bert-tiny"] < sizes["bert-base-uncased"] < sizes["bert-large-uncased"]
    assert published_params("not-a-model") == 0
