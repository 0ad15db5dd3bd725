"""Leases and the queue: the tuning service as the cluster's allocator, over real HTTP, real threads and a real
process killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter

import httpx
import pytest

from oltunes.errors import ConfigError
from oltunes.inventory import CATALOG
from oltunes.rltune.service_queue import queue_order
from oltunes.tuner import Tuner
from oltunes.client.tuner_client import TunerClient
from oltunes.allocator.api import RemoteLeases
from oltunes.allocator.holder import LeaseTimeout, hold_lease, leases_for
from oltunes.allocator.types import LeaseRequest
from oltunes.allocator.book import LeaseBook
from oltunes.types import ClusterState, JobSpec, Pool
from tests.tuner.conftest import POOLS, job
from tests.tuner.serve_process import AUTH, TOKEN
from tests.tuner.variants import make_variants


def slots(pools) -> int:
    return sum(p.count * p.slots_per_device for p in pools)


def test_concurrent_holders_never_oversubscribe_a_device(service):
    """12 threads (each its own client) ask for leases at once on 5 slots; at every moment, every device holds
    at most its slots, and every job eventually runs once the earlier ones release."""
    url, book = service
    n = 12
    peak: Counter = Counter()
    errors: list[BaseException] = []
    ran: list[str] = []
    guard = threading.Lock()

    def one(i: int) -> None:
        try:
            with TunerClient(url, token=TOKEN, outbox_dir=None) as client:
                async def go() -> None:
                    async with hold_lease(RemoteLeases(client), job(i), ttl_s=30, wait_s=120) as lease:
                        view = RemoteLeases(client).view()
                        used = Counter((l.pool, l.device) for l in view.leases)
                        with guard:
                            for key, k in used.items():
                                peak[key] = max(peak[key], k)
                            ran.append(lease.job.job_id)
                        await asyncio.sleep(0.3)

                asyncio.run(go())
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    assert sorted(ran) == sorted(f"job-{i}" for i in range(n))
    cap = {(p.name, d): p.slots_per_device for p in POOLS for d in range(p.count)}
    assert peak and all(k <= cap[key] for key, k in peak.items()), peak
    assert book.view().leases == [] and book.view().waiting == []


def test_two_jobs_that_fit_together_form_a_co_running_group(tmp_path):
    """One device with two slots: the second job's decision names the first as its co-runner."""
    pool = Pool(name="t4-a", accelerator=CATALOG["t4"], count=1, slots_per_device=2)
    tuner = Tuner(make_variants(), seed=0)
    book = LeaseBook([pool], lambda j, c: tuner.decide(j, c), path=tmp_path / "leases")
    first = book.acquire(LeaseRequest(job=job(1)))
    second = book.acquire(LeaseRequest(job=job(2)))
    assert first.status == second.status == "granted"
    assert first.lease.decision.group is None  # alone on an empty device
    group = second.lease.decision.group
    assert group is not None and set(group.members) == {"job-1", "job-2"} and group.device == 0
    assert second.lease.decision.candidate.co_runners[0].job_id == "job-1"
    third = book.acquire(LeaseRequest(job=job(3)))
    assert third.status == "waiting" and third.position == 0
    assert book.release(first.lease.lease_id, secret=first.secret)  # its slot goes to the waiting job at once
    assert book.acquire(LeaseRequest(job=job(3), secret=third.secret)).status == "granted"


def test_queue_is_first_come_first_served_and_durable(tmp_path):
    pool = Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=1, slots_per_device=1)
    tuner = Tuner(make_variants(), seed=0)
    decide = lambda j, c: tuner.decide(j, c)  # noqa: E731
    book = LeaseBook([pool], decide, path=tmp_path / "leases")
    running = book.acquire(LeaseRequest(job=job("a"), ttl_s=600)).lease
    secrets = {}
    for name in ("b", "c", "d"):
        answer = book.acquire(LeaseRequest(job=job(name), ttl_s=600))
        assert answer.status == "waiting"
        secrets[name] = answer.secret
    again_c = LeaseRequest(job=job("c"), ttl_s=600, secret=secrets["c"])
    assert book.acquire(again_c).position == 1  # asking again keeps its turn
    # A restarted service reads the same book: the lease and the queue, in order.
    again = LeaseBook([pool], decide, path=tmp_path / "leases")
    assert [l.lease_id for l in again.view(lease_ids=True).leases] == [running.lease_id]
    assert [w.job.job_id for w in again.view().waiting] == ["job-b", "job-c", "job-d"]
    again.release(running.lease_id, secret=running.secret)  # the secret survived the restart
    assert [l.job.job_id for l in again.view().leases] == ["job-b"]
    with pytest.raises(ConfigError, match="known: .*fcfs"):
        queue_order("no-such-policy")


def test_an_unreadable_book_file_is_refused_saying_what_to_do(tmp_path):
    pool = Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=1, slots_per_device=1)
    (tmp_path / "leases").write_text('{"leases": [')
    with pytest.raises(ConfigError, match="unreadable.*move it aside"):
        LeaseBook([pool], lambda j, c: None, path=tmp_path / "leases")


def test_class_limit_bounds_jobs_per_accelerator_class_per_host(tmp_path):
    """At most one T4 job per host, CPU jobs bounded by their slots only."""
    tuner = Tuner(make_variants(), seed=0)
    pools = [Pool(name="t4-a", accelerator=CATALOG["t4"], count=4, slots_per_device=4),
             Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=3, slots_per_device=1)]
    book = LeaseBook(pools, lambda j, c: tuner.decide(j, c), class_limits={"t4": 1})
    granted = [book.acquire(LeaseRequest(job=job(i, slo_ms=60_000))) for i in range(6)]
    by_pool = Counter(a.lease.pool for a in granted if a.status == "granted")
    assert by_pool["t4-a"] <= 1 and by_pool["cpu-a"] <= 3
    assert sum(by_pool.values()) == 4 and [a.status for a in granted].count("waiting") == 2


def test_a_lease_expires_when_its_holder_is_killed(tmp_path, service):
    """A process holding a lease (heartbeat every ttl/3) is SIGKILLed: its slot is free again within the TTL."""
    url, book = service
    ttl = 3.0
    script = textwrap.dedent(f"""
        import asyncio, sys
        from oltunes.client.tuner_client import TunerClient
        from oltunes.allocator.api import RemoteLeases
        from oltunes.allocator.holder import hold_lease
        from oltunes.types import JobSpec

        async def main():
            client = TunerClient({url!r}, token={TOKEN!r})
            job = JobSpec(job_id="doomed", family="cnn", slo_ms=5000.0, items=10)
            async with hold_lease(RemoteLeases(client), job, ttl_s={ttl}, wait_s=60):
                print("held", flush=True)
                await asyncio.sleep(600)

        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "OLTUNES_HOME": str(tmp_path / "home")})
    try:
        assert proc.stdout.readline().strip() == "held"
        time.sleep(2 * ttl)  # two TTLs: only the heartbeat can have kept it
        with httpx.Client(base_url=url, headers=AUTH, timeout=10) as http:
            assert [l["job"]["job_id"] for l in http.get("/v1/leases").json()["leases"]] == ["doomed"]
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            killed = time.monotonic()
            while http.get("/v1/leases").json()["leases"]:
                assert time.monotonic() - killed < ttl + 30, "the dead holder's lease never expired"
                time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_waiting_gives_up_after_its_limit_and_leaves_the_queue():
    pool = Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=1, slots_per_device=1)
    tuner = Tuner(make_variants(), seed=0)
    book = leases_for(tuner, [pool])
    assert isinstance(book, LeaseBook)
    book.acquire(LeaseRequest(job=job("first"), ttl_s=600))

    async def late() -> None:
        async with hold_lease(book, job("late"), ttl_s=1, wait_s=0.5):
            pytest.fail("granted a lease on a full device")

    with pytest.raises(LeaseTimeout, match="no capacity within 0.5s"):
        asyncio.run(late())
    assert book.view().waiting == []


def test_bad_lease_requests_name_the_field(service):
    url, _ = service
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as http:
        r = http.post("/v1/leases", json={"job": job(1).model_dump(mode="json"), "ttl_s": float("1e9")})
        assert r.status_code == 422 and "ttl_s" in r.text
        r = http.post("/v1/leases/..%2Fetc/renew", json={})
        assert r.status_code in (404, 422)
        assert http.post("/v1/leases/nosuchlease/renew", json={}).json() == {"lease": None}
        assert http.get("/v1/leases", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/v1/health").status_code == 200  # still serving


def test_the_queue_order_is_the_named_policy_reading_expected_run_times():
    """``sjf`` hands the freed slot to the shortest waiting job, not the oldest (the RLTune hook's interface)."""
    from oltunes.rltune.policies import QueuePolicy

    pool = Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=1, slots_per_device=1)
    tuner = Tuner(make_variants(), seed=0)
    book = LeaseBook([pool], tuner.decide, queue_policy=queue_order(QueuePolicy.make("sjf")))
    running = book.acquire(LeaseRequest(job=job("a"), ttl_s=600)).lease
    for name, seconds in (("long", 3_000.0), ("short", 10.0), ("mid", 300.0)):
        book.acquire(LeaseRequest(job=job(name), ttl_s=600, expected_duration_s=seconds))
    assert [w.job.job_id for w in book.view().waiting] == ["job-short", "job-mid", "job-long"]
    assert book.view().queue_policy == "sjf"
    book.release(running.lease_id, secret=running.secret)
    assert [l.job.job_id for l in book.view().leases] == ["job-short"]


def test_a_job_that_cannot_fit_an_idle_cluster_is_refused_not_queued_forever():
    tuner = Tuner(make_variants(), seed=0)
    pool = Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=2, slots_per_device=2)
    book = LeaseBook([pool], lambda j, c: tuner.decide(j, c), class_limits={"cpu": 0})
    with pytest.raises(ConfigError, match="job-x: does not fit this cluster even with nothing running"):
        book.acquire(LeaseRequest(job=job("x")))
    assert book.view().waiting == []
    unknown = JobSpec(job_id="job-y", family="no-such-family", slo_ms=100.0)
    open_book = LeaseBook([pool], lambda j, c: tuner.decide(j, c))
    with pytest.raises(ConfigError, match="no-such-family"):
        open_book.acquire(LeaseRequest(job=unknown))


@pytest.fixture(scope="module")
def tiny_rltune_weights(tmp_path_factory):
    """A tiny trained RLTune policy (a few CPU-seconds), as `oltunes rltune train` writes it."""
    from oltunes.rltune.net import save_policy
    from oltunes.rltune.ppo import TrainConfig, train
    from tests.rltune.conftest import TINY_LOAD, synthetic_trace

    cfg = TrainConfig(seed=0, iterations=6, episodes_per_iteration=4, train_sequences=12, sequence_length=48,
                      load=TINY_LOAD)
    net, meta = train(synthetic_trace(), cfg)
    return save_policy(net, tmp_path_factory.mktemp("rltune") / "tiny.safetensors", meta)


def _serve_cmd(tmp_path, *extra: str):
    from tests.tuner.serve_process import ServeProcess

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("pools:\n  - {name: cpu-a, accelerator: cpu, count: 1, slots_per_device: 1}\n")
    proc = ServeProcess(tmp_path)
    proc.cmd += ["--inventory", str(inventory), *extra]
    return proc


@pytest.mark.slow
def test_serve_orders_its_lease_queue_by_rltune_weights(tmp_path, tiny_rltune_weights):
    """`oltunes tuner serve --queue-policy rltune --queue-policy-weights FILE` (a real process): the queue is in
    the trained network's order, which here is not the submission order."""
    from oltunes.rltune.policies import queue_policy
    from oltunes.rltune.service_queue import release_order

    with _serve_cmd(tmp_path, "--queue-policy", "rltune", "--queue-policy-weights", str(tiny_rltune_weights)) as srv:
        with httpx.Client(base_url=srv.url, headers=AUTH, timeout=30) as http:
            def ask(name: str, seconds: float | None = None) -> dict:
                body = {"job": job(name).model_dump(mode="json"), "ttl_s": 600, "expected_duration_s": seconds}
                r = http.post("/v1/leases", json=body)
                assert r.status_code == 200, r.text
                return r.json()

            assert ask("running")["status"] == "granted"
            submitted = [("long", 50_000.0), ("mid", 2_000.0), ("short", 30.0), ("mid2", 600.0)]
            for name, seconds in submitted:
                assert ask(name, seconds)["status"] == "waiting"
            view = http.get("/v1/leases").json()
    assert view["queue_policy"] == "rltune"
    served = [w["job"]["job_id"] for w in view["waiting"]]
    # The same network in this process, on the same queue (a full one-slot pool), gives the same order.
    waiting = [{"job_id": w["job"]["job_id"], "gpus": 1, "submitted_s": w["submitted_at"],
                "expected_duration_s": w["expected_duration_s"]} for w in view["waiting"]]
    caps = [{"name": "cpu-a", "gpus_per_node": 1, "free_per_node": [0]}]
    # at the server's own ordering time: waiting times are features, so "now" must be the same instant
    expected = release_order(queue_policy("rltune", tiny_rltune_weights), waiting, caps, view["ordered_at"])
    assert served == expected
    assert served != [f"job-{n}" for n, _ in submitted]  # not FCFS: the weights did the ordering


def test_serve_refuses_bad_queue_policy_weights_naming_the_option(tmp_path):
    from typer.testing import CliRunner

    from oltunes.cli import app

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("pools:\n  - {name: cpu-a, accelerator: cpu, count: 1, slots_per_device: 1}\n")
    corrupt = tmp_path / "w.safetensors"
    corrupt.write_text("secret-contents-42" * 10)
    base = ["tuner", "serve", "--inventory", str(inventory), "--state", str(tmp_path / "s.json"), "--port", "1"]
    cases = [(["--queue-policy", "rltune"], "--queue-policy-weights: required"),
             (["--queue-policy", "rltune", "--queue-policy-weights", str(tmp_path / "none.pt")], "file not found"),
             (["--queue-policy", "rltune", "--queue-policy-weights", str(corrupt)], "not a readable safetensors"),
             (["--queue-policy", "sjf", "--queue-policy-weights", str(corrupt)], "only with it"),
             (["--queue-policy", "no-such"], "--queue-policy: unknown policy; known: ")]
    for extra, message in cases:
        result = CliRunner().invoke(app, base + extra)
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.output.split()) and "secret-contents" not in result.output


def test_a_run_time_policy_orders_jobs_without_a_duration_by_the_tuners_estimate():
    """No ``expected_duration_s`` in the request: the book estimates items / predicted throughput, so ``sjf``
    still puts the smaller job first; ``fcfs`` (which reads no run time) neither estimates nor reorders."""
    pool = Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=1, slots_per_device=1)
    tuner = Tuner(make_variants(), seed=0)
    sizes = {"big": 400_000, "small": 4_000, "medium": 40_000}
    for policy, expected in (("sjf", ["job-small", "job-medium", "job-big"]), ("fcfs", [f"job-{n}" for n in sizes])):
        book = LeaseBook([pool], lambda j, c: tuner.decide(j, c), expect=tuner.expect, queue_policy=queue_order(policy))
        book.acquire(LeaseRequest(job=job("running"), ttl_s=600))
        for name, items in sizes.items():
            req = LeaseRequest(job=job(name).model_copy(update={"items": items}), ttl_s=600)
            assert book.acquire(req).status == "waiting"
        waiting = book.view().waiting
        assert [w.job.job_id for w in waiting] == expected, policy
        estimates = [w.expected_duration_s for w in waiting]
        assert all(e is not None and e > 0 for e in estimates) if policy == "sjf" else estimates == [None] * 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_queue_estimates_neither_draw_from_the_tuner_nor_decide_twice(seed):
    """``sjf`` estimates every waiting job's run time from ``Tuner.expect``: the tuner's state (its exploration
    RNG included) is the same after the queueing as before, and each job granted later gets the decision a twin
    tuner (same seed) makes deciding only the granted jobs, in the same order, on the same cluster."""
    pool = Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=1, slots_per_device=1)
    idle = ClusterState(pools=[pool])
    # explore_rate=1: every feasible decision draws from the RNG, so one extra decide would show
    tuner, twin = (Tuner(make_variants(), seed=seed, explore_rate=1.0) for _ in range(2))
    book = LeaseBook([pool], lambda j, c: tuner.decide(j, c), expect=tuner.expect, queue_policy=queue_order("sjf"))
    running = book.acquire(LeaseRequest(job=job("running"), ttl_s=600)).lease
    twin.decide(job("running"), idle)
    before = tuner.state_dict()
    for name, items in (("big", 400_000), ("small", 4_000), ("medium", 40_000)):
        req = LeaseRequest(job=job(name).model_copy(update={"items": items}), ttl_s=600)
        assert book.acquire(req).status == "waiting"
    assert all(w.expected_duration_s is not None for w in book.view().waiting)
    assert tuner.state_dict() == before  # estimating drew nothing and recorded nothing

    granted = []
    held = running
    while held is not None:
        book.release(held.lease_id, force=True)
        held = next(iter(book.view(lease_ids=True).leases), None)
        if held is not None:
            granted.append(held)
    assert [l.job.job_id for l in granted] == ["job-small", "job-medium", "job-big"]
    for lease in granted:
        d = twin.decide(lease.job, idle)
        assert (lease.decision.candidate, lease.decision.group, lease.decision.source) == (d.candidate, d.group, d.source)
    assert tuner.state_dict() == twin.state_dict()
