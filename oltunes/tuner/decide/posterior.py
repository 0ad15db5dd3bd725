"""The estimate read as a posterior: what serving a candidate risks, and what trying one is worth.

Every prediction is a log: a candidate's true log metric is taken as Normal(predicted log, sd), with the sd read
from the margins the estimate already keeps (a margin is the 95th percentile of |log error|, so sd = margin / 1.96):

* **sd of the objective** (:func:`objective_sd`): the option's margin on the objective's target plus the
  (accelerator, variant) pair's novelty term ``novelty / sqrt(1 + visits)``. A pair never measured is only the
  prior's and the crossed correction's extrapolation: its estimate is the least certain.
* **what a trial can teach** (:func:`learnable_sd`): the part of that sd a measurement of the pair removes: the
  novelty term and the region's margin, both shrinking as ``1 / sqrt(1 + visits)``. A well measured pair has
  nothing left to reveal.
* **the probability of an SLO miss** (:func:`miss_probability`): the request latency's log above the SLO's, with the
  latency's own sd (its pessimistic request latency sits 1.96 sd above the mean).

Serving (:func:`risk_adjusted`) ranks by ``objective x exp(risk x sd) x (1 + miss_cost x P(miss))``: an upper
quantile of the objective (the winner's-curse correction: the lowest of many uncertain estimates is most likely
one that is too low, so unmeasured pairs are charged for their uncertainty instead of being chosen for it) and
the expected cost of missing the SLO. Trying (:func:`expected_improvement`): the expected gain over the incumbent
of a lognormal objective, ``E[max(0, T - X)]``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from oltunes.tuner.model.estimate import LAT, Estimate

__all__ = ["MISS_AT_SLO", "Z95", "expected_improvement", "learnable_sd", "miss_probability", "objective_sd",
           "risk_adjusted"]

Z95 = 1.959964  # a margin is a 95th percentile of |log error|: sd = margin / Z95 for a normal error
MISS_AT_SLO = float(ndtr(-Z95))  # P(miss) of a cell whose pessimistic request latency is its SLO: a feasible one's most


def objective_sd(est: Estimate, target: int) -> np.ndarray:
    """(P, V): sd of each (option, variant) pair's log objective (the target's margin + the pair's novelty); kept
    with the scored grid it reads (``Estimate.shared``) until the next observation."""
    kept = getattr(est, "shared", None)
    key = ("objective_sd", target)
    out = kept.get(key) if kept is not None else None
    if out is None:
        out = (est.marg[:, target][:, None] + est.novel) / Z95
        if kept is not None:
            kept[key] = out
    return out


def learnable_sd(est: Estimate, target: int) -> np.ndarray:
    """(P, V): the part of :func:`objective_sd` that measuring the pair would remove (both terms shrink as
    ``1 / sqrt(1 + visits)``; the novelty term already does)."""
    return (est.marg[:, target][:, None] / np.sqrt(1.0 + est.visits) + est.novel) / Z95


def miss_probability(est: Estimate, flat: np.ndarray) -> np.ndarray:
    """P(request latency > SLO) at raveled cells ``flat``: the pessimistic request latency is the mean's 1.96-sd
    quantile, with the latency's sd = (its margin + the pair's novelty) / 1.96 (the batch latency's pessimism)."""
    _, V, B, C = est.shape
    sd = objective_sd(est, LAT).ravel()[flat // (B * C)]
    req = est.req_lat
    req = (req if req.shape == est.shape else np.broadcast_to(req, est.shape)).ravel()[flat]
    return ndtr(-(np.log(est.job.slo_ms / req) / np.maximum(sd, 1e-9) + Z95))


def risk_adjusted(est: Estimate, target: int, obj: np.ndarray, flat: np.ndarray, risk: float,
                  miss_cost: float) -> np.ndarray:
    """The objective at raveled cells ``flat`` charged for its uncertainty (``exp(risk x sd)``: an upper quantile)
    and for the expected cost of an SLO miss (``1 + miss_cost x P(miss)``)."""
    _, V, B, C = est.shape
    sd = objective_sd(est, target).ravel()[flat // (B * C)]
    out = obj.ravel()[flat] * np.exp(risk * sd)
    if miss_cost > 0:
        out *= 1.0 + miss_cost * miss_probability(est, flat)
    return out


def expected_improvement(incumbent: float, log_mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``E[max(0, incumbent - X)]`` for ``log X ~ Normal(log_mean, sd)`` (element-wise; sd 0: the plain gain)."""
    if not incumbent > 0:  # nothing to improve on (a free objective)
        return np.zeros(np.shape(log_mean))
    log_t = np.log(incumbent)
    s = np.maximum(sd, 1e-12)
    d = (log_t - log_mean) / s
    ei = incumbent * ndtr(d) - np.exp(log_mean + 0.5 * s * s) * ndtr(d - s)
    return np.where(sd > 0, np.maximum(ei, 0.0), np.maximum(incumbent - np.exp(log_mean), 0.0))
