"""The lease book's files: a snapshot and a log of changes, every change durable before it is answered.

Expiry times are wall-clock, so a restarted service still knows what runs where and what has expired meanwhile.

``<path>`` holds the whole book (written atomically); ``<path>.log`` the changes since, one JSON line each
(``{"lease": ...}``, ``{"drop_lease": id}``, ``{"waiting": ...}``, ``{"drop_waiting": job_id}``), appended and
fsynced per call. A change therefore costs one short line, not a rewrite of the whole book (10,000 waiting jobs
made every acquire rewrite megabytes); the log is folded into a new snapshot once it is longer than the book.
A crash can tear only the log's last line (never acknowledged): loading skips it.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from oltunes.atomic import atomic_write_text
from oltunes.errors import ConfigError
from oltunes.allocator.types import Lease, Waiting

__all__ = ["BookStore", "Tracked"]

T = TypeVar("T")

log = logging.getLogger(__name__)

MIN_LOG_LINES = 1_000  # below this the log is never folded (a small book stays a small log)


class _BookFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    leases: list[Lease]
    waiting: list[Waiting]


Book = tuple[Iterable[Lease], Iterable[Waiting]]


class BookStore:
    """``record(changes, book)`` / ``save(leases, waiting)`` / ``load()`` of the book in ``path`` (None: memory only,
    nothing is written)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.log_path = None if path is None else path.with_name(path.name + ".log")
        self._lines = 0  # lines in the log since the last snapshot

    def save(self, leases: Iterable[Lease], waiting: Iterable[Waiting]) -> None:
        """Write the whole book as the snapshot and empty the log."""
        if self.path is None:
            return
        book = _BookFile(leases=list(leases), waiting=list(waiting))
        atomic_write_text(self.path, book.model_dump_json(), durable=True)  # pydantic's encoder: ~20x json's
        with open(self.log_path, "wb") as f:  # the snapshot now holds what the log said
            os.fsync(f.fileno())
        self._lines = 0

    def record(self, changes: list[Lease | Waiting | tuple[str, str]], live: int, book: Callable[[], Book]) -> None:
        """Append `changes` (a lease or waiting job as it is now; ``("drop_lease", id)`` or ``("drop_waiting",
        job_id)`` for one gone) durably; fold the log into a snapshot of ``book()`` once it is longer than twice
        the book's `live` entries."""
        if self.path is None or not changes:
            return
        lines = []
        for c in changes:
            if isinstance(c, Lease):
                lines.append(b'{"lease":' + c.model_dump_json().encode() + b"}\n")
            elif isinstance(c, Waiting):
                lines.append(b'{"waiting":' + c.model_dump_json().encode() + b"}\n")
            else:
                lines.append(json.dumps({c[0]: c[1]}).encode() + b"\n")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab", buffering=0) as f:
            data = memoryview(b"".join(lines))
            while data:  # a short write continues; an error raises before anything is answered
                data = data[os.write(f.fileno(), data):]
            os.fsync(f.fileno())
        self._lines += len(lines)
        if self._lines > max(MIN_LOG_LINES, 2 * live):
            self.save(*book())

    def load(self) -> tuple[list[Lease], list[Waiting]] | None:
        """The leases and waiting jobs saved (snapshot, then the log's changes); None when there is neither."""
        if self.path is None or not (self.path.exists() or self.log_path.exists()):
            return None
        leases: dict[str, Lease] = {}
        waiting: dict[str, Waiting] = {}
        try:
            if self.path.exists():
                book = _BookFile.model_validate_json(self.path.read_bytes())
                leases = {l.lease_id: l for l in book.leases}
                waiting = {w.job.job_id: w for w in book.waiting}
            raw = self.log_path.read_bytes() if self.log_path.exists() else b""
        except (OSError, ValueError, ValidationError) as e:
            raise ConfigError(f"lease book {self.path}: unreadable ({type(e).__name__}); move it aside to start "
                              "with no leases (running jobs re-acquire on their next heartbeat)") from None
        *lines, torn = raw.split(b"\n")
        if torn:
            log.warning("lease book log %s: skipping a torn last line (never acknowledged)", self.log_path)
        for i, line in enumerate(lines):
            try:
                (kind, value), = json.loads(line).items()
                if kind == "lease":
                    lease = Lease.model_validate(value)
                    leases[lease.lease_id] = lease
                elif kind == "waiting":
                    w = Waiting.model_validate(value)
                    waiting[w.job.job_id] = w
                elif kind == "drop_lease":
                    leases.pop(str(value), None)
                elif kind == "drop_waiting":
                    waiting.pop(str(value), None)
                else:
                    raise ValueError(kind)
            except (ValueError, TypeError, AttributeError, ValidationError):
                raise ConfigError(f"lease book log {self.log_path} line {i + 1}: corrupt; move it aside to start "
                                  "from the snapshot alone") from None
        self._lines = len(lines)
        return list(leases.values()), list(waiting.values())


class Tracked(dict[str, T]):
    """A dict of leases or waiting jobs that remembers which keys were set or deleted (what `LeaseBook._save`
    logs), counts changes of its membership (what invalidates the queue's order), and keeps a lower bound of its
    values' ``expires_at`` (`soonest`: until then nothing in it can expire, so no scan is needed)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.touched: set[str] = set()
        self.members = 0
        self.soonest = self.earliest()

    def earliest(self) -> float:
        return min((v.expires_at for v in self.values()), default=math.inf)

    def __setitem__(self, key: str, value: T) -> None:
        if key not in self:
            self.members += 1
        self.touched.add(key)
        self.soonest = min(self.soonest, value.expires_at)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.members += 1
        self.touched.add(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            self.members += 1
            self.touched.add(key)
        return super().pop(key, *default)

    def take_touched(self) -> set[str]:
        out, self.touched = self.touched, set()
        return out
