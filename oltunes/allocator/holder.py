"""Holding a lease for a job's life: wait in the queue, heartbeat while running, release at the end.

`hold_lease` is what a flow wraps a job in whose placement is fixed (a batch job); `lease_decisions` what a
flow wraps jobs in whose decisions change as they run (a streaming service): ``await held.apply(job, decision)``
before a decision is applied leases it the first time and moves the lease after. `leases_for` gives a flow the allocator its tuner implies: the tuning
service's book (`RemoteLeases`) when the tuner is a `TunerClient`, else a book of its own in this process over the
inventory's pools (one flow at a time, as an in-process tuner always was).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from oltunes.errors import OLTunesError, TunerUnavailable
from oltunes.allocator.types import BookView, Lease, LeaseAnswer, LeaseRequest, MoveAnswer, MoveRequest
from oltunes.allocator.book import LeaseBook
from oltunes.tuner.protocol import TunerLike
from oltunes.types import Decision, JobSpec, Pool

log = logging.getLogger(__name__)


class LeaseTimeout(OLTunesError):
    """A job waited in the queue longer than it was allowed to."""


class Leases(Protocol):
    """The allocator's interface: `LeaseBook` in-process, `oltunes.allocator.api.RemoteLeases` over HTTP."""

    def acquire(self, req: LeaseRequest) -> LeaseAnswer: ...

    def renew(self, lease_id: str, ttl_s: float | None = None, *, secret: str | None = None) -> Lease | None: ...

    def move(self, lease_id: str, req: MoveRequest, *, secret: str | None = None) -> MoveAnswer: ...

    def release(self, lease_id: str, *, secret: str | None = None) -> bool: ...

    def withdraw(self, job_id: str, *, secret: str | None = None) -> bool: ...

    def view(self) -> BookView: ...


def leases_for(tuner: TunerLike, pools: Sequence[Pool]) -> Leases:
    """The tuning service's book when `tuner` is its client (this process's own book if it is unreachable), else an
    in-process book deciding with `tuner`."""
    from oltunes.client.tuner_client import TunerClient
    from oltunes.allocator.api import RemoteLeases

    own = LeaseBook(pools, tuner.decide, expect=tuner.expect)
    return RemoteLeases(tuner, fallback=own) if isinstance(tuner, TunerClient) else own


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


async def wait_for_lease(leases: Leases, req: LeaseRequest, wait_s: float) -> Lease:
    """Ask until granted (up to `wait_s`, then leave the queue and raise `LeaseTimeout`). An unreachable service
    counts against `wait_s`. The secret of the first answer goes with every later ask (and is in the lease)."""
    job = req.job
    deadline = time.monotonic() + wait_s
    poll_s = min(max(req.ttl_s / 4, 0.2), 5.0)
    while True:
        try:
            answer = await asyncio.to_thread(leases.acquire, req)
            if answer.secret is not None and req.secret is None:
                req = req.model_copy(update={"secret": answer.secret})
            if answer.status == "granted":
                break
            where = (f"position {answer.position} of {answer.waiting} in the queue" if answer.position is not None
                     else "held by another holder until its lease ends")
        except TunerUnavailable as e:
            where = f"tuning service unreachable ({e})"
        if time.monotonic() >= deadline:
            try:
                await asyncio.to_thread(leases.withdraw, job.job_id, secret=req.secret)
            except TunerUnavailable:
                pass  # it drops the queued job after ttl_s without news
            raise LeaseTimeout(f"job {job.job_id}: no capacity within {wait_s:g}s ({where}); free capacity, or "
                               "give the job a longer lease wait")
        log.info("job %s waits for a lease: %s", job.job_id, where)
        await asyncio.sleep(poll_s)
    lease = answer.lease
    if lease is None:  # a granted answer always carries its lease; a service that breaks that is a bug there
        raise TunerUnavailable(f"job {job.job_id}: the allocator granted a lease without sending it")
    log.info("job %s: lease %s on %s device %d (ttl %gs)", job.job_id, lease.lease_id, lease.pool, lease.device,
             req.ttl_s)
    return lease


@asynccontextmanager
async def _kept(leases: Leases, ttl_s: float, held: dict[str, Lease]) -> AsyncIterator[None]:
    """Renew every lease in `held` (job id -> lease; the caller may change it) every ``ttl_s / 3`` while the block
    runs, and release them all after. A failed renewal is logged (the lease expires after `ttl_s` if the service
    never hears again); a lease found gone leaves `held`."""

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(ttl_s / 3)
            for job_id, lease in list(held.items()):
                try:
                    if await asyncio.to_thread(leases.renew, lease.lease_id, secret=lease.secret) is None:
                        log.error("job %s: lease %s is gone (expired or released); its slot may be given to another "
                                  "job", job_id, lease.lease_id)
                        held.pop(job_id, None)
                except TunerUnavailable as e:
                    log.warning("job %s: could not renew lease %s: %s", job_id, lease.lease_id, e)

    beat = asyncio.create_task(heartbeat())
    try:
        yield
    finally:
        beat.cancel()
        try:
            await beat
        except asyncio.CancelledError:
            pass
        for job_id, lease in list(held.items()):
            try:
                await asyncio.to_thread(leases.release, lease.lease_id, secret=lease.secret)
            except TunerUnavailable as e:
                log.warning("job %s: could not release lease %s (it expires in %gs): %s", job_id, lease.lease_id,
                            ttl_s, e)
        held.clear()


@asynccontextmanager
async def hold_lease(leases: Leases, job: JobSpec, *, ttl_s: float, wait_s: float,
                     decision: Decision | None = None, holder: str | None = None) -> AsyncIterator[Lease]:
    """Wait (up to `wait_s`) for a lease on the job's placement, renew it every ``ttl_s / 3`` while the block
    runs, release it after. `decision` given (a resumed job): lease exactly that placement."""
    req = LeaseRequest(job=job, ttl_s=ttl_s, holder=holder or holder_name(), decision=decision)
    lease = await wait_for_lease(leases, req, wait_s)
    async with _kept(leases, ttl_s, {job.job_id: lease}):
        yield lease


class DecisionLeases:
    """The leases of jobs whose decisions change while they run (a streaming service's models), kept by
    `lease_decisions`."""

    def __init__(self, leases: Leases, *, ttl_s: float, wait_s: float, holder: str | None = None) -> None:
        self.leases, self.ttl_s, self.wait_s = leases, ttl_s, wait_s
        self.holder = holder or holder_name()
        self.held: dict[str, Lease] = {}  # job id -> its lease as last granted or moved

    async def apply(self, job: JobSpec, decision: Decision) -> Lease | None:
        """Lease `decision`'s placement for `job` before it is applied: the first time (or after its lease was
        lost), wait in the queue up to ``wait_s`` (`LeaseTimeout`); after, move the job's lease in one step.
        None (logged with the reason; the lease unchanged): the move was refused, keep the current decision."""
        lease = self.held.get(job.job_id)
        if lease is not None:
            req = MoveRequest(decision=decision, job=job)
            answer = await asyncio.to_thread(self.leases.move, lease.lease_id, req, secret=lease.secret)
            if answer.status == "moved" and answer.lease is not None:
                self.held[job.job_id] = answer.lease
                log.info("job %s: lease %s moved to %s device %d", job.job_id, lease.lease_id, answer.lease.pool,
                         answer.lease.device)
                return answer.lease
            if answer.lease is not None:
                log.warning("job %s: lease %s not moved (%s); the job keeps its current decision", job.job_id,
                            lease.lease_id, answer.reason)
                return None
            self.held.pop(job.job_id, None)  # lost meanwhile (expired): lease the new placement afresh
        req = LeaseRequest(job=job, ttl_s=self.ttl_s, holder=self.holder, decision=decision)
        self.held[job.job_id] = lease = await wait_for_lease(self.leases, req, self.wait_s)
        return lease

    async def release(self, job_id: str) -> None:
        """Give up `job_id`'s lease now (a shadow that stops before its service does); no-op if none is held."""
        lease = self.held.pop(job_id, None)
        if lease is None:
            return
        try:
            await asyncio.to_thread(self.leases.release, lease.lease_id, secret=lease.secret)
        except TunerUnavailable as e:
            log.warning("job %s: could not release lease %s (it expires in %gs): %s", job_id, lease.lease_id,
                        self.ttl_s, e)


@asynccontextmanager
async def lease_decisions(leases: Leases, *, ttl_s: float = 60.0, wait_s: float = 600.0,
                          holder: str | None = None) -> AsyncIterator[DecisionLeases]:
    """Keep the leases `DecisionLeases.apply` takes: renewed every ``ttl_s / 3`` while the block runs, all
    released after (and lost ``ttl_s`` after the process dies)."""
    held = DecisionLeases(leases, ttl_s=ttl_s, wait_s=wait_s, holder=holder)
    async with _kept(leases, ttl_s, held.held):
        yield held
