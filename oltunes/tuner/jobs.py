"""What the tuner remembers per running job: its measured busy share (how it loads co-runners) and its bursts.

* **load** — the busy share of its device a job kept in its last measurement (``Measurement.gpu_util``), with the
  configuration it ran: a co-runner check reads it while the job still runs that configuration.
* **bursts** — a streaming job's queueing beyond the batch model: the excess ``request p99 - batch p99 -
  batch-fill wait`` times the measured throughput is the backlog in *requests* a burst of its arrivals builds up,
  which carries over to another configuration as ``backlog / its throughput``. Clumps of simultaneous requests in
  real traces make this far larger than a Poisson (Kingman) estimate at low utilisation.

Both are bounded (oldest job forgotten first) so that a long-running service does not grow without end.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from oltunes.percentile import quantiles
from oltunes.tuner.decide.candidates import fill_wait_ms
from oltunes.types import Measurement

__all__ = ["JobMemory"]

BURST_WINDOW = 12  # request-level measurements kept per streaming job (a minute at 5 s intervals)
BURST_Q = 0.9  # quantile of those the queueing check uses
MAX_JOBS = 10_000  # jobs remembered


def _bounded_put(d: dict, key: str, value: Any) -> None:
    if key not in d and len(d) >= MAX_JOBS:
        del d[next(iter(d))]
    d[key] = value


class JobMemory:
    """Per-job loads and burst backlogs (module docstring)."""

    def __init__(self) -> None:
        self.bursts: dict[str, deque[float]] = {}
        self._burst_q: dict[str, float] = {}  # each job's quantile, kept until its next measurement (per decision)
        self.loads: dict[str, tuple[str, float]] = {}  # job id -> (configuration key, busy share)

    def learn(self, m: Measurement) -> None:
        if m.gpu_util is not None:
            _bounded_put(self.loads, m.job_id, (m.candidate.key, float(m.gpu_util)))
        if (m.kind != "streaming" or m.request_latency_p99_ms is None or m.throughput_items_per_s <= 0
                or m.latency_p99_ms <= 0):
            return
        fill = float(fill_wait_ms(float(m.candidate.batch_size), m.arrival_rate_rps))
        excess_ms = max(0.0, m.request_latency_p99_ms - m.latency_p99_ms - fill)
        d = self.bursts.get(m.job_id)
        if d is None:
            d = deque(maxlen=BURST_WINDOW)
            _bounded_put(self.bursts, m.job_id, d)
        d.append(excess_ms / 1000.0 * m.throughput_items_per_s)
        self._burst_q.pop(m.job_id, None)

    def burst(self, job_id: str) -> float | None:
        """Learned backlog (requests) of a streaming job's bursts, or None before its first request-level
        measurement (then only the Kingman term models queueing)."""
        d = self.bursts.get(job_id)
        if not d:
            return None
        q = self._burst_q.get(job_id)
        if q is None:
            if len(self._burst_q) >= MAX_JOBS:
                self._burst_q.clear()
            q = self._burst_q[job_id] = quantiles(d, (BURST_Q,))[0]  # np.quantile's, without its set-up
        return q

    def state_dict(self) -> dict[str, Any]:
        return {"bursts": {k: list(v) for k, v in self.bursts.items()},
                "loads": {k: list(v) for k, v in self.loads.items()}}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        # both absent in states saved before they existed
        self.bursts = {str(k): deque((float(x) for x in v), maxlen=BURST_WINDOW) for k, v in d.get("bursts", {}).items()}
        self._burst_q = {}
        self.loads = {str(k): (str(v[0]), float(v[1])) for k, v in d.get("loads", {}).items()}
