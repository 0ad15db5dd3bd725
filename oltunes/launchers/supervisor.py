"""`ServeSupervisor`: keep one serving worker up for a service, restart it if it dies, and switch to a new
decision without dropping in-flight requests (start the new worker, move traffic, drain the old, stop it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from oltunes.launchers.base import Handle, Launcher, WorkerSpec
from oltunes.gateway.routing import Route
from oltunes.types import Decision

log = logging.getLogger(__name__)


@dataclass
class SwitchRecord:
    at_s: float
    old: str
    new: str
    drained: bool


@dataclass
class ServeSupervisor:
    """Owns the serving workers of one service.

    Parameters
    ----------
    launcher
        Where workers run.
    router
        The gateway's route for this model; switched only once the new worker is healthy.
    spec_for
        ``spec_for(decision, generation) -> WorkerSpec`` (generation numbers each worker started).
    ready_timeout_s, drain_timeout_s, stop_grace_s
        Health wait for a new worker; how long an old worker may finish its in-flight requests; the grace
        period of its SIGTERM (the worker answers everything it queued before exiting).
    """

    launcher: Launcher
    router: Route
    spec_for: Callable[[Decision, int], WorkerSpec]
    ready_timeout_s: float = 90.0
    drain_timeout_s: float = 30.0
    stop_grace_s: float = 15.0
    active: Handle | None = None
    decision: Decision | None = None
    restarts: int = 0
    switches: list[SwitchRecord] = field(default_factory=list)
    generation: int = 0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _t0: float = field(default_factory=time.monotonic)

    async def _launch(self, decision: Decision) -> Handle:
        self.generation += 1
        spec = self.spec_for(decision, self.generation)
        handle = await asyncio.to_thread(self.launcher.start, spec)
        try:
            await asyncio.to_thread(self.launcher.ready, handle, self.ready_timeout_s)
        except BaseException:
            await asyncio.to_thread(self.launcher.stop, handle, 1.0)
            raise
        return handle

    async def start(self, decision: Decision) -> Handle:
        async with self._lock:
            self.active = await self._launch(decision)
            self.decision = decision
            self.router.switch(self.active.url, "start")
            return self.active

    async def switch(self, decision: Decision) -> SwitchRecord:
        """Apply a changed decision: new worker first, then traffic, then drain and stop the old one."""
        async with self._lock:
            old = self.active
            new = await self._launch(decision)
            self.active, self.decision = new, decision
            self.router.switch(new.url)
            drained = True
            if old is not None:
                drained = await self.router.drained(old.url, self.drain_timeout_s)
                await asyncio.to_thread(self.launcher.stop, old, self.stop_grace_s)
            rec = SwitchRecord(time.monotonic() - self._t0, old.spec.candidate.key if old else "", decision.candidate.key, drained)
            self.switches.append(rec)
            return rec

    async def watch(self, stop: asyncio.Event, poll_s: float = 0.2) -> None:
        """Restart the active worker with the same decision whenever it dies (until `stop`)."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=poll_s)
                return
            except TimeoutError:
                pass
            async with self._lock:
                if self.active is None or self.decision is None:
                    continue
                if await asyncio.to_thread(self.launcher.alive, self.active):
                    continue
                dead = self.active
                await asyncio.to_thread(self.launcher.stop, dead, 0.5)  # reap it, collect its telemetry
                log.warning("serving worker %s (%s) died; restarting", dead.pid, dead.spec.candidate.key)
                self.restarts += 1
                self.active = await self._launch(self.decision)
                self.router.switch(self.active.url, "restart")

    async def stop(self) -> None:
        async with self._lock:
            if self.active is not None:
                if self.active.url:
                    await self.router.drained(self.active.url, self.drain_timeout_s)
                await asyncio.to_thread(self.launcher.stop, self.active, self.stop_grace_s)
