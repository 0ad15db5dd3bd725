"""Remove a process's worker containers when that process ends, however it ends (SIGKILL included).

The Docker launcher starts one reaper per engine, in its own session: it waits on a pidfd of the launching
process, then removes every container labelled ``oltunes.owner=<owner>``. Normal paths remove their containers
themselves; the reaper is for a flow that was killed or cancelled before it could.

    python -m oltunes.launchers.docker_reaper --pid 1234 --owner <hex> [--engine unix:///...]
"""

from __future__ import annotations

import argparse
import os
import select
import subprocess
import sys

from oltunes.launchers import docker_adaptor


def spawn(owner_pid: int, owner: str, endpoint: str | None) -> subprocess.Popen:
    """Start a reaper for `owner_pid`'s containers on `endpoint` (detached: it must outlive its parent)."""
    argv = [sys.executable, "-m", "oltunes.launchers.docker_reaper", "--pid", str(owner_pid), "--owner", owner]
    if endpoint:
        argv += ["--engine", endpoint]
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--owner", required=True)
    ap.add_argument("--engine", default=None)
    a = ap.parse_args(argv)
    try:
        fd = os.pidfd_open(a.pid)
    except ProcessLookupError:
        fd = None  # already gone: clean up now
    if fd is not None:
        select.select([fd], [], [])  # readable once the process has exited
        os.close(fd)
    docker_adaptor.remove_owned(docker_adaptor.connect(a.engine), a.owner)
    return 0


if __name__ == "__main__":
    sys.exit(main())
