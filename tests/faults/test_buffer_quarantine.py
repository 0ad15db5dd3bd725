"""Issue 31 case 6: an unreadable file in the MLflow buffer is quarantined; the records behind it land."""

from __future__ import annotations

import pytest

from oltunes.tracking import Tracker
from oltunes.tracking import conventions as cv
from tests.tracking.test_faults import runs_tagged
from tests.tracking.test_tracking import closed_port_uri, make_measurement

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("junk", [b"", b"not json", b"[1, 2]", b"\xff\xfe", b'{"key": "x"'])
def test_unreadable_buffer_file_is_moved_aside_and_the_rest_replays(tmp_path, monkeypatch, junk):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    buf = tmp_path / "buffer"
    down = Tracker(uri=closed_port_uri(), buffer_dir=buf)
    first, second = make_measurement(job_id="q1"), make_measurement(job_id="q2")
    down.log_measurement(first, experiment="t-q")
    down.log_measurement(second, experiment="t-q")
    (buf / "00000000000000000001-junk.json").write_bytes(junk)  # sorts first: replay meets it before the rest
    assert down.pending() == 3

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    up = Tracker(uri=uri, buffer_dir=buf, artifact_root=tmp_path / "artifacts")
    assert up.flush() == 2
    assert up.pending() == 0 and up.quarantined() == 1
    assert (buf / "quarantine" / "00000000000000000001-junk.json").read_bytes() == junk  # kept as it was
    # MLflow is up and nothing is pending: the next record lands at once instead of waiting behind the junk.
    third = make_measurement(job_id="q3")
    assert up.log_measurement(third, experiment="t-q") is not None
    keys = sorted(r.data.tags[cv.TAG_KEY] for r in runs_tagged(uri, "t-q", cv.TAG_KEY))
    assert keys == sorted(m.measurement_id for m in (first, second, third))
