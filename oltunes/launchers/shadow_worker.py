"""A streaming model's shadow: a real serving worker running a candidate the tuner wants to learn, fed by the
gateway's mirror (`oltunes.gateway.shadow`) with a share of the model's live requests, its answers discarded.

It is started by the service's own launcher (local process or Docker container) like any serving worker, and
measured like one: the worker's window (batch latency, items, CPU time), the mirror's window (its client view:
requests answered, failed, dropped, their latency) and the worker's telemetry make one `Measurement` per control
interval, tagged ``purpose='shadow'``. A shadow that dies is not restarted: it stops being measured and the flow's
next decision may shadow something else.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from oltunes.gateway import Gateway
from oltunes.gateway.shadow import ShadowBudget
from oltunes.launchers.base import Handle, Launcher, WorkerSpec
from oltunes.launchers.local import pool_cores
from oltunes.launchers.serve_metrics import interval_measurement, read_window
from oltunes.launchers.traffic import Window
from oltunes.telemetry import Monitor
from oltunes.tuner.decide.trials import SHADOW_MIN_BATCHES
from oltunes.types import Decision, Measurement

log = logging.getLogger(__name__)


@dataclass
class ShadowWorker:
    """Model ``family``'s shadow running ``decision`` (whose job is the shadow's own, leased apart)."""

    launcher: Launcher
    gateway: Gateway
    family: str
    decision: Decision
    handle: Handle
    monitor: Monitor | None = None

    @classmethod
    async def start(cls, launcher: Launcher, gateway: Gateway, family: str, spec: WorkerSpec, decision: Decision,
                    budget: ShadowBudget, ready_timeout_s: float = 90.0) -> ShadowWorker:  # fmt: skip
        """Start the worker, wait until it is healthy, then point the gateway's mirror at it."""
        handle = await asyncio.to_thread(launcher.start, spec)
        try:
            await asyncio.to_thread(launcher.ready, handle, ready_timeout_s)
            assert handle.url is not None, "a serve worker has an address"
            await gateway.shadow(family, handle.url, budget)
        except BaseException:
            await asyncio.to_thread(launcher.stop, handle, 1.0)
            raise
        return cls(launcher, gateway, family, decision, handle)

    def begin_interval(self, watts_per_core: float | None) -> None:
        pool = self.handle.spec.pool
        self.monitor = Monitor(pid=self.handle.pid, cores=len(pool_cores(pool)), gpu_device_ids=pool.device_ids,
                               gpu=pool.accelerator.name != "cpu", watts_per_core=watts_per_core)  # fmt: skip
        self.monitor.start()

    async def measure(self) -> Measurement | None:
        """The shadow's interval (None: it answered nothing, ran fewer than ``SHADOW_MIN_BATCHES`` batches, whose
        p99 would flatter its candidate, or it died)."""
        monitor, self.monitor = self.monitor, None
        mirror = self.gateway.shadows.get(self.family)
        if not await asyncio.to_thread(self.launcher.alive, self.handle) or mirror is None:
            if monitor is not None:
                monitor.stop()
            return None
        wm = await read_window(self.handle.url or "")
        w = mirror.window()
        client = Window(w.seconds, w.ok + w.failed + w.dropped, w.ok, w.failed, w.dropped, w.latency)
        if monitor is None:
            return None
        tele = monitor.stop(cpu_time_s=wm.get("cpu_time_s"))
        if wm and (wm.get("batches") or 0) < SHADOW_MIN_BATCHES:
            return None
        m = interval_measurement(self.decision.job_id, self.decision, wm, client, tele)
        return None if m is None else m.model_copy(update={"purpose": "shadow"})

    def counts(self) -> dict[str, float]:
        """The mirror's totals so far (MLflow step metrics ``shadow_requests_*``)."""
        mirror = self.gateway.shadows.get(self.family)
        c = mirror.counts if mirror is not None else {}
        return {f"shadow_requests_{k}": float(c.get(k, 0)) for k in ("ok", "failed", "dropped", "over_budget")}

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop mirroring first (nothing new is sent), then the worker; its lease is the flow's to release."""
        await self.gateway.unshadow(self.family)
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        await asyncio.to_thread(self.launcher.stop, self.handle, grace_s)
