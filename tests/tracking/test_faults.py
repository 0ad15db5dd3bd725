"""Fault cases from issue 8 against real MLflow: quotes in ids, rejected records, a server SIGKILLed between
create_run and log_batch, two processes initialising one fresh store."""

from __future__ import annotations

import multiprocessing as mp
import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient
from pydantic import ValidationError

from oltunes.tracking import RecordRejected, Tracker, TrackingUnavailable
from oltunes.tracking import conventions as cv
from oltunes.tracking.filters import literal
from tests.tracking.server import MlflowServer
from tests.tracking.test_tracking import closed_port_uri, make_measurement


@pytest.fixture
def fresh(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return uri, Tracker(uri=uri, buffer_dir=tmp_path / "buffer", artifact_root=tmp_path / "artifacts")


def runs_tagged(uri: str, experiment: str, tag: str) -> list:
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(experiment)
    return [] if exp is None else [r for r in c.search_runs([exp.experiment_id]) if tag in r.data.tags]


@pytest.mark.parametrize("value", ["it's", 'say "hi"', "x' OR tags.`a` = 'b", "back\\slash'"])
def test_filter_literal_selects_exactly_the_value(value):
    from mlflow.utils.search_utils import SearchUtils

    parsed = SearchUtils.parse_search_filter(f"tags.`k` = {literal(value, 'service_id')}")
    assert len(parsed) == 1 and parsed[0]["value"] == value


def test_a_value_with_both_quotes_is_refused_naming_the_field_not_the_value():
    with pytest.raises(RecordRejected, match="service_id") as e:
        literal("both ' and \" quotes", "service_id")
    assert "quotes\"" not in str(e.value) and "both '" not in str(e.value)


def test_quote_in_service_id_and_key_lands_in_a_real_store(fresh):
    uri, tracker = fresh
    sid = "svc-o'brien"
    svc = tracker.service(sid, experiment="t-quote", steps_per_batch=2, system_metrics_s=None)
    steps = [make_measurement(kind="streaming", latency_p99_ms=5.0 + i) for i in range(3)]
    for i, m in enumerate(steps):
        svc.log_step(i, m)
    assert svc.end() is not None
    again = tracker.service(sid, experiment="t-quote", system_metrics_s=None)  # a restart finds its run again
    assert again.run_id == svc.run_id
    assert MlflowClient(uri).get_run(svc.run_id).info.status == "RUNNING"  # live again while it runs
    again.end()
    # Ids that reach a run key are refused at the edge by the shared id pattern (oltunes.types), naming the field.
    with pytest.raises(ValidationError, match="measurement_id"):
        make_measurement(measurement_id="job-'quoted'")
    m = make_measurement()
    rid = tracker.log_measurement(m, experiment="t-quote")
    assert rid is not None and tracker.log_measurement(m, experiment="t-quote") == rid
    assert tracker.pending() == 0 and tracker.rejected() == []
    runs = runs_tagged(uri, "t-quote", cv.TAG_SERVICE)
    assert [r.data.tags[cv.TAG_SERVICE] for r in runs] == [sid] and runs[0].info.status == "FINISHED"
    hist = MlflowClient(uri).get_metric_history(runs[0].info.run_id, cv.LATENCY_P99)
    assert sorted((h.step, h.value) for h in hist) == [(0, 5.0), (1, 6.0), (2, 7.0)]


def test_rejected_record_goes_to_dead_letter_and_never_blocks_the_ones_behind(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    uri, up = fresh
    down = Tracker(uri=closed_port_uri(), buffer_dir=tmp_path / "buffer")
    good1, good2, good3 = (make_measurement(job_id=f"g{i}") for i in range(3))
    down.log_measurement(good1, experiment="t-dead")
    # MLflow refuses this metric name (INVALID_PARAMETER_VALUE): the record itself is bad, not the server.
    down.log_measurement(make_measurement(job_id="bad"), experiment="t-dead", extra_metrics={"bad*name?": 1.0})
    down.log_measurement(good2, experiment="t-dead")
    assert down.pending() == 3
    assert up.flush() == 2 and up.pending() == 0
    [dead] = up.rejected()
    assert dead["tags"][cv.TAG_JOB] == "bad" and "INVALID_PARAMETER_VALUE" in dead["rejected"]["reason"]
    # Directly, too: a rejected record is dead-lettered, and the next one lands at once (not buffered).
    assert up.log_run(experiment="t-dead", key="k-bad", metrics={"also bad!": 1.0}) is None
    assert up.log_measurement(good3, experiment="t-dead") is not None and up.pending() == 0
    assert len(up.rejected()) == 2
    keys = sorted(r.data.tags[cv.TAG_KEY] for r in runs_tagged(uri, "t-dead", cv.TAG_KEY))
    assert keys == sorted(m.measurement_id for m in (good1, good2, good3))  # no half-made run of a rejected one


def test_unreachable_is_not_rejected(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    down = Tracker(uri=closed_port_uri(), buffer_dir=tmp_path / "buffer")
    assert down.log_measurement(make_measurement(), experiment="t-down") is None
    assert down.pending() == 1 and down.rejected() == []
    with pytest.raises(TrackingUnavailable):
        down.find_run("t-down", cv.TAG_KEY, "x")


@pytest.mark.slow
@pytest.mark.timeout(900)  # two real `mlflow server` start-ups; minutes each on a loaded 2-core machine
def test_server_killed_between_create_run_and_log_batch_replays_to_one_finished_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")  # a loaded machine: slow is not down (refused is)
    db, buf = tmp_path / "mlflow.db", tmp_path / "buffer"
    server = MlflowServer(db, tmp_path / "artifacts", tmp_path / "server.log")
    try:
        tracker = Tracker(uri=server.start(), buffer_dir=buf)
        created: list[str] = []

        def die_now(run_id: str) -> None:  # inside the window: the run exists, nothing is logged to it yet
            created.append(run_id)
            server.kill()

        tracker.on_run_created = die_now
        m = make_measurement(job_id="crash")
        assert tracker.log_measurement(m, experiment="t-crash", slo_ms=25.0) is None
        assert created and tracker.pending() == 1
        half = MlflowClient(f"sqlite:///{db}").get_run(created[0])
        assert half.info.status == "RUNNING" and half.data.metrics == {}  # the half-written run is real
        kept = tmp_path / "kept"
        shutil.copytree(buf, kept)

        again = Tracker(uri=server.start(), buffer_dir=buf)  # restarted server, same store
        assert again.flush() == 1 and again.pending() == 0
        shutil.rmtree(buf)
        shutil.copytree(kept, buf)
        assert again.flush() == 1 and again.pending() == 0  # a second replay changes nothing
        runs = runs_tagged(f"sqlite:///{db}", "t-crash", cv.TAG_KEY)
        assert [r.info.run_id for r in runs] == created  # completed in place: one run, no duplicate
        run = runs[0]
        assert run.info.status == "FINISHED" and run.data.metrics[cv.LATENCY_P99] == m.latency_p99_ms
        hist = MlflowClient(f"sqlite:///{db}").get_metric_history(run.info.run_id, cv.LATENCY_P99)
        assert len(hist) == 1  # completing twice logged each metric once
    finally:
        server.kill()


def _init_and_log(uri: str, buf: str, art: str, i: int, barrier, out) -> None:
    barrier.wait()
    try:
        tracker = Tracker(uri=uri, buffer_dir=Path(buf), artifact_root=Path(art))
        rid = tracker.log_run(experiment="t-race", key=f"k{i}", metrics={"x": float(i)})
        out.put(("ok", rid))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        out.put(("error", f"{type(e).__name__}: {e}"))


def test_two_processes_initialise_one_fresh_store_without_a_raw_alembic_error(tmp_path):
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_init_and_log, args=(uri, str(tmp_path / f"b{i}"), str(tmp_path / "art"), i, barrier, out))
             for i in range(2)]  # fmt: skip
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [r[0] for r in results] == ["ok", "ok"], results
    assert all(r[1] for r in results)  # both landed: neither was buffered by an init failure
    assert len(runs_tagged(uri, "t-race", cv.TAG_KEY)) == 2


def test_a_broken_store_is_an_oltunes_error_not_a_raw_traceback(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"this is not a database" * 100)
    t = Tracker(uri=f"sqlite:///{db}", buffer_dir=tmp_path / "buffer")
    with pytest.raises(TrackingUnavailable, match="unreachable or failing"):
        t.history()
    assert t.log_run(experiment="t-broken", key="k", metrics={"x": 1.0}) is None and t.pending() == 1


def test_streaming_chunks_buffered_while_down_replay_exactly_once(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    uri, up = fresh
    buf = tmp_path / "buffer"
    down = Tracker(uri=closed_port_uri(), buffer_dir=buf)
    svc = down.service("svc-down", experiment="t-chunks", steps_per_batch=3, system_metrics_s=None)
    steps = [make_measurement(kind="streaming", latency_p99_ms=1.0 + i) for i in range(5)]
    for i, m in enumerate(steps):
        svc.log_step(i, m)
    svc.end("KILLED")
    assert svc.run_id is None and down.pending() == 4  # start, two chunks, end
    kept = tmp_path / "kept"
    shutil.copytree(buf, kept)
    assert up.flush() == 4
    shutil.rmtree(buf)
    shutil.copytree(kept, buf)
    assert up.flush() == 4 and up.pending() == 0  # replayed twice: nothing counted twice
    (run,) = runs_tagged(uri, "t-chunks", cv.TAG_SERVICE)
    c = MlflowClient(uri)
    hist = c.get_metric_history(run.info.run_id, cv.LATENCY_P99)
    assert sorted((h.step, h.value) for h in hist) == [(i, 1.0 + i) for i in range(5)]
    assert run.info.status == "KILLED"
    assert sorted(m.measurement_id for m in hist_of(up, "t-chunks")) == sorted(m.measurement_id for m in steps)


def hist_of(tracker: Tracker, experiment: str) -> list:
    from oltunes.tracking.history import read_runs

    found, _ = read_runs(tracker, [experiment], None)
    return list(found.values())
