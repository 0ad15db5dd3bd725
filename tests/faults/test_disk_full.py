"""Issue 31 case 1, end to end: a real ``oltunes tuner serve`` whose disk fills while observes keep coming.

Two ways to fill the disk: a 3 MB tmpfs as the service's whole working directory (needs root to mount; skipped
otherwise), and a per-process file size limit (``RLIMIT_FSIZE``, set on the running server with ``prlimit``:
a write past it fails with EFBIG, the same partial-write-then-error path as ENOSPC), which runs anywhere.
Either way: every observe is answered 200 or 507, never 500; after the disk is freed, a SIGKILL and a restart,
every measurement answered 200 is still known (sent again, it is a duplicate), and no empty journal segments are
left behind.
"""

from __future__ import annotations

import contextlib
import resource
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.tuner.serve_process import AUTH, ServeProcess
from tests.tuner.test_service import make_cluster_candidate, make_measurement

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root); the RLIMIT_FSIZE variant covers the same path")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> None:
    """Write `path` until the filesystem is full."""
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(chunk)


def send(http: httpx.Client, ms) -> dict[str, int]:
    """Observe each measurement alone; the ids answered 200 go into the result with their answer code."""
    codes = {}
    for m in ms:
        r = http.post("/v1/observe", content=m.model_dump_json(), headers={"Content-Type": "application/json"})
        assert r.status_code in (200, 507), (r.status_code, r.text)
        if r.status_code == 507:
            assert "retry" in r.json()["detail"]
        codes[m.measurement_id] = r.status_code
    return codes


def check_nothing_acknowledged_was_lost(svc: ServeProcess, acked: list) -> None:
    svc.start()  # after a SIGKILL: the journal replays
    try:
        with httpx.Client(base_url=svc.url, headers=AUTH, timeout=30) as http:
            body = "[" + ",".join(m.model_dump_json() for m in acked) + "]"
            r = http.post("/v1/observe", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 200, r.text
            assert (r.json()["accepted"], r.json()["duplicates"]) == (0, len(acked))  # every one known: 0 lost
        journal = svc.state.with_name("state.json.journal")
        assert [p for p in journal.iterdir() if p.stat().st_size == 0] == []  # no empty segments
    finally:
        svc.kill()


def measurements(start: int, n: int):
    c = make_cluster_candidate()
    return [make_measurement(c, i, latency_ms=5.0 + i % 7) for i in range(start, start + n)]


def test_disk_full_on_a_tiny_tmpfs_then_sigkill_loses_no_acknowledged_observe(tmp_path):
    with tmpfs(tmp_path / "fs", "3m") as root:
        svc = ServeProcess(root, persist_every_s=0.5)  # saves keep failing while the disk is full
        with svc:
            with httpx.Client(base_url=svc.url, headers=AUTH, timeout=30) as http:
                send(http, measurements(0, 20))
                filler = root / "filler"
                fill(filler)
                with open(filler, "r+b") as f:  # leave room for some records, not all
                    f.truncate(max(0, filler.stat().st_size - 120_000))
                first = send(http, measurements(20, 600))
                filler.unlink()  # space again
                second = send(http, measurements(620, 50))
            svc.kill()
        outcome = Counter(first.values())
        assert outcome[507] > 0 and outcome[200] > 0, outcome  # the disk did fill, and some fit first
        assert set(second.values()) == {200}  # serving again once there is space
        acked = [m for m in measurements(0, 670) if {**first, **second}.get(m.measurement_id, 200) == 200]
        check_nothing_acknowledged_was_lost(svc, acked)


def test_file_size_limit_mid_write_then_sigkill_loses_no_acknowledged_observe(tmp_path):
    svc = ServeProcess(tmp_path)
    with svc:
        with httpx.Client(base_url=svc.url, headers=AUTH, timeout=30) as http:
            limit = 150_000  # bytes per file: the open segment hits it after a few hundred records
            resource.prlimit(svc.proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
            codes = send(http, measurements(0, 400))
        svc.kill()
    outcome = Counter(codes.values())
    assert outcome[507] > 0 and outcome[200] > 0, outcome
    acked = [m for m in measurements(0, 400) if codes[m.measurement_id] == 200]
    check_nothing_acknowledged_was_lost(svc, acked)
