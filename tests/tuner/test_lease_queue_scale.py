"""Issue 31 case 10: a long queue costs an acquire (almost) nothing. The queue policy is not consulted while
nothing can be admitted, and a change is one logged line, not a rewrite of the book; a restart reads the
snapshot plus the log back exactly, in order."""

from __future__ import annotations

import time

import pytest

from oltunes.inventory import CATALOG
from oltunes.rltune.policies import QueuePolicy
from oltunes.rltune.service_queue import queue_order
from oltunes.allocator.types import LeaseRequest
from oltunes.allocator.book import LeaseBook
from oltunes.tuner import Tuner
from oltunes.types import JobSpec, Pool
from tests.tuner.variants import make_variants

POOL = Pool(name="t4-q", accelerator=CATALOG["t4"], count=2, slots_per_device=1)


class CountingSjf(QueuePolicy, name="counting-sjf-test"):
    uses_runtime = False
    calls = 0

    def scores(self, view):
        type(self).calls += 1
        return view.submit.astype(float)


def req(name: str, secret: str | None = None, ttl_s: float = 600) -> LeaseRequest:
    return LeaseRequest(job=JobSpec(job_id=name, family="cnn", slo_ms=5_000.0, items=1000), ttl_s=ttl_s, secret=secret)


@pytest.fixture(scope="module")
def tuner():
    return Tuner(make_variants(), seed=0)


def test_a_full_cluster_never_orders_its_queue_on_acquire_and_writes_one_line_per_change(tmp_path, tuner):
    path = tmp_path / "book"
    book = LeaseBook([POOL], lambda j, c: tuner.decide(j, c), path=path)
    held = [book.acquire(req(f"run-{i}")) for i in range(2)]
    assert all(a.status == "granted" for a in held)
    secrets = {f"w-{i}": book.acquire(req(f"w-{i}")).secret for i in range(1500)}
    log = path.with_name("book.log")
    size = log.stat().st_size if log.exists() else 0
    answer = book.acquire(req("w-700", secrets["w-700"]))  # asking again: one line for its new expiry
    assert answer.position == 700
    grown = log.stat().st_size - size
    assert 0 < grown < 4_000  # one waiting record, not 1,500 of them
    # A restart reads the snapshot plus the log: the same leases, the same queue in the same order.
    again = LeaseBook([POOL], lambda j, c: tuner.decide(j, c), path=path)
    assert [w.job.job_id for w in again.view().waiting] == [f"w-{i}" for i in range(1500)]
    assert {l.job.job_id for l in again.view().leases} == {"run-0", "run-1"}
    # Releasing a slot admits the head of the queue, exactly as before.
    assert again.release(held[0].lease.lease_id, secret=held[0].secret)
    assert "w-0" in {l.job.job_id for l in again.view().leases}


def test_an_ordering_policy_is_called_only_when_something_can_be_admitted(tuner):
    policy = CountingSjf()
    book = LeaseBook([POOL], lambda j, c: tuner.decide(j, c), queue_policy=queue_order(policy))
    held = [book.acquire(req(f"run-{i}")) for i in range(2)]
    secrets = {f"w-{i}": book.acquire(req(f"w-{i}")).secret for i in range(300)}
    before = CountingSjf.calls
    t0 = time.perf_counter()
    for i in range(0, 300, 3):  # the queue asks again, the cluster stays full
        assert book.acquire(req(f"w-{i}", secrets[f"w-{i}"])).status == "waiting"
    assert CountingSjf.calls - before <= 1  # one ordering, reused while the queue's members stay the same
    assert time.perf_counter() - t0 < 5
    book.release(held[0].lease.lease_id, secret=held[0].secret)
    assert "w-0" in {l.job.job_id for l in book.view().leases}


def test_a_torn_last_log_line_is_skipped(tmp_path, tuner):
    path = tmp_path / "book"
    book = LeaseBook([POOL], lambda j, c: tuner.decide(j, c), path=path)
    book.acquire(req("a"))
    with open(path.with_name("book.log"), "ab") as f:
        f.write(b'{"waiting": {"job": ')  # a crash mid-append: never acknowledged
    again = LeaseBook([POOL], lambda j, c: tuner.decide(j, c), path=path)
    assert [l.job.job_id for l in again.view().leases] == ["a"]
