"""Issue 31 case 5: leases are owned. Only the caller that first asked for a job gets its secret; renew, move,
release and withdraw need it; the listing shows no secret, and real lease ids only to the admin token."""

from __future__ import annotations

import httpx
import pytest

from oltunes.tuner import Tuner
from oltunes.allocator.types import LeaseForbidden, LeaseRequest
from oltunes.allocator.book import LeaseBook
from oltunes.service.app import create_app, serve_in_thread
from tests.tuner.conftest import POOLS, job
from tests.tuner.serve_process import AUTH, TOKEN
from tests.tuner.variants import make_variants

ADMIN = "admin-token-456"


@pytest.fixture
def owned(tmp_path):
    app = create_app(Tuner(make_variants(), seed=0), token=TOKEN, admin_token=ADMIN, pools=POOLS,
                     state_path=tmp_path / "state.json", persist_every_s=0)
    with serve_in_thread(app) as url, httpx.Client(base_url=url + "/v1", headers=AUTH, timeout=30) as http:
        yield http, app.state.service.leases


def test_another_holder_can_neither_renew_move_release_nor_take_a_lease(owned):
    http, book = owned
    mine = http.post("/leases", json={"job": job("mine").model_dump(mode="json"), "ttl_s": 600}).json()
    lease, secret = mine["lease"], mine["secret"]
    assert mine["status"] == "granted" and lease["secret"] == secret
    lid = lease["lease_id"]
    wrong = {"X-Lease-Secret": "0" * 32}
    for headers in ({}, wrong):  # no secret, or a guessed one
        assert http.post(f"/leases/{lid}/renew", json={}, headers=headers).status_code == 409
        r = http.post(f"/leases/{lid}/move", json={"decision": lease["decision"]}, headers=headers)
        assert r.status_code == 409 and "secret" in r.json()["detail"]
        assert http.delete(f"/leases/{lid}", headers=headers).status_code == 409
    # Asking for the same job again without its secret tells nothing and grants nothing.
    again = http.post("/leases", json={"job": job("mine").model_dump(mode="json")}).json()
    assert again["status"] == "waiting" and again["lease"] is None and again["secret"] is None
    assert len(book.leases) == 1  # still held, by its owner
    own = {"X-Lease-Secret": secret}
    assert http.post(f"/leases/{lid}/renew", json={}, headers=own).json()["lease"]["lease_id"] == lid
    assert http.delete(f"/leases/{lid}", headers=own).json() == {"released": True}


def test_the_listing_has_no_secrets_and_ids_only_for_the_admin(owned):
    http, _ = owned
    mine = http.post("/leases", json={"job": job("a").model_dump(mode="json"), "ttl_s": 600}).json()
    listed = http.get("/leases").json()
    [shown] = listed["leases"]
    assert shown["lease_id"] != mine["lease"]["lease_id"] and shown["secret"] is None
    assert mine["secret"] not in str(listed) and mine["lease"]["lease_id"] not in str(listed)
    assert http.get("/leases").json()["leases"][0]["lease_id"] == shown["lease_id"]  # a stable stand-in
    admin = {"Authorization": f"Bearer {ADMIN}"}
    [real] = http.get("/leases", headers=admin).json()["leases"]
    assert real["lease_id"] == mine["lease"]["lease_id"] and real["secret"] is None
    # The operator may free a stuck slot without the holder's secret.
    assert http.delete(f"/leases/{real['lease_id']}", headers=admin).json() == {"released": True}


def test_a_queued_job_is_withdrawn_or_re_asked_only_with_its_secret(tmp_path):
    book = LeaseBook([POOLS[1]], lambda j, c: Tuner(make_variants(), seed=0).decide(j, c))  # one slot
    book.acquire(LeaseRequest(job=job("running"), ttl_s=600))
    queued = book.acquire(LeaseRequest(job=job("q"), ttl_s=600))
    assert queued.status == "waiting" and queued.position == 0
    with pytest.raises(LeaseForbidden):
        book.withdraw("job-q")
    assert book.acquire(LeaseRequest(job=job("q"), ttl_s=600)).position is None  # not its owner: no news
    assert book.acquire(LeaseRequest(job=job("q"), ttl_s=600, secret=queued.secret)).position == 0
    assert book.withdraw("job-q", secret=queued.secret)
