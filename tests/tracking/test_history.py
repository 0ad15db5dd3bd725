"""Warm start reads only what the tuner's state has not absorbed; with no state it rebuilds from every run."""

from __future__ import annotations

import time

import pytest
from mlflow import MlflowClient

from oltunes.tracking import Tracker, warm_start
from oltunes.tracking import conventions as cv
from oltunes.tracking import history as hist
from oltunes.tracking import store as store_module
from oltunes.tracking.history import cursor_path
from oltunes.tuner.tuner import Tuner
from oltunes.tuner.local import StateFileTuner
from tests.tracking.test_tracking import CAND, VARIANT, closed_port_uri, make_measurement

DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def setup(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri=uri, buffer_dir=tmp_path / "buffer", artifact_root=tmp_path / "artifacts")
    return tracker, tmp_path / "state" / "tuner.json"


def log_batch_runs(tracker: Tracker, n: int, *, days_ago: float | None = None, start: int = 0) -> list:
    ms = [make_measurement(job_id=f"j{start + i}", latency_p99_ms=10.0 + i) for i in range(n)]
    c = MlflowClient(tracker.uri)
    for i, m in enumerate(ms):
        rid = tracker.log_measurement(m)
        if days_ago is not None:  # history accumulated over time: runs ended long ago, an hour apart
            c.set_terminated(rid, end_time=int(time.time() * 1000 - days_ago * DAY_MS + i * DAY_MS / 24))
    return ms


def opened(state) -> StateFileTuner:
    """The tuner a flow warm-starts: bound to its state file (a fresh one when there is none)."""
    return StateFileTuner.open(state, lambda: Tuner([VARIANT], seed=1))


def counting(monkeypatch) -> list[int]:
    """Spy on how many runs each warm start reads from MLflow."""
    reads: list[int] = []
    real = hist.read_runs

    def spy(*a, **kw):
        found, marks = real(*a, **kw)
        reads.append(len(found))
        return found, marks

    monkeypatch.setattr(hist, "read_runs", spy)
    return reads


def test_warm_start_replays_only_what_the_state_has_not_seen(setup, monkeypatch):
    tracker, state = setup
    reads = counting(monkeypatch)
    log_batch_runs(tracker, 6, days_ago=3)
    assert warm_start(tracker, opened(state), state, ("batch",), simulated=False) == 6
    assert state.exists() and cursor_path(state).exists()
    assert reads == [6]  # no cursor yet: a full rebuild

    new = log_batch_runs(tracker, 2, start=100)  # ended just now
    assert warm_start(tracker, opened(state), state, ("batch",), simulated=False) == 2
    # only the runs that ended after the mark, plus the one at the mark (the clock-skew overlap re-reads it)
    assert reads[-1] == 3
    loaded = Tuner.load(state)
    assert all(loaded.has_seen(m.measurement_id) for m in new)
    assert warm_start(tracker, opened(state), state, ("batch",), simulated=False) == 0  # exactly once


def test_no_state_rebuilds_everything_including_streaming_steps(setup):
    tracker, state = setup
    batch = log_batch_runs(tracker, 3, days_ago=1)
    svc = tracker.service("svc-h", candidate=CAND, steps_per_batch=2, system_metrics_s=None)
    steps = [make_measurement(kind="streaming", job_id="svc-h") for _ in range(5)]
    for i, m in enumerate(steps):
        svc.log_step(i, m)
    svc.end()
    assert warm_start(tracker, opened(state), state, ("batch", "streaming"), simulated=False) == 8
    state.unlink()  # a new machine: the cursor no longer describes any state
    assert warm_start(tracker, opened(state), state, ("batch", "streaming"), simulated=False) == 8
    again = Tuner.load(state)
    assert again.n_observed == 8 and all(again.has_seen(m.measurement_id) for m in batch + steps)


def test_an_older_state_than_the_cursor_is_rebuilt(setup, monkeypatch):
    tracker, state = setup
    reads = counting(monkeypatch)
    log_batch_runs(tracker, 4, days_ago=2)
    warm_start(tracker, opened(state), state, ("batch",), simulated=False)
    Tuner([VARIANT], seed=1).save(state)  # a backup from before those runs is restored
    assert warm_start(tracker, opened(state), state, ("batch",), simulated=False) == 4 and reads[-1] == 4


def test_simulated_and_real_history_do_not_mix(setup):
    tracker, state = setup
    tracker.log_measurement(make_measurement(simulated=True, energy_source="simulated"))
    log_batch_runs(tracker, 2)
    assert warm_start(tracker, opened(state), state, ("batch",), simulated=False) == 2
    sim_state = state.with_name("sim.json")
    assert warm_start(tracker, opened(sim_state), sim_state, ("batch",), simulated=True) == 1


def test_a_rebuild_reads_the_history_page_by_page_with_a_progress_bar(setup, monkeypatch):
    tracker, state = setup
    log_batch_runs(tracker, 5, days_ago=1)
    monkeypatch.setattr(hist, "PAGE", 2)
    pages: list[int] = []
    client = tracker._client()
    real_search = client.search_runs
    monkeypatch.setattr(client, "search_runs", lambda *a, **k: (p := real_search(*a, **k), pages.append(len(p)))[0])
    bars: list[bool] = []
    real_progress = hist._progress
    monkeypatch.setattr(hist, "_progress", lambda enabled: (bars.append(enabled), real_progress(enabled))[1])
    assert warm_start(tracker, opened(state), state, ("batch",), simulated=False) == 5
    assert pages == [2, 2, 1] and bars == [True]  # no state: every run, in pages, with a bar
    log_batch_runs(tracker, 1, start=50)
    pages.clear()
    assert warm_start(tracker, opened(state), state, ("batch",), simulated=False) == 1
    assert bars == [True, False] and sum(pages) < 5  # incremental: no bar, and not the whole history


def test_runs_written_by_older_versions_warm_start_exactly_once(setup):
    """Runs from before the step artifacts: every measurement a JSON tag ``oltunes.measurement.<id>``."""
    tracker, state = setup
    c = MlflowClient(tracker.uri)
    steps = [make_measurement(kind="streaming", job_id="svc-old") for _ in range(3)]
    job = make_measurement(job_id="batch-old")
    for kind, key_tag, ms in (("streaming", cv.TAG_SERVICE, steps), ("batch", cv.TAG_KEY, [job])):
        tags = {key_tag: ms[0].job_id, **{cv.TAG_MEASUREMENT_PREFIX + m.measurement_id: m.model_dump_json() for m in ms}}
        run = c.create_run(tracker._experiment_id(cv.experiment_for(kind)), tags=tags)
        c.set_terminated(run.info.run_id)
    kinds = ("batch", "streaming")
    assert warm_start(tracker, opened(state), state, kinds, simulated=False) == 4
    assert all(Tuner.load(state).has_seen(m.measurement_id) for m in [*steps, job])
    assert warm_start(tracker, opened(state), state, kinds, simulated=False) == 0
    state.unlink()  # a new machine rebuilds the same four
    assert warm_start(tracker, opened(state), state, kinds, simulated=False) == 4


def test_a_run_buffered_long_ago_is_read_by_the_next_warm_start_once_it_lands(setup, tmp_path, monkeypatch):
    """A replayed run ends when it lands, so a cursor that moved on meanwhile still reads it."""
    tracker, state = setup
    log_batch_runs(tracker, 2)
    assert warm_start(tracker, opened(state), state, ("batch",), simulated=False) == 2
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    other_host = tmp_path / "other-host-buffer"
    late = make_measurement(job_id="late")
    with monkeypatch.context() as mp:  # another host ran a job a day ago while MLflow was down
        day_ago = time.time() - DAY_MS / 1000
        mp.setattr(store_module, "now_ms", lambda: int(day_ago * 1000))
        down = Tracker(uri=closed_port_uri(), buffer_dir=other_host)
        assert down.log_measurement(late, started_at=day_ago - 60) is None and down.pending() == 1
    up = Tracker(uri=tracker.uri, buffer_dir=other_host, artifact_root=tmp_path / "artifacts")
    assert up.flush() == 1
    assert warm_start(tracker, opened(state), state, ("batch",), simulated=False) == 1
    assert Tuner.load(state).has_seen(late.measurement_id)
