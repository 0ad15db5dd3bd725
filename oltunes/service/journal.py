"""The observe journal: what makes an answered ``observe`` survive a crash (SIGKILL, power cut).

Every measurement the service accepts is appended to the journal (JSON lines) and fsynced *before* the service
answers. The state file is the compaction of the journal: a save rotates to a fresh segment, writes the state
(atomic, fsynced) and then deletes the segments the state now contains. On start the service replays every
segment left over into the tuner restored from the state file; ``observe`` is exactly-once by
``measurement_id``, so a segment that is replayed after the state already holds it changes nothing.

Layout: ``<dir>/<seq>.jsonl``, ``seq`` increasing. A segment file is created by the first append after a rotation
(no empty segments pile up while nothing is observed or while saves fail).

An append writes all its bytes or raises `JournalWriteError` (the service answers 507): ``write`` is looped over
short writes, and on an error (a full disk, a file size limit) the segment is truncated back to its last complete
record, so nothing of a refused request stays behind to be replayed or to tear a later line. If even the
truncation fails, the segment is sealed where it is and the next append starts a new one: the partial record is
then the last line of its segment. A crash (SIGKILL) can therefore leave a partial line only at the end of a
segment, and that line was never acknowledged: replay skips it. A partial line anywhere else is corruption, and
the start stops naming the file.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import ValidationError

from oltunes.errors import DataError, OLTunesError
from oltunes.types import Measurement

log = logging.getLogger(__name__)

_SUFFIX = ".jsonl"


class JournalWriteError(OLTunesError):
    """A measurement could not be written to the journal (full disk, I/O error); nothing of its request was
    accepted, so a retry later is safe. The service answers 507."""


class ObserveJournal:
    """Append-only, segmented log of accepted measurements. Thread-safe.

    Parameters
    ----------
    directory
        Where the segments live (created if missing); one journal per state file.
    """

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._written = self._synced = 0  # appends so far / appends known to be on disk
        existing = self.segments()
        self._seq = (self._seq_of(existing[-1]) if existing else 0) + 1  # the segment this process writes next
        self._file = None  # opened by the first append (`_seq`'s file), closed by `rotate`
        self._size = 0  # bytes of complete records in the open segment

    # -- writing -------------------------------------------------------------------------------------------
    def append(self, measurements: Sequence[Measurement]) -> None:
        """Write the measurements (one line each) to the OS, all of them or none (`JournalWriteError`);
        `sync` makes them durable."""
        if not measurements:
            return
        data = b"".join(m.model_dump_json().encode() + b"\n" for m in measurements)
        with self._lock:
            try:
                if self._file is None:
                    self._file = self._open(self._seq)
                    self._size = 0
                _write_all(self._file.fileno(), data)
            except OSError as e:
                self._undo_partial()
                raise JournalWriteError(
                    f"observe journal {self.dir}: could not write ({e.strerror or e}); nothing of this request "
                    "was accepted, retry once there is space") from None
            self._size += len(data)
            self._written += 1

    def _undo_partial(self) -> None:
        """After a failed write: cut the segment back to its last complete record, or seal it if that fails."""
        if self._file is None:
            return
        try:
            os.ftruncate(self._file.fileno(), self._size)
        except OSError:
            log.error("observe journal: could not truncate a partial write in %s; sealing it", self._file.name)
            self._close_current()

    def _close_current(self) -> None:
        """fsync and close the open segment; the next append opens the next one (also when the fsync fails)."""
        f, self._file = self._file, None
        self._seq += 1
        try:
            os.fsync(f.fileno())
            self._synced = self._written
        finally:
            f.close()

    def sync(self) -> None:
        """fsync everything appended so far. Called outside the service lock, so concurrent observes can share
        one fsync; a caller returns only once everything appended before its call is on disk."""
        with self._lock:
            target = self._written
            if self._synced >= target:
                return
            if self._file is None:  # sealed by a rotation whose fsync failed: cannot prove it is on disk
                raise JournalWriteError(f"observe journal {self.dir}: fsync failed; retry the request")
            fd = os.dup(self._file.fileno())  # a rotation may close the file meanwhile; the dup stays valid
        try:
            os.fsync(fd)
        except OSError as e:
            raise JournalWriteError(f"observe journal {self.dir}: fsync failed ({e.strerror or e}); "
                                    "retry the request") from None
        finally:
            os.close(fd)
        with self._lock:
            self._synced = max(self._synced, target)

    def rotate(self) -> int:
        """Seal the current segment (fsynced); returns the number of the last sealed segment (every segment up to
        it holds only what was appended before this call). The next append starts a new segment."""
        with self._lock:
            if self._file is not None:
                self._close_current()
            return self._seq - 1

    def drop_through(self, seq: int) -> int:
        """Delete sealed segments up to and including `seq` (their content is in the saved state)."""
        dropped = 0
        for path in self.segments():
            if self._seq_of(path) <= seq:
                path.unlink(missing_ok=True)
                dropped += 1
        return dropped

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._close_current()

    # -- reading -------------------------------------------------------------------------------------------
    def segments(self) -> list[Path]:
        return sorted((p for p in self.dir.iterdir() if p.suffix == _SUFFIX and p.stem.isdigit()),
                      key=self._seq_of)

    def replay(self) -> Iterator[Measurement]:
        """Every journaled measurement, oldest first.

        A record counts once its newline is written (an append writes record and newline together, and is
        answered only after that): text after a segment's last newline is a torn, never acknowledged append and
        is skipped. A line that is not JSON is corruption (`DataError`, naming the file and line); a JSON line
        this version refuses as a measurement (e.g. stricter bounds than the version that wrote it) is skipped
        with a warning, as the service would refuse it if it were sent now.
        """
        for path in self.segments():
            if self._seq_of(path) >= self._seq:  # the segment this process writes
                continue
            *lines, torn = path.read_bytes().split(b"\n")
            if torn:
                log.warning("observe journal %s: skipping a torn last line (never acknowledged)", path)
            for i, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    raw = json.loads(line)
                except ValueError:
                    raise DataError(f"observe journal {path} line {i + 1} is corrupt (not JSON); "
                                    "move the file away to start without it") from None
                try:
                    yield Measurement.model_validate(raw)
                except ValidationError as e:
                    log.warning("observe journal %s line %d: not a valid measurement now (%d errors); skipped",
                                path, i + 1, e.error_count())

    # -- plumbing ------------------------------------------------------------------------------------------
    def _open(self, seq: int):
        f = open(self.dir / f"{seq:012d}{_SUFFIX}", "ab", buffering=0)
        fsync_dir(self.dir)  # the new name itself must survive a crash
        return f

    @staticmethod
    def _seq_of(path: Path) -> int:
        return int(path.stem)


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written: a short write (a disk filling up) continues, an error raises."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
