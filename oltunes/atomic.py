"""File helpers: atomic writes (a reader sees the old file or the whole new one, never a partial file), and
content hashes (what resumable outputs and caches compare).

Every module that persists something (worker shards and reports, zoo manifest, tuner state and outbox,
simulation reports, benchmark JSON) writes through here, so there is one place that gets it right.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oltunes.errors import DataError


def current_umask() -> int:
    """This process's umask, read without changing it (``os.umask`` can only be read by setting it, which
    would race with other threads creating files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc (not Linux): the racy read-and-restore is the only way
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[Path], None], *, durable: bool = False) -> Path:
    """Call ``write(tmp_path)`` on a temp file beside `path`, then rename it over `path`.

    The temp file lives in the same directory so that ``os.replace`` is a same-filesystem rename
    (atomic on POSIX). On any failure the temp file is removed and the old `path` is left untouched.
    The result gets the mode a plain ``open(path, "w")`` would give (``0o666 & ~umask``), not mkstemp's
    private 0600: outputs are read by other users, container UIDs and artifact servers.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise DataError(f"cannot write {path}: {e.strerror or e} (is the directory writable?)") from e
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~current_umask())
        if durable:  # survive a power cut, not just a crash of this process
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path, text: str, *, durable: bool = False) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text), durable=durable)


def atomic_write_json(path: Path, payload: Any, *, durable: bool = False) -> Path:
    return atomic_write_text(path, json.dumps(payload, indent=2, default=str) + "\n", durable=durable)


def check_writable_dir(path: Path) -> Path:
    """Create `path` if needed and prove we can write there, before any expensive work starts."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise DataError(f"output directory {path} is not writable: {e.strerror or e}") from e
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
