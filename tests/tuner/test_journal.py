"""The observe journal without HTTP: replay after a failed save, a torn last line, a corrupt line."""

from __future__ import annotations

import pytest

import oltunes.tuner.served as served
from oltunes.errors import DataError
from oltunes.tuner import Tuner
from oltunes.tuner.served import TunerService
from tests.tuner.test_service import make_cluster_candidate, make_measurement
from tests.tuner.variants import make_variants


def service(tmp_path) -> TunerService:
    return TunerService(Tuner(make_variants(), seed=0), state_path=tmp_path / "state.json", model_store=tmp_path)


def test_a_failed_save_keeps_the_journal_and_a_torn_last_line_is_skipped(tmp_path, monkeypatch):
    ms = [make_measurement(make_cluster_candidate(), i) for i in range(3)]
    svc = service(tmp_path)
    assert svc.observe(ms[:2]).accepted == 2
    svc.sync()

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(served, "write_state", disk_full)
    with pytest.raises(OSError):
        svc.persist()
    assert svc.observe(ms[2:]).accepted == 1  # still serving, still journaling
    svc.sync()
    svc.journal.close()
    last = svc.journal.segments()[-1]
    with open(last, "ab") as f:  # a crash in the middle of a write: never acknowledged
        f.write(ms[0].model_copy(update={"measurement_id": "torn"}).model_dump_json().encode()[:50])
    monkeypatch.undo()

    again = service(tmp_path)  # restart: nothing was saved, everything acknowledged is replayed
    assert again.tuner.n_observed == 3 and not again.tuner.has_seen("torn")
    assert again.persist() and Tuner.load(tmp_path / "state.json").n_observed == 3
    assert [p.stat().st_size for p in again.journal.segments()] == [0]  # compacted


def test_a_corrupt_line_inside_a_segment_stops_the_start_with_the_file_named(tmp_path):
    svc = service(tmp_path)
    svc.observe([make_measurement(make_cluster_candidate(), 0)])
    svc.journal.close()
    seg = svc.journal.segments()[-1]
    seg.write_bytes(b"garbage\n" + seg.read_bytes())
    with pytest.raises(DataError, match=f"{seg.name} line 1"):
        service(tmp_path)


def test_a_request_of_several_measurements_is_learnt_as_one_batch_like_in_process(tmp_path):
    ms = [make_measurement(make_cluster_candidate(), i, latency_ms=5.0 + i) for i in range(6)]
    svc = service(tmp_path)
    twin, one_by_one = Tuner(make_variants(), seed=0), Tuner(make_variants(), seed=0)
    twin.observe_many(ms[:5])
    for m in ms[:5]:
        one_by_one.observe(m)
    resp = svc.observe([*ms[:5], ms[0]])  # a repeat within the request is a duplicate
    assert (resp.accepted, resp.duplicates) == (5, 1)
    assert svc.tuner.state_dict() == twin.state_dict() != one_by_one.state_dict()
