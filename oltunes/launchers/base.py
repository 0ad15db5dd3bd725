"""The launcher interface: start / wait / stop / logs a worker, picked by name (``Launcher.make("local")``); what
else a flow needs of where jobs run (catalogue, inventory, serving, tuner state) is its `Environment` of the same name."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from oltunes.errors import InputRejected, WorkerError
from oltunes.netaddr import free_port
from oltunes.registry import Registered
from oltunes.telemetry import TelemetryReport
from oltunes.types import Candidate, JobSpec, Measurement, Pool

WorkerMode = Literal["batch", "serve"]


class WorkerSpec(BaseModel):
    """What to run: a Decision's candidate on one pool, in batch or serve mode."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    mode: WorkerMode
    job: JobSpec
    candidate: Candidate
    pool: Pool
    run_dir: Path = Field(description="logs, report and pid of this worker")
    decision_id: str | None = None
    # batch mode
    input_path: Path | None = None
    output_dir: Path | None = None
    shard_size: int = Field(default=512, ge=1)
    items: int = Field(default=0, ge=0, description="items in the input (simulated launcher: items to simulate)")
    # serve mode
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=0, le=65535)
    max_delay_ms: float = Field(default=2.0, ge=0)

    @property
    def report_path(self) -> Path:
        return self.run_dir / "report.json"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "worker.log"


class WorkerResult(BaseModel):
    """How a worker ended: its own report (real workers), its telemetry, or a simulated Measurement."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    returncode: int
    report: dict[str, Any] = {}
    telemetry: TelemetryReport | None = None
    measurement: Measurement | None = None
    simulated: bool = False


@dataclass
class Handle:
    """A started worker. `url` is set for serve mode."""

    spec: WorkerSpec
    launcher: str
    pid: int | None = None
    url: str | None = None
    started_at: float = field(default_factory=time.time)
    result: WorkerResult | None = None
    state: dict[str, Any] = field(default_factory=dict)


class Launcher(Registered, root=True):
    """Start workers somewhere. Implementations register by name: ``class X(Launcher, name="x")``, beside the
    `oltunes.launchers.environment.Environment` of the same name that flows ask everything else."""

    def start(self, spec: WorkerSpec) -> Handle:
        raise NotImplementedError

    def wait(self, handle: Handle, timeout_s: float | None = None) -> WorkerResult:
        """Block until a batch worker exits; raises `WorkerError` on a crash, a non-zero exit or a timeout."""
        raise NotImplementedError

    def ready(self, handle: Handle, timeout_s: float = 60.0) -> None:
        """Block until a serve worker answers its health check (no-op for batch); stops it if it never does."""
        if handle.url is None:
            return
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if not self.alive(handle):
                    rc = self.stop(handle, grace_s=0)
                    raise WorkerError(f"serve worker {self.describe(handle)} exited with {rc} before it was ready; "
                                      f"log tail:\n{self.logs(handle, 20)}")
                try:
                    if client.get(f"{handle.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.stop(handle, grace_s=1.0)
        raise WorkerError(f"serve worker {self.describe(handle)} not healthy after {timeout_s:.0f} s; "
                          f"log tail:\n{self.logs(handle, 20)}")

    def describe(self, handle: Handle) -> str:
        """How messages name a worker (its pid, container, ...)."""
        return f"({handle.spec.mode}, {handle.spec.candidate.key})"

    def checked(self, handle: Handle, result: WorkerResult) -> WorkerResult:
        """`result` of a worker that exited, or the error its exit means: bad input (never retried), a crash, or
        a batch worker that wrote no report."""
        who = self.describe(handle)
        if result.returncode == InputRejected.exit_code:
            raise InputRejected(f"worker {who} rejected its input: {rejection_reason(self.logs(handle, 40))} "
                                f"(log {handle.spec.log_path})")
        if result.returncode != 0:
            raise WorkerError(f"worker {who} exited with {result.returncode}; log {handle.spec.log_path}, "
                              f"tail:\n{self.logs(handle, 20)}")
        if handle.spec.mode == "batch" and not result.report:
            raise WorkerError(f"worker {who} exited 0 but wrote no report at {handle.spec.report_path}")
        return result

    def alive(self, handle: Handle) -> bool:
        raise NotImplementedError

    def stop(self, handle: Handle, grace_s: float = 10.0) -> int | None:
        """Ask the worker to finish (in-flight requests drain), kill it after `grace_s`; returns its exit code."""
        raise NotImplementedError

    def logs(self, handle: Handle, tail: int = 50) -> str:
        raise NotImplementedError


def rejection_reason(log_tail: str) -> str:
    """The worker's one-line ``error: ...`` (what `oltunes.cli.worker.clean_errors` prints), else the last line."""
    run = log_tail.rsplit("\n--- ", 1)[-1]  # this run's part of the log only
    lines = [ln.strip() for ln in run.splitlines() if ln.strip()]
    errors = [ln.removeprefix("error:").strip() for ln in lines if ln.startswith("error:")]
    return errors[-1] if errors else (lines[-1] if lines else "no reason in its log")


def read_report(spec: WorkerSpec) -> dict[str, Any]:
    """The worker's own ``report.json``; empty when it wrote none."""
    return json.loads(spec.report_path.read_text()) if spec.report_path.is_file() else {}


def tail_file(path: Path, lines: int) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
