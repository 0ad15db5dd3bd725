"""The observe journal without HTTP: replay after a failed save, a torn last line, a corrupt line."""

from __future__ import annotations

import pytest

import oltunes.service.served as served
from oltunes.errors import DataError
from oltunes.tuner import Tuner
from oltunes.service.served import TunerService
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
    assert again.journal.segments() == []  # compacted, and no empty segment left behind


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


# -- issue 31 case 1: an append writes everything or raises; a refused append leaves nothing behind ----------
from oltunes.service import journal as journal_mod  # noqa: E402
from oltunes.service.journal import JournalWriteError, ObserveJournal  # noqa: E402


def _ms(n: int, start: int = 0):
    c = make_cluster_candidate()
    return [make_measurement(c, i) for i in range(start, start + n)]


def _ids(journal_dir) -> list[str]:
    return [m.measurement_id for m in ObserveJournal(journal_dir).replay()]


def test_a_short_write_continues_until_every_byte_is_written(tmp_path, monkeypatch):
    real = journal_mod.os.write
    monkeypatch.setattr(journal_mod.os, "write", lambda fd, b: real(fd, bytes(b)[:7]))  # 7 bytes per call
    j = ObserveJournal(tmp_path / "j")
    j.append(_ms(3))
    j.sync()
    j.close()
    monkeypatch.undo()
    assert _ids(tmp_path / "j") == ["m-0", "m-1", "m-2"]


def test_a_full_disk_mid_write_raises_and_cuts_back_to_the_last_complete_record(tmp_path, monkeypatch):
    j = ObserveJournal(tmp_path / "j")
    j.append(_ms(2))
    real, calls = journal_mod.os.write, []

    def fills_up(fd, b):  # the first call writes part of the batch, the next finds the disk full
        calls.append(len(b))
        if len(calls) == 1:
            return real(fd, bytes(b)[: len(b) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal_mod.os, "write", fills_up)
    with pytest.raises(JournalWriteError, match="No space left on device.*nothing of this request"):
        j.append(_ms(3, start=2))
    monkeypatch.undo()
    j.append(_ms(1, start=5))  # space again: the next append lands on a clean record boundary
    j.sync()
    j.close()
    assert _ids(tmp_path / "j") == ["m-0", "m-1", "m-5"]


def test_when_the_cut_back_fails_the_segment_is_sealed_and_the_next_append_starts_a_new_one(tmp_path, monkeypatch):
    j = ObserveJournal(tmp_path / "j")
    j.append(_ms(1))
    real = journal_mod.os.write
    monkeypatch.setattr(journal_mod.os, "write", lambda fd, b: real(fd, bytes(b)[:40]) if len(b) > 40 else
                        (_ for _ in ()).throw(OSError(5, "Input/output error")))  # fmt: skip
    monkeypatch.setattr(journal_mod.os, "ftruncate", lambda fd, n: (_ for _ in ()).throw(OSError(5, "EIO")))
    with pytest.raises(JournalWriteError):
        j.append(_ms(1, start=1))
    monkeypatch.undo()
    j.append(_ms(1, start=2))
    j.close()
    assert len(j.segments()) == 2  # the torn tail is the last line of the first segment
    assert _ids(tmp_path / "j") == ["m-0", "m-2"]


def test_no_empty_segments_pile_up_while_nothing_is_observed_or_saves_fail(tmp_path):
    j = ObserveJournal(tmp_path / "j")
    for _ in range(5):
        j.rotate()
    assert j.segments() == []
    j.append(_ms(1))
    for _ in range(5):
        j.rotate()
    assert len(j.segments()) == 1


def test_a_measurement_this_version_refuses_is_skipped_on_replay_not_a_corrupt_journal(tmp_path):
    j = ObserveJournal(tmp_path / "j")
    j.append(_ms(2))
    j.close()
    seg = j.segments()[-1]
    first, second = seg.read_bytes().splitlines()
    seg.write_bytes(first + b"\n" + second.replace(b'"items":100', b'"items":-1') + b"\n" + first + b"\n")
    assert _ids(tmp_path / "j") == ["m-0", "m-0"]
