"""The heuristic prior's figures as the estimator reads them: per candidate and per scored grid, memoised.

Log (latency, energy per item, throughput) of a candidate or of a whole (placement option x variant x batch x
concurrency) grid, from ``Prior.base`` per (accelerator, variant, batch) and ``Prior.adjust`` for concurrency,
co-runners' load and a stream's partial batches; and the prior's growth from batch 1, which the pooled correction's
batch elasticity and family growth scale multiply. Entries live in the estimator's memo (they depend on the
catalogue and the FM's vocabulary only through that memo's key).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from oltunes.inventory import CATALOG
from oltunes.learner.features import JobContext
from oltunes.tuner.decide.candidates import PlacementOption
from oltunes.tuner.model.memo import Memo, put_bounded
from oltunes.tuner.model.prior import Prior
from oltunes.types import Accelerator, Candidate, Variant

__all__ = ["PriorTable", "stream_rate"]


def stream_rate(ctx: JobContext, partial_batches: bool) -> float:
    """The request rate that shapes dynamic batching in the prior (0: full batches; always 0 for batch jobs).
    The tuner's prior is of full batches (``PriorTable.partial_batches`` is False): real arrival traces come in
    clumps that fill batches, and a p99 is set by those."""
    return ctx.arrival_rate_rps if partial_batches and ctx.kind == "streaming" else 0.0


def _read_by_prior(acc: Accelerator, v: Variant) -> tuple:
    """What the prior reads of an accelerator and a variant: the key part of every figure kept from it."""
    return acc.name, acc.max_w, v.name, v.params, v.bytes, v.precision


class PriorTable:
    """``log(candidate, ctx)``, ``grid(options, variants, ctx)`` (3, P, V, B, C) and ``growth``: the prior's figures,
    memoised in ``memo``. ``accelerators``: every accelerator type's figures seen so far (a pool's own win)."""

    partial_batches = False  # the prior is of full batches (``stream_rate``)

    def __init__(self, prior: Prior, memo: Memo, batch_sizes: tuple[int, ...], concurrencies: tuple[int, ...]) -> None:
        self.prior, self.memo = prior, memo
        self.batch_sizes, self.concurrencies = batch_sizes, concurrencies
        self.accelerators: dict[str, Accelerator] = dict(CATALOG)

    def accelerator(self, name: str) -> Accelerator:
        acc = self.accelerators.get(name)
        if acc is None:  # unknown type seen only in a measurement: a mid-range GPU for the prior
            acc = Accelerator(name=name, memory_gb=16, idle_w=30, max_w=250)
        return acc

    def base(self, acc: Accelerator, variant: Variant, batch: int) -> tuple[float, float]:
        return self.memo.get(("prior1", *_read_by_prior(acc, variant), batch),
                             lambda: self.prior.base(acc, variant, batch))

    def growth(self, accelerator: str, variant: Variant, batch: int) -> np.ndarray:
        """The prior's log change (latency, energy per item, throughput) from batch 1 to ``batch``, alone: what the
        correction's batch elasticity scales (``tuner.elasticity``); read-only, kept per what it reads (every
        measurement learnt asks)."""
        acc = self.accelerator(accelerator)
        return self._kept("prior_growth", (*_read_by_prior(acc, variant), batch),
                          lambda: self._growth(acc, variant, batch))

    def _growth(self, acc: Accelerator, variant: Variant, batch: int) -> np.ndarray:
        (lat, en), (lat1, en1) = self.base(acc, variant, batch), self.base(acc, variant, 1)
        g = math.log(lat / lat1)
        return np.array([g, math.log(en / en1), math.log(batch) - g])

    def log(self, candidate: Candidate, ctx: JobContext) -> np.ndarray:
        """Log prior (latency, energy, throughput) of one candidate for a job (streaming rate matters); read-only,
        kept per what it reads (every measurement learnt asks, and about half repeat one already asked)."""
        acc, v = self.accelerator(candidate.accelerator), candidate.variant
        b, c = candidate.batch_size, candidate.concurrency
        load = sum(co.load for co in candidate.co_runners)
        rate = stream_rate(ctx, self.partial_batches)
        return self._kept("prior_log", (*_read_by_prior(acc, v), b, c, load, rate),
                          lambda: self._log(acc, v, b, c, load, rate))

    def _log(self, acc: Accelerator, v: Variant, b: int, c: int, load: float, rate: float) -> np.ndarray:
        (lat, en), (lat1, en1) = self.base(acc, v, b), self.base(acc, v, 1)
        return np.array(Prior.adjust(lat, en, float(b), float(c), load, lat1, en1, rate))

    def _kept(self, table: str, key: tuple, build: Callable[[], np.ndarray]) -> np.ndarray:
        """``build()`` made read-only and kept per ``key`` in the memo's table ``table`` (its own table: thousands of
        keys, not the memo's shared bound)."""
        kept = self.memo.table(table)
        out = kept.get(key)
        if out is None:
            out = build()
            out.flags.writeable = False
            put_bounded(kept, key, out)
        return out

    def grid(self, options: Sequence[PlacementOption], variants: Sequence[Variant],
                    ctx: JobContext) -> np.ndarray:
        """Log prior (3, P, V, B, C), memoised per (accelerator, co-load) of the options, family and rate."""
        # The rate only shapes the prior's dynamic-batching estimate: two significant digits are plenty, and
        # let jobs with similar rates share one memoised grid.
        rate = float(f"{stream_rate(ctx, self.partial_batches):.2g}")
        sig = tuple(o.prior_key for o in options)
        return self.memo.get(("prior_grid", variants[0].family, sig, rate),
                             lambda: self._build_grid(options, variants, sig, rate))

    def _build_grid(self, options, variants, sig, rate: float) -> np.ndarray:
        """The grid stacked from each option's block (3, V, B, C), kept per what it reads (accelerator, co-load,
        family, rate): a new list of options mostly repeats blocks (every cell is an element-wise function of its
        option's figures, so a block is the same alone or in any grid)."""
        family = variants[0].family
        # (the pools' accelerators are registered when a list of them is first met, as they always were)
        self.memo.get(("prior_base", family, tuple(x[:2] for x in sig)), lambda: self._register(options))
        blocks = self.memo.table("prior_blocks")
        out = np.empty((3, len(options), len(variants), len(self.batch_sizes), len(self.concurrencies)))
        for i, (o, x) in enumerate(zip(options, sig)):
            key = (family, x, rate)
            block = blocks.get(key)
            if block is None:
                block = put_bounded(blocks, key, self._block(o.pool.accelerator, variants, x[2], rate))
            out[:, i] = block  # (what ``np.stack(blocks, axis=1)`` copies, without its per-block views)
        return out

    def _register(self, options: Sequence[PlacementOption]) -> bool:
        for o in options:
            self.accelerators[o.pool.accelerator.name] = o.pool.accelerator  # the pool's own figures win (a
        return True  # measurement names only the type)

    def _block(self, acc: Accelerator, variants: Sequence[Variant], co_load: float, rate: float) -> np.ndarray:
        """Log prior (3, V, B, C) of one option: ``Prior.adjust`` of its base table (V, 1+B, 2)."""
        table = self.memo.get(("prior", acc.name, acc.max_w, variants[0].family), lambda: np.array(
            [[self.prior.base(acc, v, b) for b in (1, *self.batch_sizes)] for v in variants]))
        base, lat1, en1 = table[:, 1:, :], table[:, 0, 0][:, None, None], table[:, 0, 1][:, None, None]
        b = np.array(self.batch_sizes, dtype=float)[None, :, None]
        c = np.array(self.concurrencies, dtype=float)[None, None, :]
        out = np.empty((3, len(variants), len(self.batch_sizes), len(self.concurrencies)))
        for i, a in enumerate(Prior.adjust(base[..., 0][..., None], base[..., 1][..., None], b, c,
                                           np.array(co_load, dtype=float), lat1, en1, rate)):
            out[i] = a  # broadcast into the block
        out.flags.writeable = False
        return out
