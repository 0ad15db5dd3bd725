"""An exclusive OS lock on a directory, held for a job's life (``fcntl.flock`` on ``<dir>/.lock``).

The kernel releases a flock when its holder exits, however it exits (SIGKILL included), so a crashed job never
leaves a stale lock behind and a re-run can resume at once. The holder writes its pid into the lock file, so a
refused run can say who holds it.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from oltunes.errors import ConfigError

LOCK_FILE = ".lock"


class DirLock:
    """An acquired lock; `release` (or process exit) frees it."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory, self._fd = directory, fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the only descriptor of the open file releases the flock
            self._fd = -1


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "another process"


def lock_dir(directory: Path, wait_s: float = 0.0, *, what: str = "directory", poll_s: float = 0.2) -> DirLock:
    """Lock `directory` (created if missing) for this process, waiting up to `wait_s` for the current holder.

    Raises `ConfigError` naming the directory and its holder when it is still held after `wait_s`
    (``0``: fail fast). Polling, not a blocking flock: the wait is bounded and a holder is named.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = _holder(fd)
                os.close(fd)
                waited = f" after waiting {wait_s:g} s" if wait_s else ""
                raise ConfigError(
                    f"{what} {directory} is in use by another run ({holder}){waited}; "
                    "wait for it to finish (it is resumable) or choose another directory"
                ) from None
            time.sleep(poll_s)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return DirLock(directory, fd)
