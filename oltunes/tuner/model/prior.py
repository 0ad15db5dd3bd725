"""Cold-start priors: what the tuner believes before (and underneath) what it has measured.

The tuner's FM learns the *residual* ``log(measured) - log(prior)``. With no observations its prediction is
the prior; every measurement corrects it where the prior is wrong, and the FM's pairwise terms carry the
correction to similar configurations. So a good prior shortens learning, and a poor one only costs samples.

Two priors, registered by name (``Prior.make("heuristic")``, ``Prior.make("profile", rows=[...])``):

* ``heuristic`` — conservative rule of thumb: latency of one batch at concurrency 1, alone on its device
  ``= 1.5 x (overhead + 200 x params x precision_factor x batch^0.75 / achieved_flops)`` on a CPU; on a GPU the
  same for a reference GPU (10 TFLOP/s, 1 ms overhead) x ``10 / achieved_flops``, i.e. *separable*: one factor per
  GPU for every model, which is what lets the tuner's correction (``oltunes.tuner.model.correction``) carry a GPU's
  measured offset to all variants on it and a variant's to all GPUs (measured: ``benchmarks/heldout_accelerator.py``); energy per item
  ``= max board power x latency / batch`` (full power: an upper bound). Achieved FLOP/s per accelerator
  type are rough, deliberately low figures (``ACHIEVED_TFLOPS``); unknown types scale with board power.
* ``profile`` — a table the user supplies (CSV or list of dicts) with columns
  ``accelerator, variant, batch_size, latency_ms[, energy_j_per_item]`` (e.g. from a profiling run of the
  model zoo). Exact matches are used as given; another batch size of the same (accelerator, variant) is
  scaled from the nearest profiled one; anything else falls back to the heuristic.

Both then apply the same adjustments for concurrency *c* and co-runner load *L* (sum of co-runners' loads):
latency x ``(1 + 0.5 (c-1)) (1 + 0.5 L)``, throughput ``= 1000 b c / latency``, energy per item x
``(1 + 0.25 L)``; for streaming jobs, latency and energy are those of the batch dynamic batching actually
forms at the job's rate (``Prior.adjust``). ``margin`` is the prior's own |log error| bound, used until
measurements replace it.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oltunes.errors import DataError, invalid
from oltunes.profiles import accelerator_kind
from oltunes.registry import Registered
from oltunes.types import Accelerator, Variant

__all__ = ["Prior", "HeuristicPrior", "ProfilePrior", "ProfileRow", "ACHIEVED_TFLOPS"]

# Deliberately low "achieved in inference" FLOP/s (TFLOP/s) per accelerator type: a prior must err slow.
ACHIEVED_TFLOPS: dict[str, float] = {
    "cpu": 0.3, "p100": 4.0, "t4": 5.0, "l4": 10.0, "a10": 10.0, "v100": 10.0, "a100": 20.0, "h100": 40.0,
}
# The GPU whose launch overhead (1 ms) the heuristic assumes (a V100/A10-class part); every other GPU scales as a
# whole from it. (An H100-fast reference, erring slower, predicted the held-out GPU a little better but set off a
# burst of FM oscillation in tests/tuner/test_grouping.py's trainer: not kept.)
_REF_GPU_TFLOPS = 10.0
_PRECISION_FACTOR = {"fp32": 1.0, "fp16": 0.6, "int8": 0.5}
_DEFAULT_PARAMS = 25e6  # when a variant does not say (about a ResNet-50)
UNKNOWN_SIZE_MARGIN = 1.5  # x4.5 either way: a variant with no parameter count or size is a guess


def _tflops(acc: Accelerator) -> float:
    return ACHIEVED_TFLOPS.get(acc.name, acc.max_w / 30.0)


def _params(v: Variant) -> float:
    if v.params:
        return float(v.params)
    if v.bytes:
        return v.bytes / (4.0 if v.precision == "fp32" else 2.0 if v.precision == "fp16" else 1.0)
    return _DEFAULT_PARAMS


class Prior(Registered, root=True):
    """Base class: ``base()`` gives (latency ms, energy J/item) at concurrency 1 alone on the device."""

    margin: ClassVar[float] = 0.7  # |log error| the prior is trusted to within (x2 either way)
    # How many measurements the prior is worth: its weight against the first measurements in the tuner's pooled
    # correction (``oltunes.tuner.model.correction``). A rule of thumb is worth one; a profile table of the very
    # configurations more (its error is per (variant, accelerator), which the correction's finer levels fix).
    evidence: ClassVar[float] = 1.0

    def base(self, accelerator: Accelerator, variant: Variant, batch_size: int) -> tuple[float, float]:
        raise NotImplementedError

    def margin_of(self, variant: Variant) -> float:
        """How far (|log|) this prior may be off for a variant; wider when the variant's size is unknown."""
        return self.margin if (variant.params or variant.bytes) else UNKNOWN_SIZE_MARGIN

    @staticmethod
    def heuristic(accelerator: Accelerator, variant: Variant, batch_size: int) -> tuple[float, float]:
        gflop = 200.0 * _params(variant) * _PRECISION_FACTOR[variant.precision] / 1e9
        if accelerator_kind(accelerator.name) == "cpu":
            lat = 1.5 * (0.3 + gflop * batch_size**0.75 / _tflops(accelerator))  # GFLOP / TFLOP/s = ms
        else:  # a reference GPU's latency x its speed ratio: separable, so one factor per GPU corrects all models
            lat = 1.5 * (1.0 + gflop * batch_size**0.75 / _REF_GPU_TFLOPS) * _REF_GPU_TFLOPS / _tflops(accelerator)
        return lat, accelerator.max_w * lat / 1000.0 / batch_size

    @staticmethod
    def adjust(base_lat: Any, base_energy: Any, batch: Any, conc: Any, co_load: Any, lat1: Any = None,
               energy1: Any = None, rate: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Log (request latency, energy per item, throughput) for broadcastable arrays of base values.

        ``base_*`` are the values of a full batch of ``batch`` items. For a streaming job (``rate`` > 0 req/s,
        ``lat1``/``energy1`` = the batch-1 values) the worker batches dynamically: a batch holds what queued
        while the previous one ran, about ``b_eff = min(b, 1 + rate x lat1 / 1000 / c)`` requests, so latency
        and energy per item are those of ``b_eff`` (scaled from batch 1 by ``b^0.75``), while the throughput
        capacity stays that of full batches.
        """
        # In log space: one log per input array, the rest are broadcast additions (the tuner calls this on
        # whole candidate grids).
        log_slow = np.log1p(0.5 * (np.asarray(conc) - 1.0)) + np.log1p(0.5 * np.asarray(co_load))
        log_co_energy = np.log1p(0.25 * np.asarray(co_load))
        log_thr = np.log(1000.0 * np.asarray(batch) * conc) - np.log(base_lat) - log_slow
        if rate > 0 and lat1 is not None:
            log_b_eff = np.log(np.minimum(batch, 1.0 + rate * np.asarray(lat1) / 1000.0 / conc))
            log_lat = np.log(lat1) + 0.75 * log_b_eff + log_slow
            log_energy = np.log(energy1) - 0.25 * log_b_eff + log_co_energy
        else:
            log_lat = np.log(base_lat) + log_slow
            log_energy = np.log(base_energy) + log_co_energy
        return log_lat, log_energy, log_thr

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Prior:
        d = dict(d)
        return cls.make(d.pop("name"), **d)


class HeuristicPrior(Prior, name="heuristic"):
    """Conservative rule of thumb from parameter count, batch size and accelerator speed (module docstring).

    Examples
    --------
    >>> from oltunes.inventory import CATALOG
    >>> from oltunes.types import Variant
    >>> from oltunes.tuner.model.prior import Prior
    >>> v = Variant(family="bert", name="bert-base", size="base", accuracy=0.93, params=110_000_000)
    >>> lat, energy = Prior.make("heuristic").base(CATALOG["a100"], v, 1)
    >>> round(lat, 1)
    2.4
    """

    margin = 0.7

    def base(self, accelerator: Accelerator, variant: Variant, batch_size: int) -> tuple[float, float]:
        return self.heuristic(accelerator, variant, batch_size)


class ProfileRow(BaseModel):
    """One profiled point: a variant on an accelerator type at one batch size (concurrency 1, alone)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    accelerator: str = Field(min_length=1)
    variant: str = Field(min_length=1)
    batch_size: int = Field(ge=1)
    latency_ms: float = Field(gt=0)
    energy_j_per_item: float | None = Field(default=None, gt=0)


class ProfilePrior(Prior, name="profile"):
    """A user-supplied profile table (module docstring), heuristic where it has no entry.

    Parameters
    ----------
    rows
        Profile rows (dicts or ProfileRow); ``ProfilePrior.from_csv(path)`` reads a CSV with the same columns.

    Examples
    --------
    >>> from oltunes.inventory import CATALOG
    >>> from oltunes.types import Variant
    >>> v = Variant(family="cnn", name="cnn-s", size="s", accuracy=0.7, params=5_000_000)
    >>> prior = ProfilePrior(rows=[{"accelerator": "t4", "variant": "cnn-s", "batch_size": 1, "latency_ms": 2.0}])
    >>> prior.base(CATALOG["t4"], v, 1)[0], prior.base(CATALOG["t4"], v, 4)[0]
    (2.0, 5.656854249492381)
    """

    margin = 0.3
    evidence = 10.0

    def __init__(self, rows: Iterable[Mapping[str, Any] | ProfileRow] = ()) -> None:
        parsed: list[ProfileRow] = []
        for i, r in enumerate(rows):
            try:
                parsed.append(r if isinstance(r, ProfileRow) else ProfileRow.model_validate(r))
            except ValidationError as e:
                raise invalid(e, f"profile row {i}") from e
        self.rows = parsed
        self._table: dict[tuple[str, str], dict[int, ProfileRow]] = {}
        for r in parsed:
            self._table.setdefault((r.accelerator, r.variant), {})[r.batch_size] = r

    @classmethod
    def from_csv(cls, path: str | Path) -> ProfilePrior:
        try:
            with open(path, newline="") as f:
                rows = [{k: v for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]
        except FileNotFoundError:
            raise DataError(f"profile table not found: {path}") from None
        return cls(rows)

    def base(self, accelerator: Accelerator, variant: Variant, batch_size: int) -> tuple[float, float]:
        by_batch = self._table.get((accelerator.name, variant.name))
        if not by_batch:
            return self.heuristic(accelerator, variant, batch_size)
        if batch_size in by_batch:
            r = by_batch[batch_size]
            scale = 1.0
        else:  # nearest profiled batch size, scaled sub-linearly (batching amortises fixed costs)
            nb = min(by_batch, key=lambda b: abs(math.log(b / batch_size)))
            r = by_batch[nb]
            scale = (batch_size / nb) ** 0.75
        lat = r.latency_ms * scale
        energy = (r.energy_j_per_item * scale * r.batch_size / batch_size if r.energy_j_per_item is not None
                  else accelerator.max_w * lat / 1000.0 / batch_size)
        return lat, energy

    def margin_of(self, variant: Variant) -> float:
        if any(v == variant.name for _, v in self._table):
            return self.margin
        return HeuristicPrior.margin if (variant.params or variant.bytes) else UNKNOWN_SIZE_MARGIN

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rows": [r.model_dump() for r in self.rows]}
