"""Local process launcher (the default): the worker CLI as a subprocess pinned to the pool's CPU set.

Pools on one machine are CPU sets of different sizes; the worker gets ``taskset -c <cpu_set>`` (or
``os.sched_setaffinity`` when taskset is absent) and ``--threads len(cpu_set)``. The exit status and the exact
CPU time of the worker come from ``os.wait4`` (rusage), so the energy estimate uses the worker's real CPU time.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time


from oltunes.atomic import atomic_write_text
from oltunes.config import get_settings
from oltunes.errors import ConfigError, WorkerError
from oltunes.launchers.base import Handle, Launcher, WorkerResult, WorkerSpec, free_port, read_report, tail_file
from oltunes.lifeline import spawn
from oltunes.telemetry import Monitor
from oltunes.types import Pool


def pool_cores(pool: Pool) -> tuple[int, ...]:
    """The pool's CPU set restricted to the cores this process may use; all of them when the pool has none."""
    allowed = sorted(os.sched_getaffinity(0))
    if pool.cpu_set is None:
        return tuple(allowed)
    cores = tuple(c for c in pool.cpu_set if c in allowed)
    if not cores:
        raise ConfigError(
            f"pool {pool.name}: cpu_set {list(pool.cpu_set)} has no core this machine lets us use (allowed: {allowed})"
        )
    return cores


def worker_command() -> list[str]:
    """The worker CLI of the running interpreter's environment (``oltunes worker`` without the rest)."""
    return [sys.executable, "-m", "oltunes.worker"]


def worker_argv(spec: WorkerSpec, threads: int, port: int | None = None, command: list[str] | None = None) -> list[str]:
    """The worker command line for a spec (see ``oltunes worker batch|serve --help``).

    `command` is how to call the worker CLI (default: this interpreter's; ``[]`` for an image whose ENTRYPOINT is
    ``oltunes worker``).
    """
    c = spec.candidate
    if not c.variant.path:
        raise ConfigError(f"variant {c.variant.name}: no model file (variant.path is empty); build the zoo first")
    argv = [*(worker_command() if command is None else command), spec.mode, "--model", str(c.variant.path), "--threads", str(threads)]
    if spec.pool.device_ids:  # a GPU pool: fail loudly rather than silently fall back to the CPU provider
        argv += ["--device", "cuda"]
    if spec.mode == "batch":
        if spec.input_path is None or spec.output_dir is None:
            raise ConfigError("batch worker: input_path and output_dir are required")
        argv += [
            "--input", str(spec.input_path),
            "--output", str(spec.output_dir),
            "--batch-size", str(c.batch_size),
            "--concurrency", str(c.concurrency),
            "--shard-size", str(spec.shard_size),
            "--report", str(spec.report_path),
        ]  # fmt: skip
    else:
        argv += [
            "--host", spec.host,
            "--port", str(port),
            "--max-batch", str(c.batch_size),
            "--max-delay-ms", str(spec.max_delay_ms),
            "--concurrency", str(c.concurrency),
            "--name", spec.job.family,  # the model name clients (and the gateway) use
            "--max-queue-ms", str(spec.job.slo_ms),  # admission: refuse what would queue past the SLO
        ]  # fmt: skip
    return argv


class LocalLauncher(Launcher, name="local"):
    """Run workers as local processes.

    Parameters
    ----------
    watts_per_core
        Per-core power for the CPU energy estimate (default ``settings.cpu_watts_per_core``).
    sample_interval_s
        Telemetry sampling period.
    """

    def __init__(self, watts_per_core: float | None = None, sample_interval_s: float = 0.5):
        self.watts_per_core = watts_per_core or get_settings().cpu_watts_per_core
        self.sample_interval_s = sample_interval_s

    def start(self, spec: WorkerSpec) -> Handle:
        cores = pool_cores(spec.pool)
        port = (spec.port or free_port(spec.host)) if spec.mode == "serve" else None
        argv = worker_argv(spec, threads=len(cores), port=port)
        taskset = shutil.which("taskset")
        if taskset:
            argv = [taskset, "-c", ",".join(map(str, cores)), *argv]
        env = dict(os.environ)
        if spec.pool.device_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(spec.pool.device_ids)
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        spec.report_path.unlink(missing_ok=True)  # a stale report must never pass for this run's
        with open(spec.log_path, "ab") as logf:
            logf.write(f"\n--- {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
            logf.flush()
            # New session: stop() signals the worker's whole process group, never anything else. `spawn`: the
            # worker dies with this process even when it is SIGKILLed (no orphan keeps a device busy).
            proc = spawn(argv, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if not taskset:
            try:
                os.sched_setaffinity(proc.pid, cores)
            except OSError as e:
                self._kill(proc)
                raise WorkerError(f"cannot pin worker to cores {cores}: {e}") from e
        atomic_write_text(spec.run_dir / "worker.pid", str(proc.pid))
        monitor = Monitor(
            pid=proc.pid,
            cores=len(cores),
            gpu_device_ids=spec.pool.device_ids,
            gpu=spec.pool.accelerator.name != "cpu",
            watts_per_core=self.watts_per_core,
            interval_s=self.sample_interval_s,
        )
        try:
            monitor.start()
        except Exception:
            self._kill(proc)
            raise
        url = f"http://{spec.host}:{port}" if port else None
        return Handle(spec=spec, launcher=self.name, pid=proc.pid, url=url, state={"proc": proc, "monitor": monitor})

    # -- process bookkeeping ------------------------------------------------------------------------------
    @staticmethod
    def _reap(handle: Handle, block: bool) -> bool:
        """Collect the exit status and rusage once; True when the process has exited."""
        proc: subprocess.Popen = handle.state["proc"]
        if "returncode" in handle.state:
            return True
        try:
            pid, status, rusage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: no rusage available
            handle.state["returncode"] = proc.returncode if proc.returncode is not None else -1
            handle.state["cpu_time_s"] = None
            return True
        if pid == 0:
            return False
        rc = os.waitstatus_to_exitcode(status)
        proc.returncode = rc  # tell Popen it has been reaped
        handle.state["returncode"] = rc
        handle.state["cpu_time_s"] = rusage.ru_utime + rusage.ru_stime
        return True

    @staticmethod
    def _kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def _finish(self, handle: Handle) -> WorkerResult:
        monitor: Monitor = handle.state["monitor"]
        if handle.result is None:
            telemetry = monitor.stop(cpu_time_s=handle.state.get("cpu_time_s"))
            report = read_report(handle.spec) if handle.spec.mode == "batch" else {}
            handle.result = WorkerResult(returncode=handle.state["returncode"], report=report, telemetry=telemetry)
        return handle.result

    # -- interface ----------------------------------------------------------------------------------------
    def wait(self, handle: Handle, timeout_s: float | None = None) -> WorkerResult:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._reap(handle, block=False):
            if deadline is not None and time.monotonic() > deadline:
                self.stop(handle, grace_s=2.0)
                raise WorkerError(
                    f"worker {handle.pid} exceeded its {timeout_s:.0f} s timeout and was stopped; "
                    f"log tail:\n{self.logs(handle, 20)}"
                )
            time.sleep(0.05)
        return self.checked(handle, self._finish(handle))

    def describe(self, handle: Handle) -> str:
        return f"{handle.pid} ({handle.spec.mode}, {handle.spec.candidate.key})"

    def alive(self, handle: Handle) -> bool:
        return not self._reap(handle, block=False)

    def stop(self, handle: Handle, grace_s: float = 10.0) -> int | None:
        proc: subprocess.Popen = handle.state["proc"]
        if not self._reap(handle, block=False):
            self._kill(proc, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while not self._reap(handle, block=False) and time.monotonic() < deadline:
                time.sleep(0.05)
            if "returncode" not in handle.state:
                self._kill(proc, signal.SIGKILL)
                self._reap(handle, block=True)
        self._finish(handle)
        return handle.state["returncode"]

    def logs(self, handle: Handle, tail: int = 50) -> str:
        return tail_file(handle.spec.log_path, tail)
