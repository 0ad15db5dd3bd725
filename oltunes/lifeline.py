"""Child processes that die with the process that started them, however it dies (SIGKILL included).

Three layers, because no single one covers every case:

1. `spawn`: the child asks the kernel for ``SIGKILL`` when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``,
   set between fork and exec). The kernel means the parent *thread*, so children are forked from one
   long-lived thread, never from a short-lived task thread that would take its children with it.
2. `watch_parent`: in the child, a thread that compares ``os.getppid()`` with the pid the parent passed in
   ``OLTUNES_PARENT_PID``; re-parented means orphaned, and the child kills its process group. This covers
   non-Linux hosts and the moment between fork and ``prctl``.
3. `kill_with_me`: for a child somebody else started without either (Prefect's ephemeral API server), a keeper
   process reads a pipe from this process; the kernel closes the pipe when this process dies, and the keeper
   then stops the registered processes (only if they are still the same processes: pids are reused).

``python -m oltunes.lifeline`` is the keeper.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

PARENT_ENV = "OLTUNES_PARENT_PID"
_PR_SET_PDEATHSIG = 1

try:
    _prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: the parent watch alone
    _prctl = None

_spawner: ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _die_with(parent: int) -> None:
    """preexec_fn (in the child, before exec): SIGKILL me when my parent dies; exit if it already has."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def spawn(argv: list[str], *, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, ...)`` whose child dies with this process (see the module notes)."""
    global _spawner
    parent = os.getpid()
    env = {**(os.environ if env is None else env), PARENT_ENV: str(parent)}
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(1, thread_name_prefix="oltunes-spawn")  # lives as long as the process
    return _spawner.submit(partial(subprocess.Popen, argv, env=env, preexec_fn=partial(_die_with, parent), **popen)).result()


def watch_parent(interval_s: float = 0.5) -> None:
    """In a child started by `spawn`: kill my process group if my parent dies (no-op when not started so)."""
    raw = os.environ.pop(PARENT_ENV, "")  # popped: my own children must not watch my parent
    if not raw.isdigit():
        return
    parent = int(raw)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        if os.getpgid(0) == os.getpid():  # my own group (start_new_session): take my descendants too
            os.killpg(0, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    if os.getppid() != parent:
        watch()
    threading.Thread(target=watch, name="oltunes-parent-watch", daemon=True).start()


# -- the keeper: for children started by code we do not control ------------------------------------------
_keeper: subprocess.Popen | None = None
_kept: set[tuple[int, str]] = set()


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat): its identity."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def kill_with_me(pid: int) -> bool:
    """Stop `pid` when this process dies; False where that cannot be arranged (no /proc)."""
    global _keeper
    ident = (pid, _start_time(pid))
    if not ident[1]:
        return False
    with _spawner_lock:
        if ident in _kept:
            return True
        if _keeper is None or _keeper.poll() is not None:
            # Its own session: a Ctrl-C or a group kill aimed at us must not take the keeper first.
            _keeper = subprocess.Popen([sys.executable, "-m", "oltunes.lifeline"], stdin=subprocess.PIPE, start_new_session=True)
        _keeper.stdin.write(f"{ident[0]} {ident[1]}\n".encode())
        _keeper.stdin.flush()
        _kept.add(ident)
    return True


def _stop(targets: set[tuple[int, str]], grace_s: float = 5.0) -> None:
    def signal_alive(sig: int) -> set[tuple[int, str]]:
        alive = {t for t in targets if _start_time(t[0]) == t[1]}
        for pid, _ in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return alive

    targets = signal_alive(signal.SIGTERM)  # Prefect's server shuts down cleanly on SIGTERM
    deadline = time.monotonic() + grace_s
    while targets and time.monotonic() < deadline:
        time.sleep(0.1)
        targets = {t for t in targets if _start_time(t[0]) == t[1]}
    signal_alive(signal.SIGKILL)


def _keep() -> None:
    """Keeper main: collect ``pid start_time`` lines until EOF (the owner is gone), then stop them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    targets: set[tuple[int, str]] = set()
    for line in sys.stdin.buffer:
        pid, start = line.split()
        targets.add((int(pid), start.decode()))
    _stop(targets)


if __name__ == "__main__":
    _keep()
