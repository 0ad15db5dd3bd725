"""Moving a held lease to a re-tuned decision's device: one step under the book's lock (never no slot, never two),
refused with the reason when the target is full; in a book, over real HTTP, and while threads race."""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter

import httpx

from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.client.tuner_client import TunerClient
from oltunes.allocator.api import RemoteLeases
from oltunes.allocator.holder import lease_decisions
from oltunes.allocator.types import LeaseRequest, MoveRequest
from oltunes.allocator.book import LeaseBook
from oltunes.types import ColocationGroup, Decision, Pool
from tests.tuner.conftest import POOLS, job
from tests.tuner.serve_process import AUTH, TOKEN
from tests.tuner.variants import make_variants

ROW = Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=3, slots_per_device=1)


def on(decision: Decision, device: int, pool: str | None = None) -> Decision:
    """`decision` placed on `device` (of `pool`): what a re-tune that moves the job answers."""
    pool = pool or decision.candidate.pool
    group = ColocationGroup(pool=pool, device=device, members=(decision.job_id,),
                            predicted_slowdown={decision.job_id: 1.0})
    return decision.model_copy(update={"candidate": decision.candidate.model_copy(update={"pool": pool}),
                                       "group": group})


def per_device(book) -> Counter:
    return Counter((l.pool, l.device) for l in book.view().leases)


def test_a_move_swaps_the_slot_in_one_step_and_the_slot_left_admits_a_waiting_job():
    tuner = Tuner(make_variants(), seed=0)
    book = LeaseBook([ROW], lambda j, c: tuner.decide(j, c))
    a = book.acquire(LeaseRequest(job=job("a"), ttl_s=600)).lease
    b = book.acquire(LeaseRequest(job=job("b"), ttl_s=600)).lease
    assert (a.device, b.device) == (0, 1)
    # c wants b's device exactly (a resumed job): it waits
    c_req = LeaseRequest(job=job("c"), ttl_s=600, decision=on(tuner.decide(job("c"), book._cluster()), 1))
    assert book.acquire(c_req).status == "waiting"

    moved = book.move(b.lease_id, MoveRequest(decision=on(b.decision, 2)), secret=b.secret)
    assert moved.status == "moved" and moved.lease.lease_id == b.lease_id and moved.lease.device == 2
    assert moved.lease.expires_at >= b.expires_at and moved.lease.decision.group.device == 2
    view = book.view()
    assert {l.job.job_id: l.device for l in view.leases} == {"job-a": 0, "job-b": 2, "job-c": 1}  # c got the slot
    assert view.waiting == [] and max(per_device(book).values()) == 1

    refused = book.move(a.lease_id, MoveRequest(decision=on(a.decision, 1)), secret=a.secret)  # c is there
    assert refused.status == "refused" and "no free slot" in refused.reason
    assert refused.lease == a and per_device(book)[("cpu-a", 0)] == 1  # unchanged, still held
    other_job = book.move(a.lease_id, MoveRequest(decision=on(b.decision, 0)), secret=a.secret)
    assert other_job.reason.startswith("decision: for another job")
    nowhere = MoveRequest(decision=on(a.decision, 0, pool="nowhere"))
    assert book.move(a.lease_id, nowhere, secret=a.secret).status == "refused"
    gone = book.move("no-such-lease", MoveRequest(decision=a.decision))
    assert gone.status == "refused" and gone.lease is None
    home = MoveRequest(decision=on(a.decision, 0))
    assert book.move(a.lease_id, home, secret=a.secret).status == "moved"  # its own device


def test_decision_leases_lease_the_first_decision_move_on_switches_and_release_at_the_end():
    tuner = Tuner(make_variants(), seed=0)
    book = LeaseBook([ROW], lambda j, c: tuner.decide(j, c))
    other = book.acquire(LeaseRequest(job=job("other"), ttl_s=600)).lease  # device 0
    svc = job("svc").model_copy(update={"kind": "streaming", "arrival_rate_rps": 5.0, "items": None})
    first = tuner.decide(svc, book.with_leases(book._cluster()))

    async def run() -> tuple:
        async with lease_decisions(book, ttl_s=600, wait_s=5) as held:
            leased = await held.apply(svc, first)
            switched = await held.apply(svc.model_copy(update={"arrival_rate_rps": 9.0}), on(first, 2))
            refused = await held.apply(svc, on(first, 0))  # `other` holds it
            inside = book.view()
        return leased, switched, refused, inside

    leased, switched, refused, inside = asyncio.run(run())
    assert leased.device == 1 and switched.lease_id == leased.lease_id and switched.device == 2
    assert refused is None
    mine = [l for l in inside.leases if l.job.job_id == "job-svc"]
    assert len(mine) == 1 and mine[0].device == 2 and mine[0].job.arrival_rate_rps == 9.0
    assert [l.lease_id for l in book.view(lease_ids=True).leases] == [other.lease_id]  # released at the block's end


def test_move_over_http_and_bad_move_bodies_name_the_field_without_echo(service):
    url, book = service
    with TunerClient(url, token=TOKEN, outbox_dir=None) as client:
        leases = RemoteLeases(client)
        a = leases.acquire(LeaseRequest(job=job("a"), ttl_s=600)).lease
        t4 = next(p for p in POOLS if p.name == "t4-a")
        target = 1 - a.device if a.pool == t4.name else 0
        to_t4 = MoveRequest(decision=on(a.decision, target, pool=t4.name))
        answer = leases.move(a.lease_id, to_t4, secret=a.secret)
        assert answer.status == "moved" and (answer.lease.pool, answer.lease.device) == (t4.name, target)
        assert [(l.pool, l.device) for l in book.view().leases] == [(t4.name, target)]
    secret = "x" * 200_000
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as http:
        good = {"decision": answer.lease.decision.model_dump(mode="json")}
        own = {"X-Lease-Secret": a.secret}
        r = http.post(f"/v1/leases/{a.lease_id}/move", json={**good, "note": secret}, headers=own)
        assert r.status_code == 422 and "note" in r.text and secret[:50] not in r.text
        bad = {"decision": {**good["decision"], "job_id": secret}}
        r = http.post(f"/v1/leases/{a.lease_id}/move", json=bad, headers=own)
        assert r.status_code == 422 and "job_id" in r.text and secret[:50] not in r.text
        assert http.post("/v1/leases/..%2Fetc/move", json=good).status_code in (404, 422)
        r = http.post("/v1/leases/nosuchlease/move", json=good)
        assert r.status_code == 200 and r.json()["status"] == "refused" and r.json()["lease"] is None
        assert http.get("/v1/health").status_code == 200  # still serving


def test_racing_moves_and_acquires_never_leave_a_job_with_none_or_two_slots(service):
    """Three holders move at random across a 2-device x 2-slot pool and a 1-slot one, all at once;
    every view (a snapshot under the book's lock) has each holder exactly once and no device over its slots."""
    url, book = service
    cap = {(p.name, d): p.slots_per_device for p in POOLS for d in range(p.count)}
    views, errors = [], []
    done = threading.Event()
    with TunerClient(url, token=TOKEN, outbox_dir=None) as client:
        leases = RemoteLeases(client)
        held = [leases.acquire(LeaseRequest(job=job(i, slo_ms=60_000), ttl_s=600)).lease for i in range(3)]
        assert all(h is not None for h in held)

    def mover(lease, seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with TunerClient(url, token=TOKEN, outbox_dir=None) as c:
                for _ in range(25):
                    pool, device = rnd.choice(sorted(cap))
                    req = MoveRequest(decision=on(lease.decision, device, pool))
                    RemoteLeases(c).move(lease.lease_id, req, secret=lease.secret)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)

    def watcher() -> None:
        while not done.is_set():
            views.append(book.view(lease_ids=True))

    threads = [threading.Thread(target=mover, args=(h, i)) for i, h in enumerate(held)]
    watch = threading.Thread(target=watcher)
    watch.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    done.set()
    watch.join(timeout=30)
    assert not errors, errors
    assert len(views) > 10
    ids = sorted(h.lease_id for h in held)
    for v in views:
        assert sorted(l.lease_id for l in v.leases) == ids
        used = Counter((l.pool, l.device) for l in v.leases)
        assert all(n <= cap[k] for k, n in used.items()), used
    assert len({(l.pool, l.device) for v in views for l in v.leases}) > 2  # they did move
