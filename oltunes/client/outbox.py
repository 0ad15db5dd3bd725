"""The client's outbox: measurements waiting for the tuning service, one JSON file each.

Each file is written atomically and durably and named by its ``measurement_id``, so queuing a measurement twice
keeps one file, and a crash between "sent" and "deleted" only resends it (the service observes each id at most
once). A file the service refused, or that is not a valid measurement, is moved to ``rejected/`` for inspection:
never dropped, never blocking the queue.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

from pydantic import ValidationError

from oltunes.atomic import atomic_write_text
from oltunes.types import Measurement

__all__ = ["Outbox"]

log = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")


class Outbox:
    """The queue in ``directory`` (created on the first `put`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # whether anything may be queued, so that a call need not list the directory: files left by an earlier
        # process, set by `put`, checked again by the caller after a flush (`recheck`)
        self.nonempty = False
        self.recheck()

    def recheck(self) -> None:
        self.nonempty = self.files() != []

    def files(self) -> list[Path]:
        try:
            return [p for p in self.directory.iterdir() if p.suffix == ".json" and not p.name.startswith(".")]
        except FileNotFoundError:
            return []

    def path(self, measurement_id: str) -> Path:
        # ids that are not safe file names (slashes, dots first, very long) are stored under their hash
        safe = _SAFE_NAME.match(measurement_id)
        name = measurement_id if safe else hashlib.sha256(measurement_id.encode()).hexdigest()
        return self.directory / f"{name}.json"

    def put(self, m: Measurement) -> None:
        """Write `m` to the outbox atomically and durably (temp file, fsync, rename)."""
        atomic_write_text(self.path(m.measurement_id), m.model_dump_json(), durable=True)
        self.nonempty = True

    def queued(self) -> list[tuple[Path, Measurement]]:
        """The queued measurements, oldest first; files that are not valid measurements are quarantined."""
        queued: list[tuple[float, Path, Measurement]] = []
        for path in self.files():
            try:
                m = Measurement.model_validate_json(path.read_bytes())
            except FileNotFoundError:  # another client flushed it meanwhile
                continue
            except (ValidationError, OSError) as e:
                self.quarantine(path, f"not a valid measurement: {e}")
                continue
            queued.append((m.timestamp, path, m))
        queued.sort(key=lambda t: (t[0], t[1].name))
        return [(path, m) for _, path, m in queued]

    def quarantine(self, path: Path, reason: str) -> None:
        """Move ``path`` to ``rejected/`` (the service refused it, or it is not a measurement)."""
        rejected = self.directory / "rejected"
        rejected.mkdir(parents=True, exist_ok=True)
        log.warning("tuner outbox: moving %s to %s: %s", path.name, rejected, reason)
        try:
            os.replace(path, rejected / path.name)
        except FileNotFoundError:
            pass
