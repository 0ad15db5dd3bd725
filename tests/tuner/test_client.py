"""TunerClient against a real uvicorn on loopback: fallback when down, the outbox, exactly-once delivery."""

from __future__ import annotations

import socket
import time

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from oltunes.config import Settings
from oltunes.errors import ConfigError, DataError, TunerUnavailable
from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.client.tuner_client import TunerClient
from oltunes.tuner.factory import TunerLike, get_tuner
from oltunes.client.fallback import safe_default
from oltunes.tuner.local import StateFileTuner
from oltunes.client.outbox import Outbox
from oltunes.service.app import create_app, serve_in_thread
from oltunes.types import (
    Candidate,
    ClusterState,
    JobSpec,
    Measurement,
    Placement,
    Pool,
)
from oltunes.netaddr import free_port
from tests.tuner.variants import make_variants

TOKEN = "client-test-token"


def make_cluster() -> ClusterState:
    pools = [Pool(name="t4-a", accelerator=CATALOG["t4"], count=1, slots_per_device=4),
             Pool(name="a100-a", accelerator=CATALOG["a100"], count=2, slots_per_device=2)]
    busy = Candidate(pool="a100-a", accelerator="a100", variant=make_variants()[0], batch_size=1)
    placements = [Placement(job_id=f"busy-{i}", pool="a100-a", device=i % 2, candidate=busy, slo_ms=50)
                  for i in range(3)]
    return ClusterState(pools=pools, placements=placements)  # free slots: t4-a 4, a100-a 1


def make_measurement(i: int) -> Measurement:
    cand = Candidate(pool="t4-a", accelerator="t4", variant=make_variants()[i % 9], batch_size=2 ** (i % 5))
    return Measurement(
        measurement_id=f"meas-{i}", job_id=f"job-{i}", candidate=cand, items=64, wall_s=0.5,
        latency_p50_ms=3.0, latency_p95_ms=4.0, latency_p99_ms=5.0 + i % 7, throughput_items_per_s=128.0,
        energy_j_per_item=0.2, energy_source="simulated", simulated=True,
    )


JOB = JobSpec(job_id="job-x", family="cnn", slo_ms=100.0, accuracy_floor=0.93)


def client(url: str, tmp_path, **kw) -> TunerClient:
    kw = {"token": TOKEN, "timeout_s": 2.0, "outbox_dir": tmp_path / "outbox", "retry_after_s": 0, **kw}
    return TunerClient(url, **kw)


def test_fallback_when_nothing_listens(tmp_path, oltunes_home):
    url = f"http://127.0.0.1:{free_port()}"
    with client(url, tmp_path, variants=make_variants()) as c:
        t0 = time.monotonic()
        d = c.decide(JOB, make_cluster())
        assert time.monotonic() - t0 < 2.0
    assert d.source == "fallback" and d.feasible and d.job_id == JOB.job_id
    assert "unreachable" in d.explanation.note
    # the documented rule: smallest variant meeting the floor, batch 1, conc 1, pool with most free slots
    meeting = [v for v in make_variants() if v.family == "cnn" and v.accuracy >= JOB.accuracy_floor]
    smallest = min(v.params for v in meeting)
    assert d.variant.accuracy >= JOB.accuracy_floor and d.variant.params == smallest
    assert d.variant.accuracy == max(v.accuracy for v in meeting if v.params == smallest)
    assert (d.candidate.pool, d.candidate.batch_size, d.candidate.concurrency) == ("t4-a", 1, 1)
    assert d.candidate.accelerator == "t4"


def test_safe_default_says_what_is_infeasible():
    strict = JOB.model_copy(update={"accuracy_floor": 0.99})
    d = safe_default(strict, make_cluster(), make_variants(), reason="test")
    assert not d.feasible and "accuracy floor" in d.explanation.note
    assert d.variant.accuracy == max(v.accuracy for v in make_variants() if v.family == "cnn")
    full = ClusterState(pools=[Pool(name="tiny", accelerator=CATALOG["cpu"], count=1, slots_per_device=1)],
                        placements=[Placement(job_id="o", pool="tiny", device=0, slo_ms=5,
                                              candidate=Candidate(pool="tiny", accelerator="cpu",
                                                                  variant=make_variants()[0], batch_size=1))])
    d = safe_default(JOB, full, make_variants(), reason="test")
    assert not d.feasible and "free slot" in d.explanation.note
    with pytest.raises(TunerUnavailable, match="no variant of family 'rnn'"):
        safe_default(JOB.model_copy(update={"family": "rnn"}), make_cluster(), make_variants(), reason="test")


def test_fallback_on_timeout_and_on_5xx(tmp_path, oltunes_home):
    # a socket that listens but never answers: the connection opens, the read times out
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        with client(f"http://127.0.0.1:{silent.getsockname()[1]}", tmp_path, timeout_s=0.3,
                    variants=make_variants()) as c:
            t0 = time.monotonic()
            d = c.decide(JOB, make_cluster())
            assert d.source == "fallback" and time.monotonic() - t0 < 3.0
            assert c.observe(make_measurement(0)) is True and c.pending == 1

    broken = FastAPI()

    @broken.post("/v1/recommend")
    def _down() -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": "overloaded"})

    with serve_in_thread(broken) as url, client(url, tmp_path, variants=make_variants()) as c:
        d = c.decide(JOB, make_cluster())
        assert d.source == "fallback" and "503" in d.explanation.note


def test_breaker_skips_the_network_after_a_failure(tmp_path, oltunes_home):
    url = f"http://127.0.0.1:{free_port()}"
    with client(url, tmp_path, variants=make_variants(), retry_after_s=60) as c:
        c.decide(JOB, make_cluster())
        d = c.decide(JOB, make_cluster())
    assert d.source == "fallback" and "less than 60s ago" in d.explanation.note


def test_outbox_delivered_exactly_once_after_service_returns(tmp_path, oltunes_home):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ms = [make_measurement(i) for i in range(7)]
    with client(url, tmp_path, variants=make_variants()) as c:
        for m in ms:
            assert c.observe(m) is True
        c.observe(ms[0])  # the same measurement twice while down: one file, named by its id
        files = sorted(p.name for p in (tmp_path / "outbox").iterdir())
        assert files == sorted(f"{m.measurement_id}.json" for m in ms)
        assert c.decide(JOB, make_cluster()).source == "fallback"

    tuner = Tuner(make_variants(), seed=0)
    app = create_app(tuner, token=TOKEN)
    with serve_in_thread(app, port=port):
        # a new client process finds the queue on disk; its first successful call flushes it
        with client(url, tmp_path) as c:
            assert c.pending == 7
            d = c.decide(JOB, make_cluster())
            assert d.source != "fallback"
            assert c.pending == 0
            assert app.state.service.n_observed == 7 and tuner.n_observed == 7

            # a crash between "sent" and "deleted" leaves a file behind: resending must not count it twice
            (tmp_path / "outbox" / "meas-3.json").write_text(ms[3].model_dump_json())
            assert c.flush() == 1 and c.pending == 0
            assert app.state.service.n_observed == 7
            assert c.observe(ms[5]) is False  # direct path: the service says duplicate
            assert c.observe(make_measurement(100)) is True
            assert app.state.service.n_observed == 8 and tuner.n_observed == 8
            assert c.health().n_observed_total == 8
        assert all(tuner.observe(m) is False for m in ms)  # the tuner has every one of them


def test_corrupt_outbox_file_is_quarantined_not_blocking(tmp_path, oltunes_home):
    outbox = tmp_path / "outbox"
    outbox.mkdir()
    (outbox / "broken.json").write_text('{"measurement_id": "broken", "job_id": ')
    (outbox / "meas-1.json").write_text(make_measurement(1).model_dump_json())
    tuner = Tuner(make_variants())
    with serve_in_thread(create_app(tuner, token=TOKEN)) as url, client(url, tmp_path) as c:
        assert c.flush() == 1
    assert not (outbox / "meas-1.json").exists()
    assert (outbox / "rejected" / "broken.json").exists()
    assert tuner.observe(make_measurement(1)) is False


def test_wrong_token_raises_and_keeps_the_measurement(tmp_path, oltunes_home):
    with serve_in_thread(create_app(Tuner(make_variants()), token=TOKEN)) as url:
        with client(url, tmp_path, token="nope") as c:
            with pytest.raises(ConfigError, match="refused the token"):
                c.decide(JOB, make_cluster())
            with pytest.raises(ConfigError):
                c.observe(make_measurement(3))
            assert c.pending == 1
        with client(url, tmp_path) as c:  # fixed token: the queued measurement goes through
            assert c.flush() == 1 and c.pending == 0


def test_rejected_request_raises_with_reason(tmp_path, oltunes_home):
    with serve_in_thread(create_app(Tuner(make_variants()), token=TOKEN)) as url, client(url, tmp_path) as c:
        with pytest.raises(DataError, match="cluster"):
            c.transport.request("POST", "/recommend", content='{"job": %s}' % JOB.model_dump_json())


def test_factory_in_process_by_default_http_one_setting_away(tmp_path, oltunes_home):
    local = get_tuner(Settings(), variants=make_variants())
    assert isinstance(local, StateFileTuner) and isinstance(local, TunerLike)
    with pytest.raises(ConfigError, match="variants"):
        get_tuner(Settings())
    local.observe(make_measurement(0))
    assert local.save() == Settings().tuner_state_path
    assert get_tuner(Settings()).observe(make_measurement(0)) is False  # restored from the state file

    remote = get_tuner(Settings(tuner_url="http://127.0.0.1:9", tuner_token=TOKEN), variants=make_variants())
    assert isinstance(remote, TunerClient) and isinstance(remote, TunerLike)
    assert remote.outbox.directory == oltunes_home / "buffer" / "tuner-outbox"
    remote.close()


def test_measurement_refused_by_the_service_is_kept_in_rejected(tmp_path, oltunes_home):
    picky = FastAPI()

    @picky.post("/v1/observe")
    def _refuse() -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": "candidate.pool: unknown"})

    m = make_measurement(4)
    with serve_in_thread(picky) as url, client(url, tmp_path) as c:
        with pytest.raises(DataError, match="candidate.pool"):
            c.observe(m)
        assert c.pending == 0
    assert Measurement.model_validate_json((tmp_path / "outbox" / "rejected" / "meas-4.json").read_text()) == m


def test_history_observed_through_the_client_once_each(tmp_path, oltunes_home):
    history = [make_measurement(i) for i in range(12)]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with client(url, tmp_path) as c:
        assert c.observe_many(history[:4]) == [True] * 4 and c.pending == 4  # down: queued, not lost
    tuner = Tuner(make_variants())
    with serve_in_thread(create_app(tuner, token=TOKEN), port=port), client(url, tmp_path) as c:
        assert sum(c.observe_many(history)) == 12
        # the flush that follows resends the 4 queued ones: the service drops them as duplicates
        assert c.pending == 0 and tuner.n_observed == 12 and c.health().n_observed == 12
        assert c.observe_many(history) == [False] * 12


def test_replay_and_flush_split_bodies_under_the_service_size_limit(tmp_path, oltunes_home, monkeypatch):
    import oltunes.client.transport as transport_module

    limit = 10_000  # ~15 measurements a body
    monkeypatch.setattr(transport_module, "MAX_BODY_BYTES", limit)
    tuner = Tuner(make_variants())
    ms = [make_measurement(i) for i in range(120)]
    assert len("[" + ",".join(m.model_dump_json() for m in ms) + "]") > 6 * limit
    with serve_in_thread(create_app(tuner, token=TOKEN, max_body_bytes=limit)) as url, client(url, tmp_path) as c:
        assert sum(c.observe_many(ms[:60])) == 60
        for m in ms[60:]:
            c.outbox.put(m)
        assert c.flush() == 60 and c.pending == 0 and not (tmp_path / "outbox" / "rejected").exists()
    assert tuner.n_observed == 120


def test_outbox_keeps_one_file_per_id_oldest_first_and_quarantines_what_is_not_a_measurement(tmp_path):
    box = Outbox(tmp_path / "ob")
    assert not box.nonempty and box.files() == [] and box.queued() == []
    late, early, tied = (make_measurement(i).model_copy(update={"timestamp": t})
                         for i, t in ((1, 20.0), (2, 10.0), (0, 20.0)))
    for m in (late, early, late, tied):
        box.put(m)
    assert box.nonempty and len(box.files()) == 3  # the same id twice is one file
    assert box.path("../a/b").parent == box.directory and box.path("../a/b").name != "b.json"  # stored by hash
    (box.directory / "junk.json").write_text("{")
    assert [m for _, m in box.queued()] == [early, tied, late]  # by timestamp, then file name
    assert (box.directory / "rejected" / "junk.json").exists()
    for path, _ in box.queued():
        path.unlink()
    box.recheck()
    assert not box.nonempty and Outbox(box.directory).nonempty is False
