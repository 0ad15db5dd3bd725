"""The Tuner: ask (``decide``) / tell (``observe``) over an FM-FTML performance model.

A decision runs five small parts, one module each, over every candidate at once (steps 1-4 score the grid:
``evaluation.Evaluator``; step 5 chooses from it):

1. **candidates** (``candidates.placement_options``): per pool, the first empty device and the fullest device with
   a free slot (and a re-tuned job's current device), read from the cluster's ``oltunes.occupancy.Occupancy``. Grid =
   options x variants of the job's family x batch sizes x concurrencies.
2. **estimate** (``estimate.Estimator``): prior x learned FM correction for latency, energy and throughput, with
   margins from recent errors and from how often each (accelerator, variant) was measured.
3. **constraints** (``constraints``): memory, accuracy floor, latency SLO, throughput, co-runners' SLOs — each a
   mask plus the words for what it rules out.
4. **objectives** (``objectives``, registered by name): energy per item, completion time, cost per item.
5. **selection** (``selection.Selector``): choose, explore, stay, or fall back to the least violating; then the
   **decision** (``decision.DecisionBuilder``): its source, its co-location group and the explanation
   (``explain``): runner-ups and a note.

Conventions callers rely on:

* ``Decision.group`` is set when the job joins a device that already runs jobs (members = those jobs + this
  one, with predicted slowdowns) or stays on its current device (``current=``); ``group=None`` means the
  pool's lowest-numbered empty device (the explanation note names the device either way).
  ``Decision.candidate.co_runners`` lists who shares it.
* Throughput is the job's total (all ``concurrency`` in-flight batches), latency is per batch; a placed
  job seen as a co-runner keeps the busy share last measured for it (``Measurement.gpu_util``, same
  configuration), else for a streaming job its rate over the prior's throughput, else 1
  (``Estimator.load_of``).
* ``observe`` is exactly-once per ``measurement_id``; ``replay`` feeds history through it.
* The object is thread-safe (one lock): the HTTP service may call it from several threads.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from itertools import compress
from pathlib import Path
from typing import Any

import numpy as np

from oltunes.errors import ConfigError, DataError
from oltunes.jsonstate import rng_state, set_rng_state
from oltunes.learner.features import JobContext, job_context
from oltunes.learner.fm_state import DEFAULT_LR
from oltunes.tuner.catalogue import Catalogue
from oltunes.tuner.decide.constraints import build_constraints
from oltunes.tuner.decide.decision import DecisionBuilder
from oltunes.tuner.model.estimate import EN, LAT, TARGETS, THR, Estimator
from oltunes.tuner.decide.evaluation import Evaluator
from oltunes.tuner.decide.grouping import plan_groups
from oltunes.tuner.model.prior import Prior
from oltunes.service.seen import SeenIds
from oltunes.tuner.decide.selection import Selector
from oltunes.tuner.state import STATE_FORMAT, STATE_VERSION, check_envelope, read_state, write_state
from oltunes.types import (
    Candidate,
    ClusterState,
    ColocationGroup,
    CoRunner,
    Decision,
    JobSpec,
    Measurement,
    Placement,
    Prediction,
    Variant,
)

__all__ = ["Tuner", "TARGETS"]

_CONFIG = ("seed", "n_factors", "lr", "explore_rate", "explore_slack", "margin_quantile", "throughput_headroom",
           "near_equal", "stay_tolerance", "burstiness", "novelty", "crowding", "saturated_util")
# Switches retired (each compared a variant of the model; what they compared is in git history). A state file saved
# with them still loads: their values are ignored, and the tuner runs as it now always does (full-batch prior, pooled
# correction, capacity implied by the p99 batch latency; the FM keeps the replay settings saved in its own state).
_RETIRED = ("partial_batches", "learner_replay", "pooled_correction", "implied_throughput")


class Tuner:
    """Online tuner: decides (pool, variant, batch size, concurrency, co-running group) per job.

    Parameters
    ----------
    variants
        The variant catalogue (extend later with :meth:`add_variants`).
    batch_sizes, concurrencies
        The grid of settings considered for every variant.
    prior
        Cold-start prior (``Prior.make("heuristic")`` by default; ``Prior.make("profile", rows=...)`` for a
        user-supplied profile table).
    seed
        Seeds the FM's initialisation and the exploration draws (decisions are reproducible).
    n_factors, lr
        FM latent dimension and FTML step size.
    explore_rate, explore_slack
        Initial exploration probability (decays as ``20 / (20 + n_observed)``); exploration only picks
        candidates whose objective is within ``1 + explore_slack`` of the best.
    margin_quantile
        Quantile of recent |log errors| used as the safety margin.
    throughput_headroom
        Streaming jobs need pessimistic throughput >= arrival rate x this.
    near_equal
        Relative objective band in which fragmentation decides.
    burstiness
        Squared coefficient of variation of streaming inter-arrival times assumed by the p99 queueing-delay
        term (``candidates.queue_wait_ms``; 1 = Poisson). ``None`` leaves queueing out. 2.0 cut request SLO
        violations by 2-5 points in each shipped simulator scenario tried (light, bursty, heterogeneous-heavy).
    novelty
        Extra log latency margin for an (accelerator, variant) pair never measured, decaying as
        ``novelty / sqrt(1 + measurements)``: feasibility trusts measured configurations more than ones the FM
        only extrapolates to (the FM's variant features are silent until a variant is measured). 0.5 was the
        best of {0, 0.25, 0.5, 1} on the simulator's light / bursty / heterogeneous-heavy scenarios (mean
        request SLO violations 0.466 / 0.439 / 0.428 / 0.439).
    saturated_util
        A streaming measurement teaches the throughput target only when the job kept its device at least this
        busy (``Measurement.gpu_util``): below it, items/s is the arrival rate at partial batches, not the
        capacity the throughput target means, and learning it inflated throughput margins to x2-x8.
    crowding
        Only when nothing is feasible: penalty (in units of relative SLO overshoot) per job already on a
        device, so that the least-violating fallback spreads instead of packing.
    stay_tolerance
        When re-tuning a running job (``decide(..., current=...)``), keep its placement while its objective
        is within this fraction of the best.

    Examples
    --------
    >>> from oltunes.inventory import CATALOG
    >>> from oltunes.types import ClusterState, JobSpec, Pool, Variant
    >>> from oltunes.tuner import Tuner
    >>> variants = [Variant(family="cnn", name=f"cnn-{s}", size=s, accuracy=a, params=p)
    ...             for s, a, p in (("s", 0.70, 5_000_000), ("l", 0.80, 60_000_000))]
    >>> tuner = Tuner(variants, seed=0, explore_rate=0.0)
    >>> cluster = ClusterState(pools=[Pool(name="t4", accelerator=CATALOG["t4"], count=2),
    ...                               Pool(name="cpu", accelerator=CATALOG["cpu"], count=1)])
    >>> d = tuner.decide(JobSpec(family="cnn", slo_ms=200, accuracy_floor=0.75, items=1000), cluster)
    >>> d.feasible, d.candidate.variant.name, d.source
    (True, 'cnn-l', 'prior')
    """

    def __init__(self, variants: Sequence[Variant], *, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16),
                 concurrencies: Sequence[int] = (1, 2, 3, 4), prior: Prior | None = None, seed: int = 0,
                 n_factors: int = 8, lr: float = DEFAULT_LR, explore_rate: float = 0.2, explore_slack: float = 0.5,
                 margin_quantile: float = 0.95, throughput_headroom: float = 1.2,
                 near_equal: float = 0.02, stay_tolerance: float = 0.1, burstiness: float | None = 2.0,
                 novelty: float = 0.5, crowding: float = 0.25, saturated_util: float = 0.8) -> None:
        self._lock = threading.RLock()  # the service may call from several threads
        self.batch_sizes = self._positive_ints(batch_sizes, "batch_sizes")
        self.concurrencies = self._positive_ints(concurrencies, "concurrencies")
        for name, v, lo in (("lr", lr, 0.0), ("explore_slack", explore_slack, -1e-12),
                            ("throughput_headroom", throughput_headroom, 0.0), ("near_equal", near_equal, -1e-12),
                            ("stay_tolerance", stay_tolerance, -1e-12)):
            if not v > lo:
                raise ConfigError(f"Tuner: {name} must be > {max(lo, 0)}, got {v}")
        if not 0.0 <= explore_rate <= 1.0:
            raise ConfigError(f"Tuner: explore_rate must be in [0, 1], got {explore_rate}")
        if burstiness is not None and not burstiness >= 0:
            raise ConfigError(f"Tuner: burstiness must be >= 0 (or None), got {burstiness}")
        if not 0.5 <= margin_quantile < 1.0:
            raise ConfigError(f"Tuner: margin_quantile must be in [0.5, 1), got {margin_quantile}")
        self.prior = prior if prior is not None else Prior.make("heuristic")
        self.seed, self.n_factors, self.lr = seed, n_factors, lr
        self.explore_rate, self.explore_slack = explore_rate, explore_slack
        self.margin_quantile = margin_quantile
        self.throughput_headroom = throughput_headroom
        self.near_equal, self.stay_tolerance, self.crowding = near_equal, stay_tolerance, crowding
        self.burstiness, self.novelty = burstiness, novelty
        self.saturated_util = saturated_util

        self.catalogue = Catalogue(variants)
        self.estimator = Estimator(
            self.catalogue, self.prior, batch_sizes=self.batch_sizes, concurrencies=self.concurrencies, seed=seed,
            n_factors=n_factors, lr=lr, margin_quantile=margin_quantile, novelty=novelty, burstiness=burstiness,
            saturated_util=saturated_util)
        self.constraints = build_constraints(self.estimator, throughput_headroom)
        self.selector = Selector(near_equal=near_equal, stay_tolerance=stay_tolerance, explore_rate=explore_rate,
                                 explore_slack=explore_slack, crowding=crowding,
                                 throughput_headroom=throughput_headroom)
        self.n_observed = 0
        self._seen = SeenIds()  # bounded: see oltunes.service.seen
        self._rng = np.random.default_rng(seed)
        self._evaluator = Evaluator(self.catalogue, self.estimator, self.constraints)
        self._decisions = DecisionBuilder(self.estimator, selector=self.selector)

    # ------------------------------------------------------------------------------------------------ catalogue
    @staticmethod
    def _positive_ints(xs: Sequence[int], name: str) -> tuple[int, ...]:
        out = tuple(sorted({int(x) for x in xs}))
        if not out or out[0] < 1:
            raise ConfigError(f"Tuner: {name} must be a non-empty list of integers >= 1, got {list(xs)}")
        return out

    @property
    def variants(self) -> list[Variant]:
        return self.catalogue.variants

    def add_variants(self, variants: Iterable[Variant]) -> int:
        """Add variants to the catalogue (a variant with a known name replaces it). Returns how many."""
        with self._lock:
            return self.catalogue.add(variants)

    def families(self) -> list[str]:
        return self.catalogue.families()

    # ------------------------------------------------------------------------------------------------ predict
    def predict(self, job: JobSpec | JobContext, candidates: Sequence[Candidate]) -> list[Prediction]:
        """Predicted metrics (and latency margin) for explicit candidates."""
        if not candidates:
            return []
        ctx = job_context(job)
        with self._lock:
            lp = self.estimator.predict_log([ctx] * len(candidates), candidates)
            out = []
            for c, row in zip(candidates, lp):
                lat = math.exp(row[LAT])
                out.append(Prediction.clamped(lat, math.exp(row[EN]), math.exp(row[THR]),
                                              lat * (math.exp(self.estimator.latency_margin(c)) - 1.0)))
            return out

    # ------------------------------------------------------------------------------------------------ observe
    def observe(self, m: Measurement) -> bool:
        """Learn from one measurement. False (and no change) if its ``measurement_id`` was already observed."""
        return self.observe_many([m]) == [True]

    def observe_many(self, ms: Sequence[Measurement]) -> list[bool]:
        """Learn from several measurements at once (``Estimator.learn_many``: the pooled correction is fitted once
        for all of them); per measurement, False if its ``measurement_id`` was already observed (or repeats one
        before it in ``ms``)."""
        with self._lock:
            accepted = self._seen.fresh(ms)
            new = list(compress(ms, accepted))
            if new:
                self.estimator.learn_many(new)
                self.n_observed += len(new)
                for m in new:
                    self._seen.add(m)
            return accepted

    def has_seen(self, measurement_id: str) -> bool:
        """Whether this id was observed (among the ids remembered, see `oltunes.service.seen`)."""
        with self._lock:
            return measurement_id in self._seen

    def replay(self, measurements: Iterable[Measurement]) -> int:
        """Rebuild from history (e.g. MLflow runs, oldest first); returns how many were new."""
        return sum(1 for m in measurements if self.observe(m))

    def burst(self, job_id: str) -> float | None:
        """Learned backlog (requests) of a streaming job's bursts (``Estimator.burst``)."""
        return self.estimator.burst(job_id)

    @property
    def loads(self) -> dict[str, tuple[str, float]]:
        """job id -> (configuration key, measured busy share of its device)."""
        return self.estimator.jobs.loads

    # ------------------------------------------------------------------------------------------------ decide
    def decide(self, job: JobSpec, cluster: ClusterState, current: Placement | None = None) -> Decision:
        """Best candidate for ``job`` on ``cluster`` (never raises for an infeasible job: see ``feasible``).

        ``current`` (re-tuning a running job): where it runs now. Staying is preferred while it is feasible and
        its objective is within ``stay_tolerance`` of the best — a move costs a model load and a cold start.
        A stay keeps the device (``Decision.group`` names it). If ``cluster`` still lists the job, that entry
        is ignored (its slot is the job's own).
        """
        with self._lock:
            est, verdict, objective, obj = self._evaluator.evaluate(job, cluster, current)
            choice = self.selector.select(est, verdict, objective, obj, current, self.n_observed, self._rng)
            return self._decisions.build(est, verdict, objective, obj, choice)

    def expect(self, job: JobSpec, cluster: ClusterState) -> Prediction:
        """What the job is predicted to do where :meth:`decide` would put it, without deciding: the choice with
        no exploration, so no random number is drawn and nothing is recorded (e.g. a queue policy's run-time
        estimate for a job still waiting, which is decided for real only when it is granted)."""
        with self._lock:
            est, verdict, objective, obj = self._evaluator.evaluate(job, cluster, None)
            sel = self.selector
            idx = (sel.choose(est, verdict.feasible, objective, obj) if verdict.n_feasible
                   else sel.least_violating(est, verdict, obj)[0])
            return est.prediction(idx)

    # ------------------------------------------------------------------------------------------------ groups
    def groups(self, cluster: ClusterState, pool: str) -> list[ColocationGroup]:
        """Which of the jobs on ``pool`` may share a device (every member inside its SLO), see ``grouping``."""
        with self._lock:
            p = cluster.pool(pool)
            return plan_groups(p, cluster.jobs_on(pool), self._member_latency, self.estimator.load_of)

    def _member_latency(self, pool_name: str, member: Placement, co: Sequence[CoRunner]) -> tuple[float, float]:
        """(mean, pessimistic) p99 ms of a placed job with the given co-runners on its device."""
        cand = member.candidate.model_copy(update={"co_runners": tuple(co), "pool": pool_name})
        lp = self.estimator.predict_log([job_context(member)], [cand])[0, LAT]
        return math.exp(lp), math.exp(lp + self.estimator.latency_margin(cand))

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore this tuner, as plain JSON types."""
        with self._lock:
            return {
                "format": STATE_FORMAT, "version": STATE_VERSION,
                "config": {"batch_sizes": list(self.batch_sizes), "concurrencies": list(self.concurrencies),
                           **{k: getattr(self, k) for k in _CONFIG}},
                "prior": self.prior.to_dict(),
                "variants": [v.model_dump() for v in self.variants],
                **self.estimator.state_dict(),
                "n_observed": self.n_observed,
                "seen": self._seen.state_dict(),
                "rng": rng_state(self._rng),
            }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> Tuner:
        check_envelope(d)
        try:
            t = cls([Variant.model_validate(v) for v in d["variants"]], prior=Prior.from_dict(d["prior"]),
                    **_current_config(d["config"]))
            t.estimator.load_state_dict(d)
            t.n_observed = int(d["n_observed"])
            t._seen = SeenIds.from_state_dict(d["seen"])
            set_rng_state(t._rng, d["rng"])
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"tuner state is malformed ({type(e).__name__}: {e}); delete it to start fresh") from e
        return t

    def save(self, path: str | Path) -> Path:
        """Write the state as JSON, atomically (temp file + rename); refused if it holds a non-finite number."""
        return write_state(path, self.state_dict())

    @classmethod
    def load(cls, path: str | Path) -> Tuner:
        return cls.from_state_dict(read_state(path))


def _current_config(config: dict[str, Any]) -> dict[str, Any]:
    """A saved tuner's settings less the retired switches (``_RETIRED``)."""
    return {k: v for k, v in config.items() if k not in _RETIRED}
