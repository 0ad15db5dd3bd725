"""Holding a lease for a job's life: wait in the queue, heartbeat while running, release at the end.

`hold_lease` is what a flow wraps its job in; `leases_for` gives it the allocator its tuner implies: the tuning
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
from typing import Any, Protocol

from oltunes.errors import OLTunesError, TunerUnavailable
from oltunes.tuner.leases import BookView, Lease, LeaseAnswer, LeaseBook, LeaseRequest
from oltunes.types import Decision, JobSpec, Pool

log = logging.getLogger(__name__)


class LeaseTimeout(OLTunesError):
    """A job waited in the queue longer than it was allowed to."""


class Leases(Protocol):
    """The allocator's interface: `LeaseBook` in-process, `oltunes.tuner.lease_api.RemoteLeases` over HTTP."""

    def acquire(self, req: LeaseRequest) -> LeaseAnswer: ...

    def renew(self, lease_id: str, ttl_s: float | None = None) -> Lease | None: ...

    def release(self, lease_id: str) -> bool: ...

    def withdraw(self, job_id: str) -> bool: ...

    def view(self) -> BookView: ...


def leases_for(tuner: Any, pools: Sequence[Pool]) -> Leases:
    """The tuning service's book when `tuner` talks to one (this process's own book if it is unreachable), else an
    in-process book deciding with `tuner`."""
    from oltunes.tuner.client import TunerClient
    from oltunes.tuner.lease_api import RemoteLeases

    inner = getattr(tuner, "policy", None)
    client = tuner if isinstance(tuner, TunerClient) else getattr(inner, "tuner", None)
    own = LeaseBook(pools, lambda job, cluster: tuner.recommend(job, cluster), expect=getattr(tuner, "expect", None))
    return RemoteLeases(client, fallback=own) if isinstance(client, TunerClient) else own


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


@asynccontextmanager
async def hold_lease(leases: Leases, job: JobSpec, *, ttl_s: float, wait_s: float,
                     decision: Decision | None = None, holder: str | None = None) -> AsyncIterator[Lease]:
    """Wait (up to `wait_s`) for a lease on the job's placement, renew it every ``ttl_s / 3`` while the block
    runs, release it after. `decision` given (a resumed job): lease exactly that placement.

    An unreachable service while waiting counts against `wait_s`; while running, a failed renewal is logged
    (the lease expires after `ttl_s` if the service never hears again) and the job goes on.
    """
    req = LeaseRequest(job=job, ttl_s=ttl_s, holder=holder or holder_name(), decision=decision)
    deadline = time.monotonic() + wait_s
    poll_s = min(max(ttl_s / 4, 0.2), 5.0)
    answer: LeaseAnswer | None = None
    while True:
        try:
            answer = await asyncio.to_thread(leases.acquire, req)
            if answer.status == "granted":
                break
            where = f"position {answer.position} of {answer.waiting} in the queue"
        except TunerUnavailable as e:
            where = f"tuning service unreachable ({e})"
        if time.monotonic() >= deadline:
            try:
                await asyncio.to_thread(leases.withdraw, job.job_id)
            except TunerUnavailable:
                pass  # it drops the queued job after ttl_s without news
            raise LeaseTimeout(f"job {job.job_id}: no capacity within {wait_s:g}s ({where}); free capacity, or "
                               "give the job a longer lease wait")
        log.info("job %s waits for a lease: %s", job.job_id, where)
        await asyncio.sleep(poll_s)

    lease = answer.lease
    if lease is None:  # a granted answer always carries its lease; a service that breaks that is a bug there
        raise TunerUnavailable(f"job {job.job_id}: the allocator granted a lease without sending it")
    log.info("job %s: lease %s on %s device %d (ttl %gs)", job.job_id, lease.lease_id, lease.pool, lease.device, ttl_s)

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(ttl_s / 3)
            try:
                if await asyncio.to_thread(leases.renew, lease.lease_id) is None:
                    log.error("job %s: lease %s is gone (expired or released); its slot may be given to another job",
                              job.job_id, lease.lease_id)
                    return
            except TunerUnavailable as e:
                log.warning("job %s: could not renew lease %s: %s", job.job_id, lease.lease_id, e)

    beat = asyncio.create_task(heartbeat())
    try:
        yield lease
    finally:
        beat.cancel()
        try:
            await beat
        except asyncio.CancelledError:
            pass
        try:
            await asyncio.to_thread(leases.release, lease.lease_id)
        except TunerUnavailable as e:
            log.warning("job %s: could not release lease %s (it expires in %gs): %s", job.job_id, lease.lease_id,
                        ttl_s, e)
