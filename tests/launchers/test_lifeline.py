"""Children die with the process that started them, however it dies: real processes, real SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

pytestmark = pytest.mark.timeout(120)

# A parent process that starts `sleep` one of three ways, prints the child's pid, then idles until killed.
PARENT = r"""
import os, subprocess, sys, threading, time
from oltunes import lifeline

how = sys.argv[1]
child = []
if how == "spawn":  # from a short-lived thread: the child must outlive the thread, not the process
    t = threading.Thread(target=lambda: child.append(lifeline.spawn(["sleep", "300"])))
    t.start(); t.join()
elif how == "watch":  # no kernel help: only the child's own parent watch
    env = {**os.environ, lifeline.PARENT_ENV: str(os.getpid())}
    code = "from oltunes.lifeline import watch_parent; watch_parent(0.1); import time; time.sleep(300)"
    child.append(subprocess.Popen([sys.executable, "-c", code], env=env))
else:  # somebody else's child (as Prefect starts its ephemeral server): the keeper
    child.append(subprocess.Popen(["sleep", "300"]))
    assert lifeline.kill_with_me(child[0].pid)
print(child[0].pid, flush=True)
time.sleep(300)
"""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead, waiting for a reaper
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("how", ["spawn", "watch", "keeper"])
def test_child_dies_when_its_parent_is_sigkilled(how):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, how], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        time.sleep(1.0)  # the spawning thread has long ended; the child must still run
        assert not gone(child), "the child died with its spawning thread instead of its process"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert wait_gone(child, 20), f"child {child} outlived its SIGKILLed parent ({how})"
    finally:
        if child and not gone(child):
            os.kill(child, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait()
