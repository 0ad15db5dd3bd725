"""Leases and the job queue: the tuning service as the cluster's allocator.

A job that is about to run asks for a **lease**: the book decides where it goes (the tuner, given every leased
placement as the `ClusterState`), and grants the lease if that device still has a free slot
(``Pool.slots_per_device``) and the accelerator class is under its limit on that host. A job that does not fit
**waits** in the queue; the queue's order is pluggable (`oltunes.allocator.queue.QueueOrder`: arrival order by
default; the RLTune package's policies through `oltunes.rltune.service_queue.queue_order`). Every
acquire, renew and release admits, in that order, each waiting job that now fits.

A lease lives ``ttl_s`` seconds from its last renewal (the holder heartbeats); a holder that dies stops renewing
and its lease expires, so its slot comes back without anyone calling release. A waiting job that stops asking is
dropped the same way. The book is durable: every change is written atomically (``durable=True``) to its JSON
file (`oltunes.allocator.store`) and reloaded on start, with wall-clock expiry times, so a restarted service
still knows what runs where. The records it holds and answers with are `oltunes.allocator.types`.

Leases are owned: a job's first ``acquire`` makes a secret, answered only to that caller; asking again for the job,
renewing, moving, releasing and withdrawing need it (`LeaseForbidden` otherwise), so no other flow can free or
move someone else's slot. A caller without it asking for a job someone holds is told "waiting", nothing more. The
listing (`view`) never holds secrets, and shows lease ids only when asked for them (the service's admin token).

Nothing here is HTTP: `oltunes.allocator.api` puts routes in front of it, and an in-process flow uses a book
of its own (one flow at a time, as without a service).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from oltunes.allocator.queue import ArrivalOrder, KeptOrder, QueueOrder
from oltunes.allocator.store import BookStore, Tracked
from oltunes.allocator.types import (MAX_WAITING, BookView, Lease, LeaseAnswer, LeaseForbidden, LeaseRequest,
                                     MoveAnswer, MoveRequest, Waiting, owns, stand_in)
from oltunes.errors import ConfigError, DataError
from oltunes.types import ClusterState, Decision, JobSpec, Pool, Prediction, new_id

log = logging.getLogger(__name__)


Decide = Callable[[JobSpec, ClusterState], Decision]
Expect = Callable[[JobSpec, ClusterState], Prediction | None]


class LeaseBook:
    """What runs where: the leases, the queue, and the decisions that fill them.

    Parameters
    ----------
    pools
        The cluster the book allocates.
    decide
        ``decide(job, cluster)``: where the job should go given what is leased (the tuner, or a policy).
    expect
        ``expect(job, cluster)``: what the job is predicted to do there, *without* deciding (``Tuner.expect``:
        no exploration draw, nothing recorded), for the run-time estimate of queue policies that read one
        (``sjf``, ``rltune``). None: waiting jobs without ``expected_duration_s`` have no run time.
    path
        JSON file the book is kept in (None: memory only).
    queue_policy
        The queue's order (`QueueOrder`; None: arrival order). A queue policy by name (``sjf``, ``slurm``,
        ``rltune``, ...): ``oltunes.rltune.service_queue.queue_order(name)``.
    class_limits
        Accelerator name -> the most jobs leased at once on one host (``Pool.engine``) of that class, e.g.
        ``{"t4": 2}``; classes not named are bounded by their slots only.
    clock
        Seconds since the epoch (wall clock: expiry survives a restart).
    """

    def __init__(self, pools: Sequence[Pool], decide: Decide, *, expect: Expect | None = None,
                 path: str | Path | None = None,
                 queue_policy: QueueOrder | None = None, class_limits: Mapping[str, int] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.pools = {p.name: p for p in pools}
        self.decide = decide
        self.expect = expect
        self.store = BookStore(Path(path) if path is not None else None)
        self.queue_policy: QueueOrder = queue_policy if queue_policy is not None else ArrivalOrder()
        self.queue_policy_name = self.queue_policy.name
        self.class_limits = dict(class_limits or {})
        for name, n in self.class_limits.items():
            if not isinstance(n, int) or n < 0:
                raise ConfigError(f"class_limits.{name}: must be an integer >= 0")
        self.clock = clock
        self.lock = threading.RLock()
        self.leases: Tracked[Lease] = Tracked()  # by lease id
        self.waiting: Tracked[Waiting] = Tracked()  # by job id, in arrival order
        self._ordered = KeptOrder()  # the queue policy's last order (see `_order`)
        self._load()

    # -- the interface a flow holds (in-process here; `oltunes.allocator.api.RemoteLeases` over HTTP) ------

    def acquire(self, req: LeaseRequest) -> LeaseAnswer:
        """Grant the job a lease if it fits now (or already holds one), else queue it (or keep it queued)."""
        with self.lock:
            now = self.clock()
            changed = self._expire(now)
            held = self._lease_of(req.job.job_id)
            known = held if held is not None else self.waiting.get(req.job.job_id)
            if known is not None and not owns(known.secret, req.secret):  # someone else's job: tell nothing
                if changed:
                    self._save()
                return LeaseAnswer(status="waiting", position=None, waiting=len(self.waiting))
            if held is None:
                w = self.waiting.get(req.job.job_id)
                if w is None:
                    if len(self.waiting) >= MAX_WAITING:
                        raise DataError(f"queue: full ({MAX_WAITING} jobs waiting); try again later")
                    w = Waiting(job=req.job, holder=req.holder, ttl_s=req.ttl_s, submitted_at=now,
                                expires_at=now + req.ttl_s, decision=req.decision,
                                expected_duration_s=req.expected_duration_s or self._estimate(req.job),
                                secret=new_id())
                    self.waiting[req.job.job_id] = w
                else:
                    w = w.model_copy(update={"expires_at": now + req.ttl_s})
                    self.waiting[req.job.job_id] = w
                why = self._admit(now)
                changed = True
                held = self._lease_of(req.job.job_id)
                if held is None and not self.leases:  # nothing runs, so no release will ever make room
                    del self.waiting[req.job.job_id]
                    self._save()
                    raise ConfigError(f"job {req.job.job_id}: does not fit this cluster even with nothing running "
                                      f"({why.get(req.job.job_id, 'no slot')}); check the inventory's slots and "
                                      "class limits, and the job's family")
            if changed:
                self._save()
            if held is not None:
                return LeaseAnswer(status="granted", lease=held, waiting=len(self.waiting), secret=held.secret)
            return LeaseAnswer(status="waiting", position=self._position(req.job.job_id, now),
                               waiting=len(self.waiting), secret=self.waiting[req.job.job_id].secret)

    def renew(self, lease_id: str, ttl_s: float | None = None, *, secret: str | None = None) -> Lease | None:
        """Extend a lease by its TTL (the heartbeat); None once it has expired or been released. `secret`: the
        lease's (`LeaseForbidden` otherwise)."""
        with self.lock:
            now = self.clock()
            if self._expire(now):
                self._admit(now)
            lease = self.leases.get(lease_id)
            if lease is not None:
                self._check_owner(lease, secret)
                ttl = lease.ttl_s if ttl_s is None else ttl_s
                lease = self.leases[lease_id] = lease.model_copy(update={"ttl_s": ttl, "expires_at": now + ttl})
            self._save()
            return lease

    def release(self, lease_id: str, *, secret: str | None = None, force: bool = False) -> bool:
        """End a lease (the job finished); True if it was held. Waiting jobs that now fit are admitted. `secret`:
        the lease's (`LeaseForbidden` otherwise), unless `force` (the service's admin)."""
        with self.lock:
            now = self.clock()
            lease = self.leases.get(lease_id)
            if lease is not None and not force:
                self._check_owner(lease, secret)
            released = self.leases.pop(lease_id, None) is not None
            self._expire(now)
            self._admit(now)
            self._save()
            return released

    def move(self, lease_id: str, req: MoveRequest, *, secret: str | None = None) -> MoveAnswer:
        """Swap a held lease to ``req.decision``'s placement in one step under the book's lock: the job holds
        exactly one slot before and after (its lease id, holder and TTL stay; the expiry restarts), never none
        and never two. Refused, the lease unchanged, when the target device has no free slot besides the job's
        own or its accelerator class is at its limit on that host. The slot it leaves may admit a waiting job."""
        with self.lock:
            now = self.clock()
            if self._expire(now):
                self._admit(now)
                self._save()
            lease = self.leases.get(lease_id)
            job = req.job or (lease.job if lease is not None else None)
            if lease is None or job is None:
                return MoveAnswer(status="refused", lease=None, reason="no such lease (expired or released)")
            self._check_owner(lease, secret)
            if req.decision.job_id != lease.job.job_id or job.job_id != lease.job.job_id:
                return MoveAnswer(status="refused", lease=lease, reason="decision: for another job than the lease's")
            pool = self.pools.get(req.decision.candidate.pool)
            if pool is None:
                return MoveAnswer(status="refused", lease=lease, reason="decision: its pool is not in this inventory")
            del self.leases[lease_id]  # judged as if the job were not there: its own slot is free to it
            try:
                full = self._class_full(pool)
                device = None if full else self._device_for(req.decision, [pool])
            finally:
                self.leases[lease_id] = lease
            if device is None:
                why = (f"class {pool.accelerator.name!r} at its limit on its host" if full else
                       f"no free slot on the device of pool {pool.name!r} the decision names")
                return MoveAnswer(status="refused", lease=lease, reason=why)
            moved = lease.model_copy(update={"job": job, "decision": req.decision, "pool": pool.name,
                                             "device": device, "expires_at": now + lease.ttl_s})
            self.leases[lease_id] = moved
            self._admit(now)
            self._save()
            return MoveAnswer(status="moved", lease=moved)

    def withdraw(self, job_id: str, *, secret: str | None = None) -> bool:
        """Leave the queue (the job gave up waiting); True if it was queued. `secret`: the job's."""
        with self.lock:
            w = self.waiting.get(job_id)
            if w is not None and not owns(w.secret, secret):
                raise LeaseForbidden(f"job {job_id}: queued by another holder; withdrawing needs its secret")
            gone = self.waiting.pop(job_id, None) is not None
            if gone:
                self._save()
            return gone

    # -- views -------------------------------------------------------------------------------------------------

    def with_leases(self, cluster: ClusterState, exclude: str | None = None) -> ClusterState:
        """`cluster` plus every leased placement on its pools of a job it does not list (nor `exclude`, the job
        asking: never its own co-runner), so a decision made on a caller's cluster sees what the book runs."""
        with self.lock:
            if self._expire(self.clock()):
                self._save()
            count = {p.name: p.count for p in cluster.pools}
            listed = {pl.job_id for pl in cluster.placements} | {exclude}
            extra = [l.placement() for l in self.leases.values()
                     if l.device < count.get(l.pool, 0) and l.job.job_id not in listed]
            return cluster.model_copy(update={"placements": [*cluster.placements, *extra]}) if extra else cluster

    def view(self, *, lease_ids: bool = False) -> BookView:
        """The book without any secret; each lease id replaced by a stand-in (stable, not usable) unless
        `lease_ids` (the service's admin)."""
        with self.lock:
            now = self.clock()
            if self._expire(now):
                self._save()
            order = self._order(now)
            leases = [l.model_copy(update={"secret": None, **({} if lease_ids else {"lease_id": stand_in(l.lease_id)})})
                      for l in sorted(self.leases.values(), key=lambda l: l.granted_at)]
            return BookView(leases=leases, waiting=[self.waiting[j].model_copy(update={"secret": None}) for j in order],
                            queue_policy=self.queue_policy_name, class_limits=self.class_limits, ordered_at=now)

    # -- inside the lock -------------------------------------------------------------------------------------

    @staticmethod
    def _check_owner(lease: Lease, secret: str | None) -> None:
        if not owns(lease.secret, secret):
            raise LeaseForbidden(f"lease {lease.lease_id}: held by another holder; renewing, moving or releasing "
                                 "it needs its secret (the X-Lease-Secret header)")

    def _lease_of(self, job_id: str) -> Lease | None:
        return next((l for l in self.leases.values() if l.job.job_id == job_id), None)

    def _expire(self, now: float) -> bool:
        if now < min(self.leases.soonest, self.waiting.soonest):  # nothing can have expired: no scan
            return False
        dead = [k for k, l in self.leases.items() if l.expires_at <= now]
        for k in dead:
            log.warning("lease %s of job %s (holder %r) expired: no heartbeat for %gs", k,
                        self.leases[k].job.job_id, self.leases[k].holder, self.leases[k].ttl_s)
            del self.leases[k]
        gone = [j for j, w in self.waiting.items() if w.expires_at <= now]
        for j in gone:
            del self.waiting[j]
        self.leases.soonest, self.waiting.soonest = self.leases.earliest(), self.waiting.earliest()
        return bool(dead or gone)

    def _cluster(self, pools: Sequence[Pool] | None = None) -> ClusterState:
        pools = list(self.pools.values() if pools is None else pools)
        names = {p.name for p in pools}
        return ClusterState(pools=pools, placements=[l.placement() for l in self.leases.values() if l.pool in names])

    def _used(self) -> Counter[tuple[str, int]]:
        return Counter((l.pool, l.device) for l in self.leases.values())

    def _class_full(self, pool: Pool) -> bool:
        limit = self.class_limits.get(pool.accelerator.name)
        if limit is None:
            return False
        host = pool.engine or ""
        running = sum(1 for l in self.leases.values()
                      if (p := self.pools.get(l.pool)) is not None and p.accelerator.name == pool.accelerator.name
                      and (p.engine or "") == host)
        return running >= limit

    def _open_pools(self) -> list[Pool]:
        """Pools with a free slot whose accelerator class is under its limit on their host."""
        used = self._used()
        return [p for p in self.pools.values() if not self._class_full(p)
                and any(used[(p.name, d)] < p.slots_per_device for d in range(p.count))]

    def _order(self, now: float) -> list[str]:
        """Waiting job ids in the queue policy's order (each job asks for one slot), kept while nobody joins or
        leaves the queue and no lease comes or goes (`KeptOrder`)."""
        return self._ordered.ids((self.waiting.members, self.leases.members), now, self._policy_order)

    def _position(self, job_id: str, now: float) -> int:
        """The job's place in the queue's order. ``fcfs`` orders by arrival, which is the queue's own order: no
        policy call (a job joining a queue of 10,000 is answered at once)."""
        if self.queue_policy_name == "fcfs":
            return next(i for i, j in enumerate(self.waiting) if j == job_id)
        self._order(now)
        return self._ordered.rank(job_id)

    def _policy_order(self, now: float) -> list[str]:
        if not self.waiting:
            return []
        used = self._used()
        caps = [{"name": p.name, "gpus_per_node": min(max(p.slots_per_device, 1), 64),
                 "free_per_node": [max(min(p.slots_per_device - used[(p.name, d)], 64), 0) for d in range(p.count)]}
                for p in self.pools.values() if p.count <= 4096]
        waiting = [{"job_id": w.job.job_id, "gpus": 1, "submitted_s": w.submitted_at,
                    "expected_duration_s": w.expected_duration_s} for w in self.waiting.values()]
        return self.queue_policy.release_order(waiting, caps, now)

    def _estimate(self, job: JobSpec) -> float | None:
        """An estimate of a queued job's run time, for queue policies that read one (``sjf``, ``rltune``): its
        items over the throughput the tuner predicts for it on this cluster as leased now. A prediction, not a
        decision: deciding here would move the tuner's exploration draws and decide the job twice. None when the
        policy ignores run times, the job has no item count, or there is no prediction."""
        if not self.queue_policy.uses_runtime or not job.items or self.expect is None:
            return None
        try:
            predicted = self.expect(job, self._cluster())
        except (ConfigError, DataError, LookupError, ValueError):
            return None
        thr = predicted.throughput_items_per_s if predicted is not None else 0.0
        return min(max(job.items / thr, 1e-3), 1e8) if thr > 0 else None

    def _admit(self, now: float) -> dict[str, str]:
        """Grant, in the queue policy's order, every waiting job that fits now; returns why the others wait."""
        why: dict[str, str] = {}
        if not self.waiting or not self._open_pools():  # the usual case with a long queue: nothing to order
            return why
        for job_id in self._order(now):
            open_pools = self._open_pools()
            if not open_pools:  # granting only fills pools: nobody further down the order fits either
                break
            w = self.waiting.get(job_id)
            if w is None:
                continue
            decision = w.decision
            if decision is None:
                try:
                    decision = self.decide(w.job, self._cluster(open_pools))
                except (ConfigError, DataError, LookupError, ValueError) as e:  # e.g. no variant fits any open pool
                    why[job_id] = str(e)[:500]
                    continue
            device = self._device_for(decision, open_pools)
            if device is None:
                why[job_id] = f"pool {decision.candidate.pool!r} of its decision has no free slot there"
                continue
            pool = decision.candidate.pool
            lease = Lease(job=w.job, decision=decision, pool=pool, device=device, holder=w.holder,
                ttl_s=w.ttl_s, granted_at=now, expires_at=now + w.ttl_s, secret=w.secret)
            self.leases[lease.lease_id] = lease
            del self.waiting[job_id]
        return why

    def _device_for(self, decision: Decision, open_pools: Sequence[Pool]) -> int | None:
        """The device the decision names (its group's, else the pool's first empty one) if it has a free slot."""
        pool = next((p for p in open_pools if p.name == decision.candidate.pool), None)
        if pool is None:
            return None
        used = self._used()
        if decision.group is not None:
            d = decision.group.device
            return d if d < pool.count and used[(pool.name, d)] < pool.slots_per_device else None
        return next((d for d in range(pool.count) if used[(pool.name, d)] == 0), None)

    # -- durability --------------------------------------------------------------------------------------------

    def _save(self) -> None:
        """Log what changed since the last call (one line per lease or waiting job touched)."""
        changes: list[Lease | Waiting | tuple[str, str]] = []
        for k in self.leases.take_touched():
            changes.append(self.leases[k] if k in self.leases else ("drop_lease", k))
        for k in self.waiting.take_touched():
            changes.append(self.waiting[k] if k in self.waiting else ("drop_waiting", k))
        self.store.record(changes, len(self.leases) + len(self.waiting),
                          lambda: (self.leases.values(), self.waiting.values()))

    def _load(self) -> None:
        stored = self.store.load()
        if stored is None:
            return
        leases, waiting = stored
        # A pool that left the inventory takes its leases with it.
        self.leases = Tracked({l.lease_id: l for l in leases if l.pool in self.pools})
        self.waiting = Tracked({w.job.job_id: w for w in waiting})
        self.store.save(self.leases.values(), self.waiting.values())  # a fresh snapshot, an empty log
        if self._expire(self.clock()):
            self._save()
        log.info("lease book %s: %d lease(s), %d waiting", self.store.path, len(self.leases), len(self.waiting))

