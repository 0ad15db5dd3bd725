"""Tuner state on disk: plain JSON, written atomically, versioned. Never pickle (a user could swap the file).

Loading validates the envelope (format name and version) and turns any malformed content into a
``DataError`` that says which file and what to do.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from oltunes.atomic import atomic_write_text
from oltunes.errors import DataError

__all__ = ["STATE_FORMAT", "STATE_VERSION", "write_json_atomic", "read_state", "state_lock"]

STATE_FORMAT = "oltunes.tuner"
STATE_VERSION = 1


def write_json_atomic(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` as JSON to ``path`` via a temp file in the same folder + ``os.replace``."""
    path = Path(path)
    try:
        text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except ValueError as e:  # NaN/inf: a diverged model is refused rather than saved
        raise DataError(f"{path}: state holds a non-finite number, not saving: {e}") from e
    return atomic_write_text(path, text, durable=True)


@contextmanager
def state_lock(path: str | Path) -> Iterator[None]:
    """Exclusive lock (``flock`` on ``<path>.lock``) for a load -> apply -> save cycle on one state file, across
    threads and processes: two flows observing into the same state would otherwise each save over the other."""
    lock = Path(path).with_name(Path(path).name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def read_state(path: str | Path) -> dict[str, Any]:
    """Read and check a tuner state file written by ``Tuner.save``."""
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"tuner state file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not a JSON tuner state ({e}); delete it to start fresh or restore a backup") from e
    check_envelope(d, str(path))
    return d


def check_envelope(d: Any, where: str = "state") -> None:
    if not isinstance(d, dict) or d.get("format") != STATE_FORMAT:
        raise DataError(f"{where}: not an OLTunes tuner state (missing format={STATE_FORMAT!r})")
    if d.get("version") != STATE_VERSION:
        raise DataError(f"{where}: tuner state version {d.get('version')!r}, this OLTunes reads {STATE_VERSION}")
