"""The observe journal: what makes an answered ``observe`` survive a crash (SIGKILL, power cut).

Every measurement the service accepts is appended to the journal (JSON lines) and fsynced *before* the service
answers. The state file is the compaction of the journal: a save rotates to a fresh segment, writes the state
(atomic, fsynced) and then deletes the segments the state now contains. On start the service replays every
segment left over into the tuner restored from the state file; ``observe`` is exactly-once by
``measurement_id``, so a segment that is replayed after the state already holds it changes nothing.

Layout: ``<dir>/<seq>.jsonl``, ``seq`` increasing. A crash can tear only the last line of a segment (a line is
written with one ``write`` call, and it was never answered as durable): replay skips it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import ValidationError

from oltunes.errors import DataError
from oltunes.types import Measurement

log = logging.getLogger(__name__)

_SUFFIX = ".jsonl"


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
        self._seq = (self._seq_of(existing[-1]) if existing else 0) + 1
        self._file = self._open(self._seq)

    # -- writing -------------------------------------------------------------------------------------------
    def append(self, measurements: Sequence[Measurement]) -> None:
        """Write the measurements (one line each) to the OS; `sync` makes them durable."""
        if not measurements:
            return
        data = b"".join(m.model_dump_json().encode() + b"\n" for m in measurements)
        with self._lock:
            self._file.write(data)  # unbuffered: one write call per batch
            self._written += 1

    def sync(self) -> None:
        """fsync everything appended so far. Called outside the service lock, so concurrent observes can share
        one fsync; a caller returns only once everything appended before its call is on disk."""
        with self._lock:
            target = self._written
            if self._synced >= target:
                return
            fd = os.dup(self._file.fileno())  # a rotation may close the file meanwhile; the dup stays valid
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        with self._lock:
            self._synced = max(self._synced, target)

    def rotate(self) -> int:
        """Seal the current segment (fsynced) and start the next; returns the sealed segment's number."""
        with self._lock:
            os.fsync(self._file.fileno())
            self._synced = self._written
            self._file.close()
            sealed = self._seq
            self._seq += 1
            self._file = self._open(self._seq)
            return sealed

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
            if not self._file.closed:
                os.fsync(self._file.fileno())
                self._file.close()

    # -- reading -------------------------------------------------------------------------------------------
    def segments(self) -> list[Path]:
        return sorted((p for p in self.dir.iterdir() if p.suffix == _SUFFIX and p.stem.isdigit()),
                      key=self._seq_of)

    def replay(self) -> Iterator[Measurement]:
        """Every journaled measurement, oldest first (a torn last line of a segment is skipped)."""
        for path in self.segments():
            if self._seq_of(path) >= self._seq:  # the segment this process writes
                continue
            lines = path.read_bytes().split(b"\n")
            for i, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    yield Measurement.model_validate_json(line)
                except ValidationError as e:
                    if i == len(lines) - 1:  # no newline after it: torn by a crash, never acknowledged
                        log.warning("observe journal %s: skipping a torn last line", path)
                        continue
                    raise DataError(f"observe journal {path} line {i + 1} is corrupt ({e.error_count()} errors); "
                                    "move the file away to start without it") from None

    # -- plumbing ------------------------------------------------------------------------------------------
    def _open(self, seq: int):
        f = open(self.dir / f"{seq:012d}{_SUFFIX}", "ab", buffering=0)
        _fsync_dir(self.dir)  # the new name itself must survive a crash
        return f

    @staticmethod
    def _seq_of(path: Path) -> int:
        return int(path.stem)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
