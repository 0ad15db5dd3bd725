"""Leases over HTTP: the tuning service's routes in front of a `LeaseBook`, and the client a flow holds.

======================================  ==============  ===============================================
route (under ``/v1``, bearer token)     request         response
======================================  ==============  ===============================================
``POST   /v1/leases``                   `LeaseRequest`  `LeaseAnswer` (granted, or waiting + position)
``POST   /v1/leases/{lease_id}/renew``  `RenewRequest`  `RenewAnswer` (``lease`` null: expired/released)
``POST   /v1/leases/{lease_id}/move``   `MoveRequest`   `MoveAnswer` (moved, or refused + reason)
``DELETE /v1/leases/{lease_id}``        --              `ReleaseAnswer`
``DELETE /v1/queue/{job_id}``           --              `ReleaseAnswer` (left the queue)
``GET    /v1/leases``                   --              `BookView` (leases, queue in order, limits, when it was ordered)
======================================  ==============  ===============================================

The routes exist when the service knows its cluster (``oltunes tuner serve --inventory``).

Ownership: the answer to a job's first ``POST /v1/leases`` carries ``secret``; asking again for that job sends it
in the body, and renew, move, release and withdraw send it as the ``X-Lease-Secret`` header (409 without it).
``GET /v1/leases`` never shows secrets, and shows real lease ids only to the service's admin token
(``OLTUNES_TUNER_ADMIN_TOKEN``; stand-ins otherwise), which may also release any lease (freeing a stuck slot).
"""

from __future__ import annotations

import logging
from typing import Annotated

from collections.abc import Callable

from fastapi import APIRouter, Header, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from oltunes.errors import TunerUnavailable
from oltunes.allocator.types import MAX_TTL_S, BookView, Lease, LeaseAnswer, LeaseRequest, MoveAnswer, MoveRequest
from oltunes.allocator.book import LeaseBook
from oltunes.types import ID_PATTERN, MAX_ID_CHARS

log = logging.getLogger(__name__)

PathId = Annotated[str, PathParam(pattern=ID_PATTERN, max_length=MAX_ID_CHARS)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RenewRequest(_Model):
    ttl_s: float | None = Field(default=None, gt=0, le=MAX_TTL_S, allow_inf_nan=False)


class RenewAnswer(_Model):
    lease: Lease | None = Field(description="the renewed lease; null when it expired or was released")


class ReleaseAnswer(_Model):
    released: bool


SECRET_HEADER = "X-Lease-Secret"
Secret = Annotated[str | None, Header(alias=SECRET_HEADER, max_length=MAX_ID_CHARS)]


def lease_router(book: LeaseBook, is_admin: Callable[[Request], bool] = lambda request: False) -> APIRouter:
    """Routes over `book` (sync handlers: each writes the book durably, so they run on the thread pool).
    `is_admin(request)`: whether the request carries the service's admin token."""
    router = APIRouter()

    @router.post("/leases", response_model=LeaseAnswer)
    def acquire(req: LeaseRequest) -> LeaseAnswer:
        return book.acquire(req)

    @router.post("/leases/{lease_id}/renew", response_model=RenewAnswer)
    def renew(lease_id: PathId, secret: Secret = None, req: RenewRequest | None = None) -> RenewAnswer:
        return RenewAnswer(lease=book.renew(lease_id, req.ttl_s if req else None, secret=secret))

    @router.post("/leases/{lease_id}/move", response_model=MoveAnswer)
    def move(lease_id: PathId, req: MoveRequest, secret: Secret = None) -> MoveAnswer:
        return book.move(lease_id, req, secret=secret)

    @router.delete("/leases/{lease_id}", response_model=ReleaseAnswer)
    def release(lease_id: PathId, request: Request, secret: Secret = None) -> ReleaseAnswer:
        return ReleaseAnswer(released=book.release(lease_id, secret=secret, force=is_admin(request)))

    @router.delete("/queue/{job_id}", response_model=ReleaseAnswer)
    def withdraw(job_id: PathId, secret: Secret = None) -> ReleaseAnswer:
        return ReleaseAnswer(released=book.withdraw(job_id, secret=secret))

    @router.get("/leases", response_model=BookView)
    def view(request: Request) -> BookView:
        return book.view(lease_ids=is_admin(request))

    return router


class RemoteLeases:
    """The `LeaseBook` interface (``acquire``/``renew``/``move``/``release``/``withdraw``/``view``) over a `TunerClient`'s
    connection.

    `fallback` (a book of this process's own) answers an ``acquire`` the service cannot (unreachable), so a job
    still runs, on the client's safe default decision, as an unreachable tuner always allowed; its lease stays
    in that book. Without a fallback an unreachable service raises `TunerUnavailable`.
    """

    def __init__(self, client, fallback: LeaseBook | None = None) -> None:  # client: a TunerClient
        self.client = client
        self.fallback = fallback
        self._local: set[str] = set()  # lease ids the fallback book granted

    def _call(self, method: str, path: str, body: str | None = None, secret: str | None = None) -> bytes:
        from oltunes.client.transport import ServiceUnreachable

        headers = {SECRET_HEADER: secret} if secret else None
        try:
            return self.client.transport.request(method, path, content=body, breaker=False,
                                                 headers=headers).content
        except ServiceUnreachable as e:
            raise TunerUnavailable(f"tuning service: {e}") from None

    def acquire(self, req: LeaseRequest) -> LeaseAnswer:
        try:
            return LeaseAnswer.model_validate_json(self._call("POST", "/leases", req.model_dump_json()))
        except TunerUnavailable as e:
            if self.fallback is None:
                raise
            log.warning("%s: job %s runs without the service's lease (an unshared one of this process)",
                        e, req.job.job_id)
            answer = self.fallback.acquire(req)
            if answer.lease is not None:
                self._local.add(answer.lease.lease_id)
            return answer

    def renew(self, lease_id: str, ttl_s: float | None = None, *, secret: str | None = None) -> Lease | None:
        if lease_id in self._local:
            return self.fallback.renew(lease_id, ttl_s, secret=secret)
        body = RenewRequest(ttl_s=ttl_s).model_dump_json()
        return RenewAnswer.model_validate_json(self._call("POST", f"/leases/{lease_id}/renew", body, secret)).lease

    def move(self, lease_id: str, req: MoveRequest, *, secret: str | None = None) -> MoveAnswer:
        if lease_id in self._local:
            return self.fallback.move(lease_id, req, secret=secret)
        raw = self._call("POST", f"/leases/{lease_id}/move", req.model_dump_json(), secret)
        return MoveAnswer.model_validate_json(raw)

    def release(self, lease_id: str, *, secret: str | None = None) -> bool:
        if lease_id in self._local:
            self._local.discard(lease_id)
            return self.fallback.release(lease_id, secret=secret)
        return ReleaseAnswer.model_validate_json(self._call("DELETE", f"/leases/{lease_id}", secret=secret)).released

    def withdraw(self, job_id: str, *, secret: str | None = None) -> bool:
        if self.fallback is not None:
            self.fallback.withdraw(job_id, secret=secret)
        return ReleaseAnswer.model_validate_json(self._call("DELETE", f"/queue/{job_id}", secret=secret)).released

    def view(self) -> BookView:
        return BookView.model_validate_json(self._call("GET", "/leases"))
