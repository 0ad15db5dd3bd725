"""The Tuner: ask (``recommend``) / tell (``observe``) over an FM-FTML performance model.

How a recommendation is made (all candidates in one vectorised pass):

1. Placement options (``candidates.placement_options``): per pool, the first empty device and the fullest
   device with a free slot. Grid = options x variants of the job's family x batch sizes x concurrencies.
2. Prediction: ``log metric = log prior + FM residual`` for log p99 latency per batch, log energy per item,
   log throughput. The FM is scored over the grid by combining per-part sums of its parameters
   (``MultiFMRegressor.raw_grid``), the prior's base table is cached per (accelerator, family).
3. Margin: pessimistic latency = latency x exp(m), m = rolling 95th percentile of |log error| of recent
   predictions for that (accelerator type, family), shrunk towards the accelerator's, in turn shrunk towards
   the prior's own margin while there are few (``ResidualQuantiles``), plus ``novelty / sqrt(1 + n)`` for an
   (accelerator, variant) pair measured n times. Throughput is discounted by its own residual quantile
   (learned from batch jobs and saturated streams only: see ``saturated_util``).
4. Feasible = fits memory and slots, variant accuracy >= floor, pessimistic p99 (+ for streaming the
   batch-fill wait ``min(1000 (b-1) / rate, 5 ms)`` and a p99 queueing delay: the larger of Kingman's
   estimate from the utilisation ``rate / throughput`` (``candidates.fill_wait_ms`` / ``queue_wait_ms``)
   and, once the job has reported ``Measurement.request_latency_p99_ms``, its learned burst backlog
   drained at the candidate's throughput, see ``observe``) <= SLO, streaming: pessimistic throughput >=
   rate x headroom, and for a shared device every job already there keeps its SLO with the newcomer
   (predicted with the FM's co-runner features at the newcomer's own predicted load, ``_LOAD_LEVELS``).
5. Objective: streaming -> energy per item (tie-break cost); batch -> ``job.objective``: energy per item,
   completion time ``items / throughput``, or cost per item. Candidates within ``near_equal`` (2%) of the
   best are ranked by fragmentation (free slots left on the device, then in the pool), then the secondary.
6. Bounded exploration: with probability ``explore_rate x 20 / (20 + n_observed)`` the tuner picks, among
   feasible candidates (pessimistic latency still meets the SLO) whose objective is within
   ``explore_slack`` of the best, the one with the best *optimistic* objective (objective discounted by
   the margin, more for rarely measured accelerator x variant pairs).
7. Nothing feasible: the least-violating candidate (``_least_violating``: fits, accuracy, then smallest
   relative SLO/throughput overshoot, penalised for co-runners it would push past their SLO and per job
   already on the device), ``feasible=False`` and a note naming the constraint.

Conventions callers rely on:

* ``Decision.group`` is set when the job joins a device that already runs jobs (members = those jobs + this
  one, with predicted slowdowns) or stays on its current device (``current=``); ``group=None`` means the
  pool's lowest-numbered empty device (the explanation note names the device either way). ``Decision.candidate.co_runners`` lists who shares it.
* Throughput is the job's total (all ``concurrency`` in-flight batches), latency is per batch; a placed
  job seen as a co-runner keeps the busy share last measured for it (``Measurement.gpu_util``, same
  configuration), else for a streaming job its rate over the prior's throughput, else 1 (``_load_of``).
* ``observe`` is exactly-once per ``measurement_id``; ``replay`` feeds history through it.
* The object is thread-safe (one lock): the HTTP service may call it from several threads.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oltunes.errors import ConfigError, DataError
from oltunes.inventory import CATALOG
from oltunes.learner.features import (
    JobContext,
    batch_features,
    co_runner_features,
    concurrency_features,
    encode,
    job_context,
    job_features,
    placement_features,
    variant_features,
)
from oltunes.learner.fm import DEFAULT_LR, ONLINE_SETTINGS, MultiFMRegressor
from oltunes.learner.ftml import FTML
from oltunes.learner.uncertainty import ResidualQuantiles
from oltunes.tuner.candidates import (
    CoLite,
    PlacementOption,
    co_runner_of,
    fill_wait_ms,
    memory_need_gb,
    placement_options,
    queue_wait_ms,
)
from oltunes.tuner.grouping import plan_groups
from oltunes.tuner.prior import Prior
from oltunes.tuner.seen import SeenIds
from oltunes.tuner.state import STATE_FORMAT, STATE_VERSION, check_envelope, read_state, write_json_atomic
from oltunes.types import (
    Accelerator,
    Alternative,
    Candidate,
    ClusterState,
    ColocationGroup,
    CoRunner,
    Decision,
    Explanation,
    JobSpec,
    Measurement,
    Placement,
    Prediction,
    Variant,
)

__all__ = ["Tuner", "TARGETS"]

TARGETS = ("log_latency", "log_energy", "log_throughput")
_LAT, _EN, _THR = 0, 1, 2
_EXPLORE_N0 = 20.0  # exploration probability halves after this many observations
_MIN_MODEL_OBS = 5  # a region with fewer measurements is still "prior" territory (Decision.source)
_MAX_CACHE = 4096  # memoised index arrays / prior grids / member plans before the memo is reset
# Newcomer loads the co-runner checks are evaluated at: a candidate uses the smallest level >= its predicted
# busy share (rate / throughput; batch jobs run flat out, level 1).
_LOAD_LEVELS = np.array([0.25, 0.5, 1.0])
INFEASIBLE_STAY = 0.1  # an infeasible running job moves only if that cuts its graded violation by more
_BURST_WINDOW = 12  # request-level measurements kept per streaming job (a minute at 5 s intervals)
_BURST_Q = 0.9  # quantile of those the queueing check uses
_MAX_BURST_JOBS = 10_000  # streaming jobs remembered (oldest forgotten first)


def _at(mask: np.ndarray, idx: tuple[int, ...]) -> bool:
    """``mask`` (broadcastable to the candidate grid) at grid index ``idx``."""
    return bool(mask[tuple(i if n > 1 else 0 for i, n in zip(idx, mask.shape))])


def _load_level(busy: Any) -> Any:
    """Index into ``_LOAD_LEVELS`` of the level a newcomer with this busy share is checked at."""
    return np.minimum(np.searchsorted(_LOAD_LEVELS, busy), len(_LOAD_LEVELS) - 1)


def _stream_rate(ctx: JobContext, partial_batches: bool) -> float:
    """The request rate that shapes dynamic batching in the prior (0: full batches; always 0 for batch jobs)."""
    return ctx.arrival_rate_rps if partial_batches and ctx.kind == "streaming" else 0.0


class Tuner:
    """Online tuner: recommends (pool, variant, batch size, concurrency, co-running group) per job.

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
    partial_batches
        Streaming priors: True = latency and energy of the partial batch dynamic batching forms at the job's
        *mean* rate (``Prior.adjust``); False (default) = of a full batch of the configured size. Real arrival
        traces come in clumps that fill batches, and a p99 is set by those: on the simulator's light / bursty /
        heterogeneous-heavy / overloaded scenarios (3 seeds each, ``oltunes-profiled``) False together with
        ``saturated_util`` cut the mean request SLO violation rate from 0.393 to 0.353, at lower energy.
    saturated_util
        A streaming measurement teaches the throughput target only when the job kept its device at least this
        busy (``Measurement.gpu_util``): below it, items/s is the arrival rate at partial batches, not the
        capacity the throughput target means, and learning it inflated throughput margins to x2-x8.
    learner_replay
        Train the FM with ``oltunes.learner.fm.ONLINE_SETTINGS`` (bounded replay of recent observations, robust
        and standardised targets). It cuts held-out latency error on the Proteus profiles (benchmarks
        ``learner_accuracy``: 87% -> 30% MAPE with the same features) but, side by side on the simulator
        (light / bursty / heterogeneous-heavy, 2 seeds each), it raised mean request SLO violations of
        ``oltunes`` from 0.38 to 0.43 and of ``oltunes-profiled`` from 0.20 to 0.23, at half the observe rate:
        off by default until that is understood.
    crowding
        Only when nothing is feasible: penalty (in units of relative SLO overshoot) per job already on a
        device, so that the least-violating fallback spreads instead of packing.
    stay_tolerance
        When re-tuning a running job (``recommend(..., current=...)``), keep its placement while its objective
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
    >>> d = tuner.recommend(JobSpec(family="cnn", slo_ms=200, accuracy_floor=0.75, items=1000), cluster)
    >>> d.feasible, d.candidate.variant.name, d.source
    (True, 'cnn-l', 'prior')
    """

    def __init__(self, variants: Sequence[Variant], *, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16),
                 concurrencies: Sequence[int] = (1, 2, 3, 4), prior: Prior | None = None, seed: int = 0,
                 n_factors: int = 8, lr: float = DEFAULT_LR, explore_rate: float = 0.2, explore_slack: float = 0.5,
                 margin_quantile: float = 0.95, throughput_headroom: float = 1.2,
                 near_equal: float = 0.02, stay_tolerance: float = 0.1, burstiness: float | None = 2.0,
                 novelty: float = 0.5, crowding: float = 0.25, partial_batches: bool = False,
                 saturated_util: float = 0.8, learner_replay: bool = False) -> None:
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
        self.seed = seed
        self.n_factors = n_factors
        self.lr = lr
        self.explore_rate = explore_rate
        self.explore_slack = explore_slack
        self.margin_quantile = margin_quantile
        self.throughput_headroom = throughput_headroom
        self.near_equal = near_equal
        self.stay_tolerance = stay_tolerance
        self.burstiness = burstiness
        self.novelty = novelty
        self.crowding = crowding
        self.partial_batches = partial_batches
        self.saturated_util = saturated_util
        self.learner_replay = learner_replay

        self.variants: list[Variant] = []
        self._by_family: dict[str, list[Variant]] = {}
        self._variants_version = 0
        self.add_variants(variants)

        # l2_latent 1e-2 (not the FM's 1e-4): on long streams where many features are always on, weaker
        # regularisation let the interaction terms fall into bursts of oscillation (|log error| > 1 for tens of
        # steps) that inflate the safety margins; 1e-2 kept every seed of tests/tuner's trainer below 0.25.
        self.model = MultiFMRegressor(targets=TARGETS, n_factors=n_factors, weight_optimizer=FTML(lr=lr),
                                      latent_optimizer=FTML(lr=lr), l2_latent=1e-2, seed=seed,
                                      **(ONLINE_SETTINGS if learner_replay else {}))
        self.residuals = {t: ResidualQuantiles(q=margin_quantile) for t in TARGETS}
        self.visits: dict[str, int] = {}  # "accelerator/variant" -> measurements
        # streaming job id -> recent "burst sizes" (requests queued beyond the batch model, see observe)
        self.bursts: dict[str, deque[float]] = {}
        # job id -> (where and how it ran, measured busy share of its device): a co-runner's load
        self.loads: dict[str, tuple[str, float]] = {}
        self.n_observed = 0
        self._seen = SeenIds()  # bounded: see oltunes.tuner.seen
        self._accelerators: dict[str, Accelerator] = dict(CATALOG)
        self._rng = np.random.default_rng(seed)
        self._cache: dict[Any, Any] = {}
        self._cache_key: tuple[int, int] = (-1, -1)
        self._member_memo: dict[tuple, tuple[np.ndarray, dict[str, Any]]] = {}
        self._obs_memo_key: tuple[int, int] = (-1, -1)
        self._obs_memo: dict[str, dict[Any, Any]] = {}

    # ------------------------------------------------------------------------------------------------ catalogue
    @staticmethod
    def _positive_ints(xs: Sequence[int], name: str) -> tuple[int, ...]:
        out = tuple(sorted({int(x) for x in xs}))
        if not out or out[0] < 1:
            raise ConfigError(f"Tuner: {name} must be a non-empty list of integers >= 1, got {list(xs)}")
        return out

    def add_variants(self, variants: Iterable[Variant]) -> int:
        """Add variants to the catalogue (a variant with a known name replaces it). Returns how many."""
        n = 0
        with self._lock:
            by_name = {v.name: i for i, v in enumerate(self.variants)}
            for v in variants:
                if not isinstance(v, Variant):
                    raise ConfigError(f"add_variants: expected Variant, got {type(v).__name__}")
                if v.name in by_name:
                    self.variants[by_name[v.name]] = v
                else:
                    by_name[v.name] = len(self.variants)
                    self.variants.append(v)
                n += 1
            self._by_family = {}
            for v in self.variants:
                self._by_family.setdefault(v.family, []).append(v)
            self._variants_version += 1
        return n

    def families(self) -> list[str]:
        return sorted(self._by_family)

    # ------------------------------------------------------------------------------------------------ caches
    def _cached(self, key: Any, build):
        # Index arrays hold FM row numbers and the variant lists: rebuilt when either changes.
        version = (self.model.vocabulary_version, self._variants_version)
        if version != self._cache_key:
            self._cache = {}
            self._cache_key = version
        val = self._cache.get(key)
        if val is None:
            if len(self._cache) >= _MAX_CACHE:  # keys include cluster shapes: bound a long-running service
                self._cache = {}
            val = self._cache[key] = build()
        return val

    def _per_observation(self, name: str) -> dict[Any, Any]:
        """A memo that lives until the next observation or catalogue change (margins, visit counts and loads
        change with either; the grids are shaped by the family's variants)."""
        version = (self.n_observed, self._variants_version)
        if version != self._obs_memo_key:
            self._obs_memo_key, self._obs_memo = version, {}
        return self._obs_memo.setdefault(name, {})

    def _accelerator(self, name: str) -> Accelerator:
        acc = self._accelerators.get(name)
        if acc is None:  # unknown type seen only in a measurement: a mid-range GPU for the prior
            acc = Accelerator(name=name, memory_gb=16, idle_w=30, max_w=250)
        return acc

    def _prior_base(self, acc: Accelerator, variant: Variant, batch: int) -> tuple[float, float]:
        key = ("prior1", acc.name, acc.max_w, variant.name, variant.params, variant.bytes, variant.precision, batch)
        return self._cached(key, lambda: self.prior.base(acc, variant, batch))

    def _prior_log(self, candidate: Candidate, ctx: JobContext) -> np.ndarray:
        """Log prior (latency, energy, throughput) of one candidate for a job (streaming rate matters)."""
        acc = self._accelerator(candidate.accelerator)
        lat, en = self._prior_base(acc, candidate.variant, candidate.batch_size)
        lat1, en1 = self._prior_base(acc, candidate.variant, 1)
        load = sum(c.load for c in candidate.co_runners)
        return np.array(Prior.adjust(lat, en, float(candidate.batch_size), float(candidate.concurrency), load,
                                     lat1, en1, _stream_rate(ctx, self.partial_batches)))

    def _margins(self, accelerator: str, family: str) -> np.ndarray:
        """Log margins (latency, energy, throughput) for a family on an accelerator type.

        Hierarchical shrinkage: the (accelerator, family) residual quantile is pulled towards the accelerator's,
        which is pulled towards the prior's own margin for that family, each in proportion to how few
        residuals back it. Memoised until the next observation.
        """
        memo = self._per_observation("margins")
        key = (accelerator, family)
        m = memo.get(key)
        if m is None:
            pm = self._family_prior_margin(family)
            region = f"{accelerator}/{family}"
            m = memo[key] = np.array([r.margin(region, r.margin(accelerator, pm)) for r in self.residuals.values()])
        return m

    def _latency_margin(self, c: Candidate) -> float:
        """Log latency margin of one candidate: its region's, plus the novelty term of its (accelerator, variant)."""
        visits = self.visits.get(f"{c.accelerator}/{c.variant.name}", 0)
        return float(self._margins(c.accelerator, c.variant.family)[_LAT] + self.novelty / math.sqrt(1.0 + visits))

    def _family_prior_margin(self, family: str) -> float:
        variants = self._by_family.get(family)
        if not variants:
            return self.prior.margin
        return self._cached(("prior_margin", family), lambda: max(self.prior.margin_of(v) for v in variants))

    # ------------------------------------------------------------------------------------------------ predict
    def _predict_log(self, ctxs: Sequence[JobContext], candidates: Sequence[Candidate]) -> np.ndarray:
        xs = [encode(c, cand) for c, cand in zip(ctxs, candidates)]
        rows, vals = self.model.index(xs)
        raw = self.model.predict_many(rows, vals)
        return raw + np.array([self._prior_log(c, x) for x, c in zip(ctxs, candidates)])

    def predict(self, job: JobSpec | JobContext, candidates: Sequence[Candidate]) -> list[Prediction]:
        """Predicted metrics (and latency margin) for explicit candidates."""
        if not candidates:
            return []
        ctx = job_context(job)
        with self._lock:
            lp = self._predict_log([ctx] * len(candidates), candidates)
            out = []
            for c, row in zip(candidates, lp):
                lat = math.exp(row[_LAT])
                out.append(Prediction(latency_p99_ms=lat, energy_j_per_item=math.exp(row[_EN]),
                                      throughput_items_per_s=math.exp(row[_THR]),
                                      margin_ms=lat * (math.exp(self._latency_margin(c)) - 1.0)))
            return out

    # ------------------------------------------------------------------------------------------------ observe
    def observe(self, m: Measurement) -> bool:
        """Learn from one measurement. False (and no change) if its ``measurement_id`` was already observed."""
        with self._lock:
            if self._seen.seen(m):
                return False
            c = m.candidate
            ctx = job_context(m)
            x = encode(ctx, c)
            prior = self._prior_log(c, ctx)
            capacity = m.throughput_items_per_s > 0 and (
                m.kind != "streaming" or (m.gpu_util is not None and m.gpu_util >= self.saturated_util))
            y: dict[str, float | None] = {
                "log_latency": math.log(m.latency_p99_ms) - prior[_LAT] if m.latency_p99_ms > 0 else None,
                "log_energy": math.log(m.energy_j_per_item) - prior[_EN] if m.energy_j_per_item > 0 else None,
                "log_throughput": math.log(m.throughput_items_per_s) - prior[_THR] if capacity else None,
            }
            # Last line of defence (types already refuse NaN/inf): one non-finite value would poison the model.
            bad = [k for k, v in (*x.items(), *y.items()) if v is not None and not math.isfinite(v)]
            if bad:
                raise DataError(f"measurement {m.measurement_id}: non-finite {', '.join(bad)}; not learnt")
            before = self.model.learn_predict_one(x, y)
            for i, t in enumerate(TARGETS):
                if y[t] is not None:
                    self.residuals[t].update(c.accelerator, y[t] - before[i])
                    self.residuals[t].update(f"{c.accelerator}/{c.variant.family}", y[t] - before[i])
            key = f"{c.accelerator}/{c.variant.name}"
            self.visits[key] = self.visits.get(key, 0) + 1
            self._observe_burst(m)
            if m.gpu_util is not None:
                if m.job_id not in self.loads and len(self.loads) >= _MAX_BURST_JOBS:
                    del self.loads[next(iter(self.loads))]
                self.loads[m.job_id] = (c.key, float(m.gpu_util))
            self.n_observed += 1
            self._seen.add(m)
            return True

    def has_seen(self, measurement_id: str) -> bool:
        """Whether ``observe`` would skip this id (already learnt, exactly-once)."""
        with self._lock:
            return measurement_id in self._seen

    def _observe_burst(self, m: Measurement) -> None:
        """Learn a streaming job's queueing beyond the batch model from its request-level p99.

        The excess ``request p99 - batch p99 - batch-fill wait`` is the time the worst requests queued; times
        the measured throughput it is the backlog in *requests* a burst of this job's arrivals builds up,
        which carries over to another configuration as ``backlog / its throughput``. Clumps of simultaneous
        requests in real traces make this far larger than a Poisson (Kingman) estimate at low utilisation.
        """
        if (m.kind != "streaming" or m.request_latency_p99_ms is None or m.throughput_items_per_s <= 0
                or m.latency_p99_ms <= 0):
            return
        fill = float(fill_wait_ms(float(m.candidate.batch_size), m.arrival_rate_rps))
        excess_ms = max(0.0, m.request_latency_p99_ms - m.latency_p99_ms - fill)
        d = self.bursts.get(m.job_id)
        if d is None:
            if len(self.bursts) >= _MAX_BURST_JOBS:
                del self.bursts[next(iter(self.bursts))]
            d = self.bursts[m.job_id] = deque(maxlen=_BURST_WINDOW)
        d.append(excess_ms / 1000.0 * m.throughput_items_per_s)

    def _load_of(self, p: Placement) -> float:
        """Busy share of its device a placed job keeps, as a co-runner sees it: the last measured one while it
        runs the same configuration; else, for a streaming job, its rate over the prior's throughput; batch
        jobs run flat out (1). Rounded to 0.05 so that cached grids are shared between close loads."""
        if p.arrival_rate_rps <= 0:
            return 1.0
        # The same Placement object as last time (a cluster state between two observations): same answer.
        memo = self._per_observation("loads")
        hit = memo.get(p.job_id)
        if hit is not None and hit[0] is p:
            return hit[1]
        seen = self.loads.get(p.job_id)
        if seen is not None and seen[0] == p.candidate.key:
            load = seen[1]
        else:
            c = p.candidate
            load = p.arrival_rate_rps / self._cached(
                ("thr_alone", c.accelerator, c.variant.name, c.batch_size, c.concurrency, p.arrival_rate_rps),
                lambda: math.exp(self._prior_log(c.model_copy(update={"co_runners": ()}), job_context(p))[_THR]))
        load = min(1.0, max(0.05, round(load * 20.0) / 20.0))
        memo[p.job_id] = (p, load)  # holds p, so its id cannot be reused while memoised
        return load

    def burst(self, job_id: str) -> float | None:
        """Learned backlog (requests) of a streaming job's bursts, or None before its first request-level
        measurement (then only the Kingman term models queueing)."""
        d = self.bursts.get(job_id)
        if not d:
            return None
        return float(np.quantile(np.fromiter(d, float, len(d)), _BURST_Q))

    def replay(self, measurements: Iterable[Measurement]) -> int:
        """Rebuild from history (e.g. MLflow runs, oldest first); returns how many were new."""
        return sum(1 for m in measurements if self.observe(m))

    # ------------------------------------------------------------------------------------------------ recommend
    def _part_arrays(self, ctx: JobContext, options: Sequence[PlacementOption], variants: Sequence[Variant]):
        m = self.model
        job = m.index([job_features(ctx)])
        place = self._cached(("place", tuple((o.pool.name, o.pool.accelerator.name, o.co_features) for o in options)),
                             lambda: m.index([placement_features(o.pool.name, o.pool.accelerator.name, o.co_features)
                                              for o in options]))
        var = self._cached(("var", variants[0].family), lambda: m.index([variant_features(v) for v in variants]))
        bat = self._cached(("batch",), lambda: m.index([batch_features(b) for b in self.batch_sizes]))
        con = self._cached(("conc",), lambda: m.index([concurrency_features(c) for c in self.concurrencies]))
        return [job, place, var, bat, con]

    def _prior_grid(self, options: Sequence[PlacementOption], variants: Sequence[Variant],
                    ctx: JobContext) -> np.ndarray:
        """Log prior (3, P, V, B, C), cached per (accelerator, co-load) of the options, family and rate."""
        # The rate only shapes the prior's dynamic-batching estimate: two significant digits are plenty, and
        # let jobs with similar rates share one cached grid.
        rate = float(f"{_stream_rate(ctx, self.partial_batches):.2g}")
        sig = tuple((o.pool.accelerator.name, o.pool.accelerator.max_w, sum(c.load for c in o.co_features))
                    for o in options)
        return self._cached(("prior_grid", variants[0].family, sig, rate),
                            lambda: self._build_prior_grid(options, variants, sig, rate))

    def _build_prior_grid(self, options, variants, sig, rate: float) -> np.ndarray:
        base, lat1, en1 = self._cached(("prior_base", variants[0].family, tuple(x[:2] for x in sig)),
                                       lambda: self._prior_base_grid(options, variants))
        load = np.array([x[2] for x in sig], dtype=float)[:, None, None, None]
        b = np.array(self.batch_sizes, dtype=float)[None, None, :, None]
        c = np.array(self.concurrencies, dtype=float)[None, None, None, :]
        out = np.empty((3, len(options), len(variants), len(self.batch_sizes), len(self.concurrencies)))
        for i, a in enumerate(Prior.adjust(base[..., 0][..., None], base[..., 1][..., None], b, c, load, lat1, en1,
                                           rate)):
            out[i] = a  # broadcast into the grid
        return out

    def _prior_base_grid(self, options: Sequence[PlacementOption], variants: Sequence[Variant]):
        """Base (latency, energy) table (P, V, B, 2), and the batch-1 latency and energy (P, V, 1, 1)."""
        bases = []
        for o in options:
            acc = o.pool.accelerator
            self._accelerators[acc.name] = acc  # the pool's own figures win (observe() sees only the name)
            bases.append(self._cached(("prior", acc.name, acc.max_w, variants[0].family), lambda acc=acc: np.array(
                [[self.prior.base(acc, v, b) for b in (1, *self.batch_sizes)] for v in variants])))  # V, 1+B, 2
        base = np.stack(bases)
        return base[:, :, 1:, :], base[:, :, 0, 0][..., None, None], base[:, :, 0, 1][..., None, None]

    def _member_checks(self, options: Sequence[PlacementOption], variants: Sequence[Variant],
                       job: JobSpec) -> tuple[np.ndarray, dict[str, Any]]:
        """(P, V, L) mask: every job already on the option's device keeps its SLO if this job joins with
        variant v keeping the device ``_LOAD_LEVELS[l]`` busy; and predicted slowdowns per (member, size,
        level) for the chosen group's explanation.

        The newcomer enters a member's features only through additive co-runner features that depend on
        its family, size and load, so one ``raw_sums`` call scores every (member, size, level).
        """
        ok = np.ones((len(options), len(variants), len(_LOAD_LEVELS)), dtype=bool)
        members = [(p, o, mem) for p, o in enumerate(options) for mem in o.members]
        if not members:
            return ok, {"by_option": {}}
        sizes = tuple(sorted({v.size for v in variants}))
        key = ("members", job.family, sizes, tuple(
            (o.pool.name, o.device, mem.job_id, mem.candidate.variant.name, mem.candidate.batch_size,
             mem.candidate.concurrency, mem.slo_ms, mem.arrival_rate_rps, len(o.members), o.loads)
            for _, o, mem in members))
        # The outcome depends only on these members, the newcomer's family and the model's current state:
        # a burst of recommendations between two observations computes it once.
        memo_key = (key, tuple((o.pool.name, o.device) for o in options), self._variants_version,
                    self.model.parameters_version, self.n_observed)
        hit = self._member_memo.get(memo_key)
        if hit is not None:
            return hit[0].copy(), hit[1]
        if len(self._member_memo) >= 64 or next(iter(self._member_memo), (None,) * 5)[2:] != memo_key[2:]:
            self._member_memo = {}
        result = self._member_checks_compute(key, members, options, variants, job, sizes)
        self._member_memo[memo_key] = result
        return result[0].copy(), result[1]

    def _member_checks_compute(self, key, members, options, variants, job, sizes):
        L = len(_LOAD_LEVELS)
        ok = np.ones((len(options), len(variants), L), dtype=bool)
        slowdowns: dict[int, list[tuple[str, int]]] = {}
        plan, alone_idx, prior_with, prior_alone, waits, slos, regions = self._cached(
            key, lambda: self._member_plan(members, job.family, sizes))
        margins = np.array([self._latency_margin(c) for c in regions])
        M = len(members)
        log_with = self.model.raw_sums_planned(plan)[:, :, _LAT].reshape(M, len(sizes), L) + prior_with[:, None, :]
        log_alone = self.model.predict_many(*alone_idx)[:, _LAT] + prior_alone
        good = np.exp(log_with + margins[:, None, None]) + waits[:, None, None] <= slos[:, None, None]  # M, S, L
        slow = np.exp(log_with - log_alone[:, None, None])
        if not good.all():
            vsize = [sizes.index(v.size) for v in variants]
            np.logical_and.at(ok, np.array([p for p, _, _ in members]), good[:, vsize, :])
        # Slowdowns are only read for the chosen option: keep them as arrays, keyed lazily.
        for i, (p, _, mem) in enumerate(members):
            slowdowns.setdefault(p, []).append((mem.job_id, i))
        return ok, {"by_option": slowdowns, "slow": slow, "sizes": sizes}

    def _member_plan(self, members, family: str, sizes: Sequence[str]):
        """Parameter-independent inputs of the member checks (cached until the vocabulary changes)."""
        xa, x_alone, prior_with, prior_alone, waits, slos, regions = [], [], [], [], [], [], []
        for _, o, mem in members:
            cand = mem.candidate
            acc = o.pool.accelerator
            base_x = {**job_features(job_context(mem)), **placement_features(o.pool.name, acc.name, ()),
                      **variant_features(cand.variant), **batch_features(cand.batch_size),
                      **concurrency_features(cand.concurrency)}
            others = [co_runner_of(x, o.load(i)) for i, x in enumerate(o.members) if x.job_id != mem.job_id]
            xa.append({**base_x, **co_runner_features(others)})
            x_alone.append(base_x)
            load = np.concatenate([[0.0], sum(c.load for c in others) + _LOAD_LEVELS])
            lat0, en0 = self._prior_base(acc, cand.variant, cand.batch_size)
            lat1, en1 = self._prior_base(acc, cand.variant, 1)
            plat = Prior.adjust(lat0, en0, float(cand.batch_size), float(cand.concurrency), load, lat1, en1,
                                _stream_rate(job_context(mem), self.partial_batches))[_LAT]
            prior_alone.append(plat[0])
            prior_with.append(plat[1:])
            waits.append(float(fill_wait_ms(float(cand.batch_size), mem.arrival_rate_rps)))
            slos.append(mem.slo_ms)
            regions.append(cand)  # its latency margin (region + novelty) is read per call, not cached
        xd = [co_runner_features([CoLite(family, s, float(level))]) for s in sizes for level in _LOAD_LEVELS]
        plan = self.model.sums_plan(xa, xd)
        return (plan, self.model.index(x_alone), np.array(prior_with), np.array(prior_alone), np.array(waits),
                np.array(slos), regions)

    def recommend(self, job: JobSpec, cluster: ClusterState, *, current: Placement | None = None) -> Decision:
        """Best candidate for ``job`` on ``cluster`` (never raises for an infeasible job: see ``feasible``).

        ``current`` (re-tuning a running job): where it runs now. Staying is preferred while it is feasible and
        its objective is within ``stay_tolerance`` of the best — a move costs a model load and a cold start.
        A stay keeps the device (``Decision.group`` names it). If ``cluster`` still lists the job, that entry
        is ignored (its slot is the job's own).
        """
        variants = self._by_family.get(job.family)
        if not variants:
            raise ConfigError(f"recommend: no variant of family {job.family!r} in the catalogue; "
                              f"known families: {', '.join(self.families()) or '(none)'}")
        if not cluster.pools:
            raise ConfigError("recommend: the cluster has no pools")
        if current is not None and any(p.job_id == job.job_id for p in cluster.placements):
            cluster = ClusterState.model_construct(
                pools=cluster.pools, placements=[p for p in cluster.placements if p.job_id != job.job_id])
        with self._lock:
            include = (current.pool, current.device) if current is not None else None
            options = placement_options(cluster, include=include, load_of=self._load_of)
            no_capacity = not options
            if no_capacity:
                options = placement_options(cluster, ignore_capacity=True, load_of=self._load_of)
            return self._decide(job, cluster, options, variants, no_capacity, current)

    def _stay_index(self, current: Placement | None, options, variants) -> tuple[int, int, int, int] | None:
        if current is None:
            return None
        c = current.candidate
        try:
            return (next(i for i, o in enumerate(options) if o.pool.name == current.pool and o.device == current.device),
                    next(i for i, v in enumerate(variants) if v.name == c.variant.name),
                    self.batch_sizes.index(c.batch_size), self.concurrencies.index(c.concurrency))
        except (StopIteration, ValueError):  # its setting is not in this tuner's grid any more
            return None

    def _decide(self, job: JobSpec, cluster: ClusterState, options: list[PlacementOption],
                variants: list[Variant], no_capacity: bool, current: Placement | None = None) -> Decision:
        ctx = job_context(job)
        B = len(self.batch_sizes)
        static = self._cached(("static", job.family), dict)  # variants x batch x concurrency block, memoised
        raw = self.model.raw_grid(self._part_arrays(ctx, options, variants), n_static=3, cache=static)[:, 0]
        logp = raw + self._prior_grid(options, variants, ctx)  # 3, P, V, B, C
        regions = [o.pool.accelerator.name for o in options]
        marg = np.array([self._margins(r, job.family) for r in regions])  # P, 3
        lat, energy, thr = np.exp(logp)
        # Epistemic term: a (accelerator, variant) pair measured n times gets novelty / sqrt(1 + n) more margin,
        # so feasibility trusts measured configurations more than ones the FM only extrapolates to.
        visits = self._visit_grid(regions, variants)  # P, V
        pess_lat = lat * np.exp(marg[:, _LAT][:, None] + self.novelty / np.sqrt(1.0 + visits))[:, :, None, None]
        rate = job.arrival_rate_rps
        streaming = job.kind == "streaming"
        req_lat = pess_lat
        pess_thr = thr * np.exp(-marg[:, _THR])[:, None, None, None] if streaming else thr
        if streaming and rate > 0:  # a request may wait for its batch to fill (bounded by the batcher's delay)
            req_lat = pess_lat + fill_wait_ms(np.array(self.batch_sizes, dtype=float), rate)[:, None]
            queue = 0.0
            if self.burstiness is not None:  # and for a free lane: queueing grows with utilisation
                queue = queue_wait_ms(pess_lat, rate, pess_thr, np.array(self.concurrencies, dtype=float),
                                      self.burstiness)
            backlog = self.burst(job.job_id)
            if backlog is not None:  # measured: the job's own bursts drain at this candidate's throughput
                # (its mean prediction: the backlog is already a high quantile of what was measured)
                queue = np.maximum(queue, 1000.0 * backlog / thr)
            req_lat = req_lat + queue

        # Constraints as small broadcastable masks (materialised only where needed).
        need = self._cached(("need", job.family), lambda: np.array(
            [[memory_need_gb(v, c) for c in self.concurrencies] for v in variants]))  # V, C
        free_mem = np.array([o.free_memory_gb for o in options])
        cap_ok = (need[None, :, :] <= free_mem[:, None, None])[:, :, None, :] & (not no_capacity)  # P, V, 1, C
        acc_ok = np.array([v.accuracy >= job.accuracy_floor for v in variants])[None, :, None, None]
        slo_ok = req_lat <= job.slo_ms
        if streaming:
            thr_ok = pess_thr >= rate * self.throughput_headroom
        else:
            thr_ok = np.ones((1, 1, 1, 1), dtype=bool)
        co_mask, slowdowns = self._member_checks(options, variants, job)  # P, V, L
        if co_mask.all():
            co_ok = np.ones((1, 1, 1, 1), dtype=bool)
        elif streaming and rate > 0:  # the newcomer's own busy share decides how much it slows the members
            level = _load_level(rate / thr)  # P, V, B, C
            co_ok = np.take_along_axis(co_mask[:, :, None, None, :], level[..., None], axis=-1)[..., 0]
        else:
            co_ok = co_mask[:, :, None, None, -1]
        feasible = slo_ok & cap_ok
        feasible &= acc_ok
        feasible &= co_ok
        if streaming:
            feasible &= thr_ok
        masks = {"cap": cap_ok, "acc": acc_ok, "slo": slo_ok, "thr": thr_ok, "co": co_ok}

        # Objective (lower is better); the secondary one and fragmentation only decide among near-equals.
        cost_h = np.array([o.pool.accelerator.cost_per_hour for o in options])
        items = max(job.items, 1)
        if streaming or job.objective == "energy":
            obj_name = "energy"
            obj = energy
        elif job.objective == "completion_time":
            obj_name = "completion_time"
            obj = items / thr
        else:
            obj_name = "cost"
            obj = (cost_h / 3600.0)[:, None, None, None] / thr

        n_cand = 0 if no_capacity else int(cap_ok.sum()) * B
        n_feas = int(np.count_nonzero(feasible))
        source = "model"
        stay = self._stay_index(current, options, variants)
        if n_feas:
            idx = self._choose(feasible, obj, obj_name, options, energy, thr, cost_h)
            if stay is not None and stay != idx and feasible[stay] and obj[stay] <= obj[idx] * (1 + self.stay_tolerance):
                idx = stay
            stayed = stay is not None and idx == stay
            p_explore = self.explore_rate * _EXPLORE_N0 / (_EXPLORE_N0 + self.n_observed)
            if not stayed and p_explore > 0 and self._rng.random() < p_explore:
                eidx = self._explore(feasible, obj, marg, visits, obj_name)
                if eidx != idx:
                    idx, source = eidx, "explore"
        else:
            idx, graded = self._least_violating(masks, req_lat, job, pess_thr, obj, variants, options)
            # Moving costs a model load and a cold start: an infeasible job stays unless moving is clearly less bad.
            if stay is not None and stay != idx and graded[stay] <= graded[idx] + INFEASIBLE_STAY:
                idx = stay
            stayed = stay is not None and idx == stay
        p, v, b, c = idx
        if source != "explore":
            n_region = self.residuals["log_latency"].count(f"{regions[p]}/{job.family}")
            source = "model" if n_region >= _MIN_MODEL_OBS else "prior"

        opt = options[p]
        variant = variants[v]
        cand = Candidate(pool=opt.pool.name, accelerator=opt.pool.accelerator.name, variant=variant,
                         batch_size=self.batch_sizes[b], concurrency=self.concurrencies[c],
                         co_runners=opt.co_runners)
        pred = self._prediction(lat, energy, thr, pess_lat, idx)
        group = None
        if opt.shared:
            alone = self._predict_log([ctx], [cand.model_copy(update={"co_runners": ()})])[0, _LAT]
            j = slowdowns["sizes"].index(variant.size)
            lv = int(_load_level(rate / thr[idx])) if streaming and rate > 0 else len(_LOAD_LEVELS) - 1
            sd = {jid: float(slowdowns["slow"][i, j, lv]) for jid, i in slowdowns["by_option"].get(p, [])}
            sd[job.job_id] = float(math.exp(logp[_LAT][idx] - alone))
            group = ColocationGroup(pool=opt.pool.name, device=opt.device,
                                    members=tuple(m.job_id for m in opt.members) + (job.job_id,),
                                    predicted_slowdown=sd)
        elif stayed:  # alone on its current device: a one-member group keeps the launcher on that device
            group = ColocationGroup(pool=opt.pool.name, device=opt.device, members=(job.job_id,),
                                    predicted_slowdown={job.job_id: 1.0})
        runner_ups = self._runner_ups(idx, feasible, masks, obj, obj_name, options, variants, lat, energy, thr,
                                      pess_lat, req_lat, job)
        note = self._note(idx, n_feas, n_cand, masks, opt, req_lat, job, no_capacity, source)
        if stayed and n_feas:
            note += f"; kept the current placement (within {self.stay_tolerance:.0%} of the best)"
        elif stayed:
            note += "; kept the current placement (moving would not make it clearly less infeasible)"
        expl = Explanation(predicted=pred, n_candidates=n_cand, n_feasible=n_feas, runner_ups=tuple(runner_ups),
                           note=note)
        return Decision(job_id=job.job_id, candidate=cand, group=group, source=source, feasible=bool(n_feas),
                        explanation=expl)

    def _choose(self, feasible, obj, obj_name, options, energy, thr, cost_h):
        """Best objective; within ``near_equal`` of it: least fragmentation, then the secondary objective."""
        o = np.where(feasible, obj, np.inf).ravel()
        best = o.min()
        flat = np.flatnonzero(o <= best * (1.0 + self.near_equal))
        p_idx = np.unravel_index(flat, feasible.shape)[0]
        frag = np.array([o_.free_slots_after + o_.pool_free_slots_after / 1e4 for o_ in options])[p_idx]
        if obj_name == "energy":  # secondary: cost per item
            secondary = cost_h[p_idx] / thr.ravel()[flat]
        else:
            secondary = energy.ravel()[flat]
        keys = np.lexsort((o[flat], secondary, frag))
        return tuple(int(i) for i in np.unravel_index(flat[keys[0]], feasible.shape))

    def _visit_grid(self, accelerators: Sequence[str], variants: Sequence[Variant]) -> np.ndarray:
        """Measurements per (accelerator, variant) as a (P, V) array (memoised per family and option types
        until the next observation)."""
        memo = self._per_observation("visits")
        key = (tuple(accelerators), variants[0].family)
        grid = memo.get(key)
        if grid is None:
            grid = memo[key] = np.array([[self.visits.get(f"{a}/{v.name}", 0) for v in variants]
                                         for a in accelerators], dtype=float)
        return grid

    def _explore(self, feasible, obj, marg, visits, obj_name):
        o = np.where(feasible, obj, np.inf)
        within = feasible & (o <= o.min() * (1.0 + self.explore_slack))
        # Optimism: discount the objective by its margin, scaled down as a (accelerator, variant) pair is measured.
        t = _EN if obj_name == "energy" else _THR
        bonus = marg[:, t][:, None] / np.sqrt(1.0 + visits)  # P, V
        optimistic = np.where(within, o * np.exp(-bonus[:, :, None, None]), np.inf)
        return tuple(int(i) for i in np.unravel_index(int(np.argmin(optimistic)), feasible.shape))

    def _least_violating(self, masks, req_lat, job, pess_thr, obj, variants, options):
        """Nothing is feasible: keep the hard constraints first (fits the device, then the accuracy floor — or
        the smallest shortfall when no variant reaches it), then the smallest relative latency + throughput
        violation, + 1 if a co-runner is predicted to miss its SLO (pessimistically: a hard rule here sent
        infeasible jobs to slow empty devices and cost more than it saved), + ``crowding`` per job already on
        the device (spread rather than pack), then the objective."""
        shape = obj.shape
        cap_fail = np.broadcast_to(~masks["cap"], shape)
        co_fail = np.broadcast_to(~masks["co"], shape)
        shortfall = np.broadcast_to(np.array([max(0.0, job.accuracy_floor - v.accuracy) for v in variants])
                                    [None, :, None, None], shape)
        crowd = np.array([len(o.members) for o in options], dtype=float)[:, None, None, None]
        over = np.maximum(0.0, req_lat / job.slo_ms - 1.0)
        if job.kind == "streaming":  # the worse of the two: trading latency for throughput is no gain
            over = np.maximum(over, job.arrival_rate_rps * self.throughput_headroom / pess_thr - 1.0)
        graded = over + self.crowding * crowd + co_fail * 1.0
        graded = np.broadcast_to(graded, shape)
        flat = np.lexsort((obj.ravel(), graded.ravel(), shortfall.ravel(), cap_fail.ravel()))
        graded = np.where(cap_fail | (shortfall > 0), np.inf, graded)
        return tuple(int(i) for i in np.unravel_index(int(flat[0]), shape)), graded

    @staticmethod
    def _prediction(lat, energy, thr, pess_lat, idx) -> Prediction:
        return Prediction(latency_p99_ms=float(lat[idx]), energy_j_per_item=float(energy[idx]),
                          throughput_items_per_s=float(thr[idx]),
                          margin_ms=float(pess_lat[idx] - lat[idx]))

    def _key(self, options, variants, idx) -> str:
        p, v, b, c = idx
        return f"{options[p].pool.name}/{variants[v].name}/b{self.batch_sizes[b]}/c{self.concurrencies[c]}" + (
            f"/dev{options[p].device}" + ("+shared" if options[p].shared else ""))

    def _why(self, idx, masks, req_lat, job, variants) -> str:
        v = idx[1]
        if not _at(masks["cap"], idx):
            return "does not fit free memory/slots"
        if not _at(masks["acc"], idx):
            return f"below accuracy floor ({variants[v].accuracy:.3f} < {job.accuracy_floor:.3f})"
        if not _at(masks["slo"], idx):
            return f"slower than SLO ({req_lat[idx]:.1f} ms with margin > {job.slo_ms:g} ms)"
        if not _at(masks["thr"], idx):
            return "throughput below arrival rate x headroom"
        if not _at(masks["co"], idx):
            return "a co-runner on that device would miss its SLO"
        return ""

    def _runner_ups(self, idx, feasible, masks, obj, obj_name, options, variants, lat, energy, thr, pess_lat,
                    req_lat, job, k: int = 4) -> list[Alternative]:
        out: list[Alternative] = []
        best = obj[idx]
        # Feasible runner-ups: the best setting of each other (option, variant) pair, best pairs first.
        P, V = obj.shape[:2]
        o = np.where(feasible, obj, np.inf).reshape(P, V, -1)
        per_pair = o.min(-1)
        per_pair[idx[0], idx[1]] = np.inf
        word = {"energy": "more energy", "completion_time": "slower completion", "cost": "higher cost"}[obj_name]
        for flat in np.argsort(per_pair, axis=None)[: k - 1]:
            p, v = divmod(int(flat), V)
            if not np.isfinite(per_pair[p, v]):
                break
            j = (p, v, *divmod(int(o[p, v].argmin()), obj.shape[3]))
            rel = (obj[j] / best - 1.0) * 100 if best > 0 else 0.0
            reason = f"{word} (+{rel:.1f}%)" if rel > self.near_equal * 100 else "near-equal, leaves more fragmentation"
            out.append(Alternative(candidate_key=self._key(options, variants, j),
                                   prediction=self._prediction(lat, energy, thr, pess_lat, j), reason=reason))
        # The best infeasible candidate (by objective), with the constraint it breaks.
        inf = np.where(feasible, np.inf, obj)
        flat = int(np.argmin(inf))
        if np.isfinite(inf.flat[flat]):
            j = tuple(int(i) for i in np.unravel_index(flat, inf.shape))
            if j != idx:
                out.append(Alternative(candidate_key=self._key(options, variants, j),
                                       prediction=self._prediction(lat, energy, thr, pess_lat, j),
                                       reason=self._why(j, masks, req_lat, job, variants)))
        return out

    def _note(self, idx, n_feas, n_cand, masks, opt, req_lat, job, no_capacity, source) -> str:
        where = f"{opt.pool.name} device {opt.device}" + (
            f" shared with {', '.join(m.job_id for m in opt.members)}" if opt.shared else " (empty)")
        if n_feas:
            return f"{n_feas}/{n_cand} candidates feasible; chosen by {source}; {where}"
        if no_capacity:
            return f"infeasible: no free slot in any pool; best available would be {where}"
        fails = [name for name, key in (("accuracy floor", "acc"), ("p99 latency SLO", "slo"),
                                        ("throughput >= arrival rate", "thr"), ("co-runners' SLOs", "co"),
                                        ("device memory", "cap")) if not _at(masks[key], idx)]
        full = masks["slo"].shape
        counts = ", ".join(f"{int((~np.broadcast_to(masks[k], full)).sum())} fail {n}" for n, k in (
            ("accuracy", "acc"), ("latency", "slo"), ("throughput", "thr"), ("co-runners", "co"), ("memory", "cap")))
        detail = ""
        if "p99 latency SLO" in fails:
            detail = f" (predicted {req_lat[idx]:.1f} ms with margin > SLO {job.slo_ms:g} ms)"
        elif "accuracy floor" in fails:
            detail = f" (best accuracy {max(v.accuracy for v in self._by_family[job.family]):.3f} < {job.accuracy_floor:.3f})"
        return (f"infeasible: no candidate meets every constraint; best available ({where}) fails "
                f"{' and '.join(fails) or 'nothing'}{detail}; of {masks['slo'].size} candidates: {counts}")

    # ------------------------------------------------------------------------------------------------ groups
    def groups(self, cluster: ClusterState, pool: str) -> list[ColocationGroup]:
        """Which of the jobs on ``pool`` may share a device (every member inside its SLO), see ``grouping``."""
        with self._lock:
            p = cluster.pool(pool)
            return plan_groups(p, cluster.jobs_on(pool), self._member_latency, self._load_of)

    def _member_latency(self, pool_name: str, member: Placement, co: Sequence[CoRunner]) -> tuple[float, float]:
        """(mean, pessimistic) p99 ms of a placed job with the given co-runners on its device."""
        cand = member.candidate.model_copy(update={"co_runners": tuple(co), "pool": pool_name})
        lp = self._predict_log([job_context(member)], [cand])[0, _LAT]
        return math.exp(lp), math.exp(lp + self._latency_margin(cand))

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore this tuner, as plain JSON types."""
        with self._lock:
            return {
                "format": STATE_FORMAT, "version": STATE_VERSION,
                "config": {"batch_sizes": list(self.batch_sizes), "concurrencies": list(self.concurrencies),
                           "seed": self.seed, "n_factors": self.n_factors, "lr": self.lr,
                           "explore_rate": self.explore_rate, "explore_slack": self.explore_slack,
                           "margin_quantile": self.margin_quantile,
                           "throughput_headroom": self.throughput_headroom, "near_equal": self.near_equal,
                           "stay_tolerance": self.stay_tolerance, "burstiness": self.burstiness,
                           "novelty": self.novelty, "crowding": self.crowding,
                           "partial_batches": self.partial_batches, "saturated_util": self.saturated_util,
                           "learner_replay": self.learner_replay},
                "prior": self.prior.to_dict(),
                "variants": [v.model_dump() for v in self.variants],
                "accelerators": [a.model_dump() for n, a in self._accelerators.items() if CATALOG.get(n) != a],
                "model": self.model.state_dict(),
                "residuals": {t: r.state_dict() for t, r in self.residuals.items()},
                "visits": dict(self.visits),
                "bursts": {k: list(v) for k, v in self.bursts.items()},
                "loads": {k: list(v) for k, v in self.loads.items()},
                "n_observed": self.n_observed,
                "seen": self._seen.state_dict(),
                "rng": self._rng.bit_generator.state,
            }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> Tuner:
        check_envelope(d)
        try:
            t = cls([Variant.model_validate(v) for v in d["variants"]], prior=Prior.from_dict(d["prior"]),
                    **d["config"])
            t.model.load_state_dict(d["model"])
            t.residuals = {k: ResidualQuantiles.from_state_dict(v) for k, v in d["residuals"].items()}
            t.visits = {str(k): int(v) for k, v in d["visits"].items()}
            t.bursts = {str(k): deque((float(x) for x in v), maxlen=_BURST_WINDOW)
                        for k, v in d.get("bursts", {}).items()}  # absent in states saved before it existed
            t.loads = {str(k): (str(v[0]), float(v[1])) for k, v in d.get("loads", {}).items()}
            t.n_observed = int(d["n_observed"])
            t._seen = SeenIds.from_state_dict(d["seen"])
            for a in d.get("accelerators", []):
                acc = Accelerator.model_validate(a)
                t._accelerators[acc.name] = acc
            t._rng.bit_generator.state = d["rng"]
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"tuner state is malformed ({type(e).__name__}: {e}); delete it to start fresh") from e
        return t

    def save(self, path: str | Path) -> Path:
        """Write the state as JSON, atomically (temp file + rename)."""
        return write_json_atomic(path, self.state_dict())

    @classmethod
    def load(cls, path: str | Path) -> Tuner:
        return cls.from_state_dict(read_state(path))
