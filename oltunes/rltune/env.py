"""The batch-queue environment: gang-scheduled multi-GPU jobs arriving over time on node pools.

At every decision the queue policy picks one visible job (the 128 oldest waiting). If it fits, the mapper places it
at once; if not, it holds a reservation (EASY backfilling, as the paper's environment) and the next decisions are
backfill decisions: the policy picks among the waiting jobs that fit now and end (by their requested run time)
before the reservation, so they never delay it (``candidates``, the action mask). Time moves on through completions
and arrivals when there is nothing to decide. So the policy orders the backfilled jobs too, not only the head of
the queue (on a busy cluster most jobs start by backfilling). A job starts exactly once, on GPUs of one allowed
pool, and runs its trace run time; the environment is deterministic for a sequence, a policy and a mapper.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from oltunes.errors import ConfigError
from oltunes.rltune.cluster import NodeState
from oltunes.rltune.features import MAX_VISIBLE, QueueView
from oltunes.rltune.mapper import Mapper, fits
from oltunes.rltune.traces import Trace


@dataclass
class Outcome:
    """Per job: start, finish, pool and node allocation."""

    seq: Trace
    start: np.ndarray
    finish: np.ndarray
    pool: np.ndarray
    alloc: list[dict[int, int]]
    decisions: int


class BatchQueueEnv:
    def __init__(self, seq: Trace, mapper: Mapper, max_visible: int = MAX_VISIBLE,
                 wait_weight: np.ndarray | None = None) -> None:
        self.seq, self.mapper, self.max_visible = seq, mapper, max_visible
        # waiting cost accrued so far: sum over jobs of weight x time spent waiting (a dense training signal)
        self.wait_weight = np.zeros(len(seq)) if wait_weight is None else np.asarray(wait_weight, float)
        self.waiting_cost = 0.0
        self._held: int | None = None  # the chosen job while it waits for its reservation
        self._reserved = np.inf  # when the held job starts at the latest
        self.state = NodeState(seq.shape)
        n = len(seq)
        self.start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.pool = np.full(n, -1)
        self.alloc: list[dict[int, int]] = [{} for _ in range(n)]
        self.queue: list[int] = []
        self.running: list[tuple[float, int]] = []  # heap of (end, job)
        self.usage: dict[int, float] = defaultdict(float)  # finished GPU-seconds per group
        self.now = 0.0
        self.next_arrival = 0
        self.decisions = 0
        self._advance()

    # ------------------------------------------------------------------ observation
    @property
    def done(self) -> bool:
        return self.next_arrival >= len(self.seq) and not self.queue and self._held is None

    def visible(self) -> np.ndarray:
        return np.array(self.queue[: self.max_visible], dtype=int)

    def candidates(self) -> np.ndarray:
        """Action mask over the visible jobs: all of them, or while a job holds a reservation, those that fit now
        and end before it."""
        vis = self.visible()
        if self._held is None:
            return np.ones(len(vis), bool)
        s = self.seq
        fit = (s.allowed[vis] & (self.state.pool_free()[None, :] >= s.gpus[vis, None])).any(axis=1)
        return fit & (self.now + s.duration[vis] <= self._reserved)

    def view(self, candidates: np.ndarray | None = None) -> QueueView:
        """What the queue policy sees now; `candidates` is ``candidates()`` when the caller has it already."""
        s, vis = self.seq, self.visible()
        run = np.array([j for _, j in self.running], dtype=int)
        usage = dict(self.usage)
        if len(run):  # attained service includes what running jobs have had so far
            so_far = np.bincount(s.group[run], weights=s.gpus[run] * (self.now - self.start[run]))
            for g in np.flatnonzero(so_far):
                usage[int(g)] = usage.get(int(g), 0.0) + float(so_far[g])
        return QueueView(
            now=self.now, submit=s.submit[vis], gpus=s.gpus[vis], duration=s.duration[vis], group=s.group[vis],
            allowed=s.allowed[vis], state=self.state,
            running_end=self.finish[run] if len(run) else np.zeros(0),
            running_pool=self.pool[run] if len(run) else np.zeros(0, int),
            running_gpus=s.gpus[run] if len(run) else np.zeros(0, int),
            group_usage=usage, candidates=self.candidates() if candidates is None else candidates,
        )

    # ------------------------------------------------------------------ transitions
    def choose(self, index: int, mask: np.ndarray | None = None) -> None:
        """Start the `index`-th visible job (or hold it for a reservation when it does not fit), then move on to the
        next decision. `mask` is ``candidates()`` when the caller has it already."""
        mask = self.candidates() if mask is None else mask
        if self.done or not 0 <= index < len(mask) or not mask[index]:
            raise ConfigError(f"action {index}: not a candidate job")
        j = self.queue.pop(index)
        self.decisions += 1
        s = self.seq
        if self._held is None and not fits(self.state, int(s.gpus[j]), s.allowed[j]):
            # run times are the requested times, so backfilled jobs (which end before it) and completions never
            # move the reservation: it is computed once
            self._held, self._reserved = j, self._reservation(j)
        else:
            self._start(j)
        self._advance()

    def run(self, policy) -> Outcome:
        """Play the whole sequence with a :class:`QueuePolicy`."""
        while not self.done:
            view = self.view()
            self.choose(policy.choose(view), view.candidates)
        return self.outcome()

    def outcome(self) -> Outcome:
        return Outcome(self.seq, self.start, self.finish, self.pool, self.alloc, self.decisions)

    def _start(self, j: int) -> None:
        s = self.seq
        alloc = self.mapper.place(self.state, int(s.gpus[j]), s.allowed[j])
        if alloc is None:
            raise ConfigError(f"job {j}: mapper found no placement although the job fits")
        self.state.take(alloc)
        self.alloc[j] = alloc
        self.pool[j] = int(self.state.node_pool[next(iter(alloc))])
        self.start[j] = self.now
        self.finish[j] = self.now + s.duration[j]
        heapq.heappush(self.running, (self.finish[j], j))

    def _reservation(self, j: int) -> float:
        """Earliest time job j fits if the running jobs end as requested (new arrivals ignored)."""
        s = self.seq
        free = self.state.pool_free().copy()
        for end, k in sorted(self.running):
            free[self.pool[k]] += s.gpus[k]
            if np.any(s.allowed[j] & (free >= s.gpus[j])):
                return end
        raise ConfigError(f"job {j} fits no allowed pool even on an empty cluster")

    def _event(self) -> None:
        """Move time to the next completion or arrival (completions first on ties) and apply it."""
        s = self.seq
        t_arr = s.submit[self.next_arrival] if self.next_arrival < len(s) else np.inf
        t_end = self.running[0][0] if self.running else np.inf
        if t_end == np.inf and t_arr == np.inf:
            raise ConfigError("nothing left to happen while a job is waiting")
        t = min(t_end, t_arr)
        if t > self.now and self.wait_weight.any():
            w = self.wait_weight[self.queue].sum() + (self.wait_weight[self._held] if self._held is not None else 0.0)
            self.waiting_cost += w * (t - self.now)
        if t_end <= t_arr:
            self.now, k = heapq.heappop(self.running)
            self.state.give(self.alloc[k])
            self.usage[int(s.group[k])] += s.gpus[k] * s.duration[k]
        else:
            self.now = max(self.now, t_arr)
            self.queue.append(self.next_arrival)
            self.next_arrival += 1

    def _advance(self) -> None:
        """Apply events until a decision is due or the sequence is over (then drain the running jobs)."""
        s = self.seq
        while True:
            # arrivals at the same instant join the queue before any decision
            while self.next_arrival < len(s) and s.submit[self.next_arrival] <= self.now:
                self._event()
            if self._held is not None:
                h = self._held
                if fits(self.state, int(s.gpus[h]), s.allowed[h]):
                    self._held = None
                    self._start(h)
                    continue
                if self.queue and self.candidates().any():
                    return
            elif self.queue:
                return
            elif self.next_arrival >= len(s):
                while self.running:
                    self._event()
                return
            self._event()
