"""A disk buffer for tracking records written while MLflow is unreachable.

One JSON file per record, named by a sortable sequence and the record's idempotency key, written atomically
(`oltunes.atomic`). Writing the same key twice keeps one file, so a record is buffered at most once;
replay deletes a file only after MLflow accepted it, and MLflow-side idempotency (the key stored as a tag) makes a
replay that crashed between "accepted" and "deleted" harmless. A record MLflow rejects moves to ``dead-letter/``
with the reason, so it never blocks the records behind it. A file that is not a readable record (empty, not JSON,
not a JSON object: a crash of an older version, a disk error, a stray file) moves to ``quarantine/`` untouched,
counted on its own (`quarantined`), and the records behind it replay.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oltunes.atomic import atomic_write_json

log = logging.getLogger(__name__)


class DiskBuffer:
    def __init__(self, root: Path):
        self.root = Path(root)

    def _name(self, key: str) -> str:
        return hashlib.sha1(key.encode()).hexdigest()[:20]

    def put(self, key: str, record: dict[str, Any]) -> Path:
        """Store `record` under `key` unless it is already buffered; returns its file."""
        self.root.mkdir(parents=True, exist_ok=True)
        suffix = f"-{self._name(key)}.json"
        for existing in self.root.glob(f"*{suffix}"):
            return existing
        path = self.root / f"{time.time_ns():020d}{suffix}"
        # durable: a buffered record is the only copy of a measurement until MLflow is back
        return atomic_write_json(path, {"key": key, **record}, durable=True)

    def items(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        """Buffered records, oldest first."""
        if not self.root.is_dir():
            return
        for path in sorted(self.root.glob("*.json")):
            try:
                record = json.loads(path.read_bytes())
            except FileNotFoundError:  # replayed (and removed) concurrently
                continue
            except (OSError, ValueError):  # unreadable or not JSON (UnicodeDecodeError is a ValueError)
                record = None
            if not isinstance(record, dict):
                self.quarantine(path)
                continue
            yield path, record

    @property
    def quarantine_dir(self) -> Path:
        return self.root / "quarantine"

    def quarantine(self, path: Path) -> Path | None:
        """Move an unreadable file aside (as it is, for inspection) so it neither replays nor counts as pending."""
        self.quarantine_dir.mkdir(parents=True, exist_ok=True)
        target = self.quarantine_dir / path.name
        try:
            os.replace(path, target)
        except FileNotFoundError:
            return None
        log.error("tracking buffer: %s is not a readable record; moved to %s", path.name, self.quarantine_dir)
        return target

    def quarantined(self) -> int:
        """How many unreadable files were moved aside (never replayed; see `quarantine_dir`)."""
        return len(list(self.quarantine_dir.glob("*.json"))) if self.quarantine_dir.is_dir() else 0

    @property
    def dead_letter_dir(self) -> Path:
        return self.root / "dead-letter"

    def dead_letter(self, path: Path, record: dict[str, Any], reason: str) -> Path:
        """Move a buffered record MLflow rejected to ``dead-letter/`` with the reason (kept for inspection)."""
        out = atomic_write_json(
            self.dead_letter_dir / path.name, {**record, "rejected": {"reason": reason, "at": time.time()}}, durable=True
        )
        path.unlink(missing_ok=True)
        return out

    def dead_letters(self) -> list[dict[str, Any]]:
        if not self.dead_letter_dir.is_dir():
            return []
        return [json.loads(p.read_text()) for p in sorted(self.dead_letter_dir.glob("*.json"))]

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def __len__(self) -> int:
        return len(list(self.root.glob("*.json"))) if self.root.is_dir() else 0
