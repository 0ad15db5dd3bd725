"""What the lease book holds and answers: leases, waiting jobs, and the requests and answers of its interface.

Shared by the book (`oltunes.allocator.book`), its file (`oltunes.allocator.store`), its HTTP routes and remote
client (`oltunes.allocator.api`) and the flows that hold leases (`oltunes.allocator.holder`).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from oltunes.errors import OLTunesError
from oltunes.types import MAX_LIST, Decision, Id, JobSpec, Label, Placement, new_id

__all__ = ["MAX_TTL_S", "MAX_WAITING", "BookView", "Lease", "LeaseAnswer", "LeaseForbidden", "LeaseRequest",
           "MoveAnswer", "MoveRequest", "Waiting", "owns", "stand_in"]

MAX_TTL_S = 3_600.0
MAX_WAITING = 10_000  # the queue policy's own bound (`oltunes.rltune.service_queue.MAX_WAITING`)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LeaseForbidden(OLTunesError):
    """A renew, move, release or withdraw without the secret of the job's lease (HTTP 409): only its holder may."""


SECRET_DOC = ("the job's lease secret: made when the job first asks, answered only to that caller, and required to "
              "ask again, renew, move, release or withdraw")


class Lease(_Model):
    """A job's hold on one slot of one device, until ``expires_at`` (seconds since the epoch) unless renewed."""

    lease_id: Id = Field(default_factory=new_id)
    job: JobSpec
    decision: Decision
    pool: Id
    device: int = Field(ge=0)
    holder: Label | None = None
    ttl_s: float = Field(gt=0, le=MAX_TTL_S, allow_inf_nan=False)
    granted_at: float
    expires_at: float
    secret: Id | None = Field(default=None, description=SECRET_DOC + " (None: a lease from before secrets)")

    def placement(self) -> Placement:
        return Placement(job_id=self.job.job_id, pool=self.pool, device=self.device, candidate=self.decision.candidate,
                         slo_ms=self.job.slo_ms, arrival_rate_rps=self.job.arrival_rate_rps)


class Waiting(_Model):
    """A job in the queue; dropped when its holder has not asked again for ``ttl_s`` seconds."""

    job: JobSpec
    holder: Label | None = None
    ttl_s: float = Field(gt=0, le=MAX_TTL_S, allow_inf_nan=False)
    submitted_at: float
    expires_at: float
    decision: Decision | None = Field(default=None, description="a fixed decision (a resumed job): lease exactly it")
    expected_duration_s: float | None = Field(default=None, gt=0, le=1e8, allow_inf_nan=False)
    secret: Id | None = Field(default=None, description=SECRET_DOC)


class LeaseRequest(_Model):
    """Ask for a lease (again: idempotent by ``job.job_id`` -- a waiting job asks until it is granted)."""

    job: JobSpec
    ttl_s: float = Field(default=60.0, gt=0, le=MAX_TTL_S, allow_inf_nan=False)
    holder: Label | None = Field(default=None, description="who holds it, for people reading the book (host:pid, flow run)")
    decision: Decision | None = Field(default=None, description="lease this decision's placement instead of deciding")
    expected_duration_s: float | None = Field(default=None, gt=0, le=1e8, allow_inf_nan=False,
                                              description="the job's expected run time, for queue policies that read it")
    secret: Id | None = Field(default=None, description="the secret of the job's first answer, when asking again")


class LeaseAnswer(_Model):
    status: Literal["granted", "waiting"]
    lease: Lease | None = None
    position: int | None = Field(default=None, ge=0, description="0 = next in the queue policy's order; null while "
                                 "another holder has the job (it frees when that holder stops renewing)")
    waiting: int = Field(ge=0, description="jobs in the queue")
    secret: Id | None = Field(default=None, description=SECRET_DOC)


class MoveRequest(_Model):
    """Move a held lease to a new decision's placement (a running job re-tuned)."""

    decision: Decision
    job: JobSpec | None = Field(default=None, description="the job as it runs now (e.g. its current arrival rate); "
                                                          "the same job_id as the lease's")


class MoveAnswer(_Model):
    status: Literal["moved", "refused"]
    lease: Lease | None = Field(description="the lease after the call (unchanged when refused); null: it is gone")
    reason: str | None = Field(default=None, max_length=500, description="why it was refused")


class BookView(_Model):
    leases: list[Lease] = Field(max_length=MAX_LIST)
    waiting: list[Waiting] = Field(max_length=MAX_WAITING)
    queue_policy: str
    class_limits: dict[str, int]
    ordered_at: float  # the book's clock when the queue was ordered (a time-aware policy's order depends on it)


def owns(stored: str | None, given: str | None) -> bool:
    """Whether `given` is the secret `stored` (constant-time); a lease saved before secrets (None) has no owner."""
    if stored is None:
        return True
    return given is not None and hmac.compare_digest(given.encode(), stored.encode())


def stand_in(lease_id: str) -> str:
    """What the listing shows for a lease id without the admin token: stable (the same lease, the same stand-in)
    but useless for calls."""
    return "lease-" + hashlib.blake2b(lease_id.encode(), digest_size=8).hexdigest()
