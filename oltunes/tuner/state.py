"""Tuner state on disk: plain JSON, written atomically, versioned. Never pickle (a user could swap the file).

Version 2 is written with orjson (a 3 MB state in a few ms, where the standard library takes ~50): 128-bit RNG
states as strings and large float tables as base64 float64 (`oltunes.jsonstate`). orjson writes NaN as ``null``,
so a state holding a non-finite number is refused before anything is written. Version 1 files (standard JSON,
plain lists, RNG states as integers) still load.

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

import orjson

from oltunes.atomic import atomic_write
from oltunes.errors import DataError
from oltunes.jsonstate import find_nonfinite

__all__ = ["STATE_FORMAT", "STATE_VERSION", "encode_state", "read_state", "state_lock", "write_state"]

STATE_FORMAT = "oltunes.tuner"
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: standard-library JSON, plain float lists, RNG states as integers


def encode_state(payload: dict[str, Any], where: str = "state") -> bytes:
    """``payload`` as JSON bytes; a non-finite number anywhere (a diverged model) is refused, naming where."""
    bad = find_nonfinite(payload)
    if bad is not None:
        raise DataError(f"{where}: the tuner state holds a non-finite number at {bad}, not saving "
                        "(the model diverged; the last saved state is kept)")
    try:
        return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError as e:
        raise DataError(f"{where}: the tuner state is not JSON-serialisable ({e}), not saving") from e


def write_state(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``path`` atomically and durably (temp file beside it, fsync, rename; umask mode)."""
    path = Path(path)
    data = encode_state(payload, str(path))
    return atomic_write(path, lambda tmp: tmp.write_bytes(data), durable=True)


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
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"tuner state file not found: {path}") from None
    try:
        d = orjson.loads(raw)
        if isinstance(d, dict) and d.get("version") == 1:
            d = json.loads(raw)  # its RNG states are integers beyond 64 bits, which orjson reads as rounded floats
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not a JSON tuner state ({e}); delete it to start fresh or restore a backup") from e
    check_envelope(d, str(path))
    return d


def check_envelope(d: Any, where: str = "state") -> None:
    if not isinstance(d, dict) or d.get("format") != STATE_FORMAT:
        raise DataError(f"{where}: not an OLTunes tuner state (missing format={STATE_FORMAT!r})")
    if d.get("version") not in READABLE_VERSIONS:
        raise DataError(f"{where}: tuner state version {d.get('version')!r}, this OLTunes reads versions "
                        f"{', '.join(map(str, READABLE_VERSIONS))}")
    n = d.get("n_observed", 0)  # a count: anything else would start, then fail every /v1/health
    if type(n) is not int or not 0 <= n <= 10**15:
        raise DataError(f"{where}: field 'n_observed' must be a whole number >= 0; restore a backup or delete the "
                        "file to start fresh")
