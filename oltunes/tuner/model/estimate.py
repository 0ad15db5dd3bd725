"""Estimate: what every candidate would do — prior x learned correction, with margins — and learning from what did.

``log metric = log prior + FM residual`` for log p99 latency per batch, log energy per item and log throughput.
The FM is scored over a whole (placement option x variant x batch x concurrency) grid by combining per-part sums
of its parameters (``MultiFMRegressor.raw_grid``); the prior's figures come from ``prior_table.PriorTable``.

Margins: pessimistic latency = latency x exp(m), m = rolling 95th percentile of |log error| of recent predictions
for that (accelerator type, family), shrunk towards the accelerator's, in turn shrunk towards the prior's own
margin while there are few (``ResidualQuantiles``), plus ``novelty / sqrt(1 + n)`` for an (accelerator, variant)
pair measured n times. Throughput is discounted by its own residual quantile (learned from batch jobs and
saturated streams only: see ``saturated_util``).

A streaming request's latency adds the batch-fill wait ``min(1000 (b-1) / rate, 5 ms)`` and a p99 queueing delay:
the larger of Kingman's estimate from the utilisation ``rate / throughput`` (``candidates.queue_wait_ms``) and,
once the job has reported ``Measurement.request_latency_p99_ms``, its learned burst backlog drained at the
candidate's throughput (:meth:`Estimator.learn`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from oltunes.inventory import CATALOG
from oltunes.learner.features import (
    JobContext,
    batch_features,
    concurrency_features,
    encode,
    job_context,
    job_features,
    placement_features,
    variant_features,
)
from oltunes.learner.fm import MultiFMRegressor
from oltunes.learner.fm_scoring import stack_indexed
from oltunes.learner.ftml import FTML
from oltunes.learner.uncertainty import ResidualQuantiles
from oltunes.tuner.decide.candidates import PlacementOption, fill_wait_ms
from oltunes.tuner.catalogue import Catalogue
from oltunes.tuner.model.correction import PooledCorrection
from oltunes.tuner.model.estimate_grid import Estimate
from oltunes.tuner.model.estimate_learning import EN, LAT, LEARN_CHUNK, TARGETS, THR, EstimatorLearning
from oltunes.tuner.jobs import JobMemory
from oltunes.tuner.model.memo import Memo, put_bounded
from oltunes.tuner.model.prior import Prior
from oltunes.tuner.model.prior_table import PriorTable
from oltunes.tuner.decide.candidates import request_waits
from oltunes.types import Accelerator, Candidate, JobSpec, Placement, Variant

__all__ = ["EN", "LAT", "LEARN_CHUNK", "TARGETS", "THR", "Estimate", "Estimator"]

LOADS_KEPT = 65_536  # placed jobs whose busy share ``load_of`` keeps between observations
LOG_100 = float(np.log(100.0))  # the p99's factor over a mean queueing wait (``candidates.queue_wait_ms``'s)
FILL_RATES_KEPT = 1024  # request rates whose batch-fill waits ``_fill_waits`` keeps (a bound for a long service)
GRID_MEMO_ENTRIES = 16  # scored grids kept between observations (each a few (P, V, B, C) arrays)


class Estimator(EstimatorLearning):
    """Prior + FM-FTML residual + margins: predicts candidates and learns from measurements.

    Parameters are the tuner's (see :class:`oltunes.tuner.Tuner`).
    """

    def __init__(self, catalogue: Catalogue, prior: Prior, *, batch_sizes: tuple[int, ...],
                 concurrencies: tuple[int, ...], seed: int, n_factors: int, lr: float, margin_quantile: float,
                 novelty: float, burstiness: float | None, saturated_util: float) -> None:
        self.catalogue = catalogue
        self.batch_sizes = batch_sizes
        self.concurrencies = concurrencies
        self.novelty = novelty
        self.burstiness = burstiness
        self.saturated_util = saturated_util
        # l2_latent 1e-2 (not the FM's 1e-4): on long streams where many features are always on, weaker
        # regularisation let the interaction terms fall into bursts of oscillation (|log error| > 1 for tens of
        # steps) that inflate the safety margins; 1e-2 kept every seed of tests/tuner's trainer below 0.25.
        self.model = MultiFMRegressor(targets=TARGETS, n_factors=n_factors, weight_optimizer=FTML(lr=lr),
                                      latent_optimizer=FTML(lr=lr), l2_latent=1e-2, seed=seed)
        self.correction = PooledCorrection(len(TARGETS), root_k=prior.evidence)
        self.residuals = {t: ResidualQuantiles(q=margin_quantile) for t in TARGETS}
        self.visits: dict[str, int] = {}  # "accelerator/variant" -> measurements
        self.jobs = JobMemory()  # per running job: measured load, burst backlog
        self.n_learned = 0
        # Index arrays hold FM row numbers and the variant lists: rebuilt when either changes.
        self.memo = Memo(lambda: (self.model.vocabulary_version, catalogue.version))
        self.priors = PriorTable(prior, self.memo, batch_sizes, concurrencies)
        # Margins, visit counts and loads change with every observation.
        self.per_observation = Memo(lambda: (self.n_learned, catalogue.version))
        # Scored grids (``_grid``): every term moves with the parameters, the observation count or the catalogue.
        self.grid_memo = Memo(lambda: (self.model.parameters_version, self.n_learned, catalogue.version),
                              max_entries=GRID_MEMO_ENTRIES)

    # ------------------------------------------------------------------------------------------------ margins
    def margins(self, accelerator: str, family: str) -> np.ndarray:
        """Log margins (latency, energy, throughput) for a family on an accelerator type.

        Hierarchical shrinkage: the (accelerator, family) residual quantile is pulled towards the accelerator's,
        which is pulled towards the prior's own margin for that family, each in proportion to how few
        residuals back it. Memoised until the next observation.
        """
        memo = self.per_observation.table("margins")
        key = (accelerator, family)
        m = memo.get(key)
        if m is None:
            pm = self._family_prior_margin(family)
            region = f"{accelerator}/{family}"
            m = memo[key] = np.array([r.margin(region, r.margin(accelerator, pm)) for r in self.residuals.values()])
        return m

    def latency_margin(self, c: Candidate) -> float:
        """Log latency margin of one candidate: its region's, plus the novelty term of its (accelerator, variant)."""
        visits = self.visits.get(f"{c.accelerator}/{c.variant.name}", 0)
        return float(self.margins(c.accelerator, c.variant.family)[LAT] + self.novelty / math.sqrt(1.0 + visits))

    def _family_prior_margin(self, family: str) -> float:
        variants = self.catalogue.family(family)
        if not variants:
            return self.priors.prior.margin
        return self.memo.get(("prior_margin", family), lambda: max(self.priors.prior.margin_of(v) for v in variants))

    def region_count(self, accelerator: str, family: str) -> int:
        """Latency residuals recorded for (accelerator, family): how much the model has seen there."""
        return self.residuals["log_latency"].count(f"{accelerator}/{family}")

    def _option_rows(self, regions: Sequence[str], variants: Sequence[Variant]) -> tuple:
        """What each option's accelerator type gives its cells: the correction over the grid (3, P, V, B, C), the
        log margins (P, 3), the (accelerator, variant) visits (P, V), the batch latency's pessimism factor
        (P, V, 1, 1) and the pairs' novelty terms (P, V); kept per the options' types until the next observation
        (the types repeat far more often than the options)."""
        return self.per_observation.get(("option_rows", tuple(regions), variants[0].family),
                                        lambda: self._build_option_rows(regions, variants))

    def _build_option_rows(self, regions: Sequence[str], variants: Sequence[Variant]) -> tuple:
        shape = (len(TARGETS), len(regions), len(variants), len(self.batch_sizes), len(self.concurrencies))
        corr = np.broadcast_to(self._correction_grid(regions, variants), shape)
        return (corr, *self._margin_rows(regions, variants))

    def _margin_rows(self, regions: Sequence[str], variants: Sequence[Variant]) -> tuple:
        by_region = {r: self.margins(r, variants[0].family) for r in dict.fromkeys(regions)}  # (few types)
        marg = np.array([by_region[r] for r in regions])  # P, 3
        # Epistemic term: a (accelerator, variant) pair measured n times gets novelty / sqrt(1 + n) more margin,
        # so feasibility trusts measured configurations more than ones the FM only extrapolates to.
        visits = self._visit_grid(regions, variants)  # P, V
        novel = self.novelty / np.sqrt(1.0 + visits)
        pessimism = np.exp(marg[:, LAT][:, None] + novel)[:, :, None, None]
        for a in (marg, visits, pessimism, novel):
            a.flags.writeable = False
        return marg, visits, pessimism, novel

    def _visit_grid(self, accelerators: Sequence[str], variants: Sequence[Variant]) -> np.ndarray:
        """Measurements per (accelerator, variant) as a (P, V) array (memoised until the next observation)."""
        memo = self.per_observation.table("visits")
        key = (tuple(accelerators), variants[0].family)
        grid = memo.get(key)
        if grid is None:
            rows = {a: [self.visits.get(f"{a}/{v.name}", 0) for v in variants] for a in dict.fromkeys(accelerators)}
            grid = memo[key] = np.array([rows[a] for a in accelerators], dtype=float)
        return grid

    # ------------------------------------------------------------------------------------------------ predict
    def predict_log(self, ctxs: Sequence[JobContext], candidates: Sequence[Candidate]) -> np.ndarray:
        """Log (latency, energy, throughput) of explicit candidates, (n, 3)."""
        xs = [encode(c, cand) for c, cand in zip(ctxs, candidates)]
        rows, vals = self.model.index(xs)
        raw = self.model.predict_many(rows, vals)
        out = raw + np.array([self.priors.log(c, x) + self.correction_of(c) for x, c in zip(ctxs, candidates)])
        # capacity = b x c items per (p99) batch latency
        out[:, THR] = np.log([1000.0 * c.batch_size * c.concurrency for c in candidates]) - out[:, LAT]
        return out

    def correction_of(self, c: Candidate) -> np.ndarray:
        """The pooled correction (log, per target) of one candidate; read-only, kept per what it reads until the
        next observation (decisions in between ask for the same configurations again)."""
        memo = self.per_observation.table("corrections")
        key = (c.accelerator, c.variant, c.batch_size, c.concurrency)
        out = memo.get(key)
        if out is None:
            out = self.correction.predict_candidate(c, self.priors.growth(c.accelerator, c.variant, c.batch_size))
            out.flags.writeable = False
            memo[key] = out
        return out

    def _correction_grid(self, regions: Sequence[str], variants: Sequence[Variant]) -> np.ndarray | float:
        """The correction depends on an option's accelerator type only, and many options share one (40 pools,
        8 types): each type's rows are computed once per observation (kept per the types in order of first
        appearance, which few option lists differ in) and copied to its options (the same numbers)."""
        unique = tuple(dict.fromkeys(regions))
        grid = self.per_observation.get(("correction", unique, variants[0].family), lambda: self.correction.grid(
            unique, variants, self.batch_sizes, self.concurrencies, self.priors.growth))
        if len(unique) == len(regions):
            return grid
        at = {r: i for i, r in enumerate(unique)}
        return grid.take([at[r] for r in regions], axis=1)

    def _part_arrays(self, ctx: JobContext, options: Sequence[PlacementOption], variants: Sequence[Variant]):
        m = self.model
        # index arrays per job context and per option (row by row: stacked, the rows ``index`` gives for all)
        jobs, places = self.memo.table("job_rows"), self.memo.table("place_rows")
        job = jobs.get(ctx)
        if job is None:
            job = put_bounded(jobs, ctx, m.index([job_features(ctx)]))

        def stacked():
            rows = []
            for o in options:
                row = places.get(o.model_key)
                if row is None:
                    row = put_bounded(places, o.model_key, m.index([placement_features(
                        o.pool.name, o.pool.accelerator.name, o.co_features)]))
                rows.append(row)
            return stack_indexed(rows)

        place = self.memo.get(("place", tuple(o.model_key for o in options)), stacked)
        var = self.memo.get(("var", variants[0].family), lambda: m.index([variant_features(v) for v in variants]))
        bat = self.memo.get(("batch",), lambda: m.index([batch_features(b) for b in self.batch_sizes]))
        con = self.memo.get(("conc",), lambda: m.index([concurrency_features(c) for c in self.concurrencies]))
        return [job, place, var, bat, con]

    def _log_items_per_batch(self) -> np.ndarray:
        """log(batch x concurrency) over the grid's (B, C) axes (read-only, made once: both axes are fixed)."""
        out = self.__dict__.get("_items_log")
        if out is None:
            out = self._items_log = np.log(np.outer(self.batch_sizes, self.concurrencies).astype(float))
            out.flags.writeable = False
        return out

    def estimate(self, job: JobSpec, options: list[PlacementOption], variants: list[Variant],
                 no_capacity: bool = False) -> Estimate:
        """Every candidate of ``job`` over ``options`` x ``variants`` x batch sizes x concurrencies."""
        ctx = job_context(job)
        logp, lat, energy, thr, marg, visits, pess_lat, novel, derived = self._grid(ctx, options, variants)
        # Throughput implied by the p99 batch latency is already a pessimistic capacity: no further margin.
        # (the grid's key holds the job's kind and rate, so its waits are kept with it)
        req_lat = self._request_latency(job, pess_lat, thr, thr, derived)
        return Estimate(job=job, options=options, variants=variants, batch_sizes=self.batch_sizes,
                        concurrencies=self.concurrencies, logp=logp, lat=lat, energy=energy, thr=thr, marg=marg,
                        visits=visits, novel=novel, pess_lat=pess_lat, pess_thr=thr, req_lat=req_lat,
                        no_capacity=no_capacity, shared=derived)

    def _grid(self, ctx: JobContext, options: Sequence[PlacementOption], variants: Sequence[Variant]) -> tuple:
        """The job-independent part of an estimate, scored once per (family, job context, what the options look
        like to the model) and reused until an observation changes the model, the margins or the catalogue
        (``grid_memo``). Every value is a pure function of that key, so a hit returns exactly what a rebuild
        would (the arrays are read-only: nothing downstream may change a shared grid)."""
        sig = tuple(o.model_key for o in options)
        return self.grid_memo.get((variants[0].family, ctx, sig), lambda: self._score_grid(ctx, options, variants))

    def _score_grid(self, ctx: JobContext, options: Sequence[PlacementOption], variants: Sequence[Variant]) -> tuple:
        static = self.memo.get(("static", variants[0].family), dict)  # variants x batch x concurrency block
        regions = [o.pool.accelerator.name for o in options]
        prior = self.priors.grid(options, variants, ctx)
        corr, marg, visits, pessimism, novel = self._option_rows(regions, variants)
        # raw + prior + correction, the sums made in the FM's pass over the grid (3, P, V, B, C)
        logp = self.model.raw_grid(self._part_arrays(ctx, options, variants), n_static=3, cache=static,
                                   plus=(prior, corr))[:, 0]
        logp[THR] = self._log_items_per_batch() - logp[LAT] + math.log(1000.0)  # capacity: b x c per p99 batch
        lat, energy, thr = np.exp(logp)
        pess_lat = lat * pessimism
        out = (logp, lat, energy, thr, marg, visits, pess_lat, novel)
        for a in out:
            a.flags.writeable = False
        return (*out, {})  # + values derived from these for the key's job kind and rate

    def _request_latency(self, job: JobSpec, batch_lat: np.ndarray, thr: np.ndarray,
                         mean_thr: np.ndarray, derived: dict) -> np.ndarray:
        """What a request waits: the batch latency; for streaming + the batch-fill wait (bounded by the
        batcher's delay) + queueing (Kingman at the utilisation ``rate / thr``, or the job's own measured
        bursts drained at ``mean_thr``, whichever is larger). ``derived`` keeps the parts that depend only on
        the grid and the job's rate (the job's own bursts are applied per call)."""
        rate = job.arrival_rate_rps
        if job.kind != "streaming" or rate <= 0:
            return batch_lat
        waits = derived.get("waits")
        if waits is None:
            # fill and Kingman's queueing (candidates.fill_wait_ms, queue_wait_ms) in one compiled pass
            queueing = self.burstiness is not None
            fill, concurrencies = self._fill_waits(rate)
            req, queue, total = request_waits(
                batch_lat, thr, fill, concurrencies, float(rate), queueing,
                1.0 + self.burstiness if queueing else 0.0, LOG_100)
            waits = derived["waits"] = (req, queue if queueing else 0.0, total)
            for a in waits:
                if isinstance(a, np.ndarray):
                    a.flags.writeable = False
        req, queue, no_backlog = waits
        backlog = self.burst(job.job_id)
        if backlog is None:
            return no_backlog
        # the backlog is already a high quantile of what was measured: mean throughput
        return req + np.maximum(queue, 1000.0 * backlog / mean_thr)

    def _fill_waits(self, rate: float) -> tuple[np.ndarray, np.ndarray]:
        """The batch-fill wait per batch size at ``rate``, and the concurrencies, as arrays (kept per rate: a
        service's jobs come at a few rates)."""
        kept = self.__dict__.setdefault("_fill_kept", {})
        out = kept.get(rate)
        if out is None:
            out = (np.asarray(fill_wait_ms(np.array(self.batch_sizes, dtype=float), rate), dtype=float),
                   np.array(self.concurrencies, dtype=float))
            for a in out:
                a.flags.writeable = False
            put_bounded(kept, rate, out, FILL_RATES_KEPT)
        return out

    def burst(self, job_id: str) -> float | None:
        return self.jobs.burst(job_id)

    def load_of(self, p: Placement) -> float:
        """Busy share of its device a placed job keeps, as a co-runner sees it: the last measured one while it
        runs the same configuration; else, for a streaming job, its rate over the prior's throughput; batch
        jobs run flat out (1). Rounded to 0.05 so that memoised grids are shared between close loads."""
        if p.arrival_rate_rps <= 0:
            return 1.0
        # The same Placement object and the same measured load entry as last time: the same answer (an
        # observation of another job leaves it; the rest is the prior, memoised in ``memo`` like this table).
        memo = self.memo.table("loads")
        seen = self.jobs.loads.get(p.job_id)
        hit = memo.get(p.job_id)
        if hit is not None and hit[0] is p and hit[1] is seen:
            return hit[2]
        if seen is not None and seen[0] == p.candidate.key:
            load = seen[1]
        else:
            c = p.candidate
            load = p.arrival_rate_rps / self.memo.get(
                ("thr_alone", c.accelerator, c.variant.name, c.batch_size, c.concurrency, p.arrival_rate_rps),
                lambda: math.exp(self.priors.log(c.model_copy(update={"co_runners": ()}), job_context(p))[THR]))
        load = min(1.0, max(0.05, round(load * 20.0) / 20.0))
        put_bounded(memo, p.job_id, (p, seen, load), LOADS_KEPT)  # holds p and seen: their ids stay unique meanwhile
        return load

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "accelerators": [a.model_dump() for n, a in self.priors.accelerators.items() if CATALOG.get(n) != a],
            "model": self.model.state_dict(),
            "residuals": {t: r.state_dict() for t, r in self.residuals.items()},
            "visits": dict(self.visits),
            **self.jobs.state_dict(),
            "correction": self.correction.state_dict(),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.model.load_state_dict(d["model"])
        self.residuals = {k: ResidualQuantiles.from_state_dict(v) for k, v in d["residuals"].items()}
        self.visits = {str(k): int(v) for k, v in d["visits"].items()}
        self.jobs.load_state_dict(d)
        if "correction" in d:  # absent in states saved before it existed (or without it): it relearns
            self.correction = PooledCorrection.from_state_dict(d["correction"], len(TARGETS))
        for a in d.get("accelerators", []):
            acc = Accelerator.model_validate(a)
            self.priors.accelerators[acc.name] = acc
