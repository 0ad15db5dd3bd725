"""Probe shards in the batch flow for real: worker processes running ONNX Runtime (local launcher), the in-process
tuner and its lease book, MLflow SQLite, the Prefect test harness."""

from __future__ import annotations

import asyncio
import json

import pyarrow.parquet as pq
import pytest

from flows.batch_inference import batch_inference
from oltunes.launchers.batch_job import DECISION_FILE, PLAN_FILE
from oltunes.launchers.probe_shards import recorded_probes
from oltunes.zoo import make_dataset
from tests.flows.test_flow_processes import n_observed, rows, runs_of
from tests.launchers.test_docker_engine import docker_engine, worker_image  # noqa: F401 -- fixtures

SLOW = (pytest.mark.slow, pytest.mark.timeout(600))  # a real Prefect server, MLflow, workers

PROBING = dict(family="cnn", slo_ms=1000.0, accuracy_floor=0.5, probes=2, probe_share=0.05, probe_min_items=1_000,
               items_per_worker=1_500, shard_size=50)  # fmt: skip


@SLOW[0]
@SLOW[1]
def test_a_probed_job_writes_every_input_row_once_learns_each_probe_and_logs_them(own_home, tmp_path):
    data = make_dataset("cnn", 3_000, tmp_path / "in.parquet", seed=7)
    out = tmp_path / "out"
    res = asyncio.run(batch_inference(dataset=str(data), output=str(out), job_id="job-probed", **PROBING))

    record = recorded_probes(out)
    assert record is not None and len(record.probes) >= 2, "the tuner suggested no trial to probe"
    ids = rows(out)
    assert len(ids) == len(set(ids)) == 3_000 and sorted(ids) == sorted(pq.read_table(data).column("id").to_pylist())
    # the probe shards are the first rows, each on its own candidate: the decision's choice, then its trials
    assert [s.decision.candidate for s in record.probes] == [record.first.candidate, *(t.candidate for t in record.first.trials)]
    plan = json.loads((out / PLAN_FILE).read_text())
    assert plan["probe_items"] == record.items and all(n == 150 for n in record.items)  # 5 % of 3,000
    assert [p.purpose for p in res.probes] == ["probe"] * len(record.probes)
    assert [p.candidate for p in res.probes] == [s.decision.candidate for s in record.probes]
    assert [p.items for p in res.probes] == record.items
    assert res.measurement.purpose == "serve" and res.measurement.items == 3_000 - sum(record.items)
    assert res.first_decision == record.first
    assert n_observed() == len(record.probes) + 1  # every probe, then the job, learnt once

    runs = runs_of("job-probed")
    probes = sorted((r for r in runs if r.data.tags.get("purpose") == "probe"), key=lambda r: r.data.params["probe_index"])
    (main,) = [r for r in runs if r.data.tags.get("purpose") == "serve"]
    assert len(probes) == len(record.probes)
    for r, s in zip(probes, record.probes):
        assert r.data.params["variant"] == s.decision.candidate.variant.name
        assert r.data.metrics["predicted_latency_p99_ms"] == pytest.approx(s.decision.explanation.predicted.latency_p99_ms)
        assert r.data.metrics["latency_p99_ms"] > 0
    assert main.data.params["ran_on"] == res.decision.candidate.key
    assert main.data.params["first_choice"] == record.first.candidate.key
    assert main.data.tags["switched_after_probes"] == str(res.decision.candidate.key != record.first.candidate.key).lower()

    # a re-run finds everything done: no probe runs again, no row is written twice, nothing new is learnt
    again = asyncio.run(batch_inference(dataset=str(data), output=str(out), job_id="job-probed", **PROBING))
    assert again.probes == [] and again.measurement is None and again.decision.decision_id == res.decision.decision_id
    assert sorted(rows(out)) == sorted(ids) and n_observed() == len(record.probes) + 1
    assert (out / DECISION_FILE).is_file()


@SLOW[0]
@SLOW[1]
def test_probes_off_or_a_small_job_runs_as_before(own_home, tmp_path):
    data = make_dataset("cnn", 1_200, tmp_path / "in.parquet", seed=8)
    for name, overrides in {"off": {"probes": 0}, "small": {"probe_min_items": 5_000}}.items():
        out = tmp_path / name
        res = asyncio.run(batch_inference(dataset=str(data), output=str(out), job_id=f"job-{name}", **{**PROBING, **overrides}))
        assert recorded_probes(out) is None and res.probes == [] and res.first_decision is None
        assert sorted(rows(out)) == sorted(pq.read_table(data).column("id").to_pylist())
        assert "probe_items" not in json.loads((out / PLAN_FILE).read_text())


@pytest.mark.parametrize(("bad", "name"), [({"probes": 9}, "probes"), ({"probe_share": 0.5}, "probe_share"),
                                           ({"probe_share": -0.1}, "probe_share"), ({"probe_s": 0}, "probe_s"),
                                           ({"probe_min_items": 0}, "probe_min_items")])
def test_bad_probe_parameters_are_refused_naming_the_parameter(bad, name):
    from flows.batch_inference import BatchParams
    from flows.common import validate
    from oltunes.errors import ConfigError

    good = dict(family="cnn", slo_ms=10, accuracy_floor=0, objective="energy", launcher="local", items_per_worker=1,
                shard_size=1, part_timeout_s=1, policy="oltunes", output_wait_s=0, lease_ttl_s=10, lease_wait_s=0,
                probes=2, probe_share=0.02, probe_min_items=1, probe_s=60)  # fmt: skip
    validate(BatchParams, **good)
    with pytest.raises(ConfigError) as e:
        validate(BatchParams, **{**good, **bad})
    assert f"parameter {name!r}" in str(e.value)


@SLOW[0]
@SLOW[1]
def test_probe_shards_run_in_containers_and_the_output_holds_every_row_once(own_home, tmp_path, docker_engine,
                                                                           worker_image, monkeypatch, settings_env):
    monkeypatch.setenv("OLTUNES_WORKER_IMAGE", worker_image)  # the image built here (no registry)
    settings_env()
    data = make_dataset("cnn", 3_000, tmp_path / "in.parquet", seed=9)
    out = tmp_path / "out"
    res = asyncio.run(batch_inference(dataset=str(data), output=str(out), job_id="job-probed-docker", launcher="docker",
                                      **PROBING))  # fmt: skip
    record = recorded_probes(out)
    assert record is not None and len(record.probes) >= 2, "the tuner suggested no trial to probe"
    ids = rows(out)
    assert len(ids) == len(set(ids)) == 3_000 and sorted(ids) == sorted(pq.read_table(data).column("id").to_pylist())
    assert [p.purpose for p in res.probes] == ["probe"] * len(record.probes)
    assert [p.items for p in res.probes] == record.items and res.measurement.items == 3_000 - sum(record.items)
