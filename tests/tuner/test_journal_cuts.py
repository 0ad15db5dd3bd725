"""Property (issue 31): a journal cut at any byte offset restores exactly the acknowledged prefix.

A crash (SIGKILL, power cut) can leave a segment ending anywhere inside the last append. Every record whose line
(newline included) lies before the cut was written before the cut; everything after it was not, so it was never
acknowledged. Replay must give exactly the records before the cut: none lost, none invented, no error.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oltunes.service.journal import ObserveJournal
from tests.tuner.test_service import make_cluster_candidate, make_measurement


@settings(max_examples=8, deadline=None)
@given(batches=st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=4),
       latency=st.floats(min_value=0.5, max_value=5_000.0))
def test_every_byte_cut_restores_exactly_the_records_before_it(tmp_path_factory, batches, latency):
    root = tmp_path_factory.mktemp("cut")
    c = make_cluster_candidate()
    ms = [make_measurement(c, i, latency_ms=latency) for i in range(sum(batches))]
    j = ObserveJournal(root / "j")
    done = 0
    for n in batches:
        j.append(ms[done: done + n])
        done += n
    j.sync()
    j.close()
    [segment] = j.segments()
    data = segment.read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]  # offset just past each record
    assert len(ends) == len(ms)
    for cut in range(len(data) + 1):
        segment.write_bytes(data[:cut])
        restored = [m.measurement_id for m in ObserveJournal(root / "j").replay()]
        whole = sum(1 for e in ends if e <= cut)
        assert restored == [m.measurement_id for m in ms[:whole]], cut
