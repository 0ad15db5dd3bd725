"""Running residual quantiles per region: how wrong the model has recently been, as a margin.

The tuner records each prediction's error *before* learning from the measurement (progressive validation),
per (target, region) — a region is an accelerator type, where errors differ most. The margin is a rolling
high quantile of |log residual|, shrunk towards a prior margin while a region has few residuals, so that a
region the model has not seen yet gets a wide margin and exploration there stays on the safe side.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from oltunes.percentile import quantiles

__all__ = ["ResidualQuantiles"]


class ResidualQuantiles:
    """Rolling |residual| quantiles keyed by region, with shrinkage to a prior margin.

    Parameters
    ----------
    q
        Quantile of |residual| used as margin (0.95 keeps ~95% of predictions inside it).
    window
        Residuals kept per region (older ones are forgotten: the margin follows drift).
    prior_weight
        Pseudo-count of the prior margin: margin = (n * quantile + prior_weight * prior) / (n + prior_weight).

    Examples
    --------
    >>> from oltunes.learner.uncertainty import ResidualQuantiles
    >>> rq = ResidualQuantiles(q=0.9, window=100, prior_weight=0)
    >>> for r in [0.1, -0.2, 0.05, 0.3, -0.1, 0.0, 0.15, -0.05, 0.2, 0.1]:
    ...     rq.update("t4", r)
    >>> round(rq.margin("t4", prior=1.0), 2)
    0.21
    """

    def __init__(self, q: float = 0.95, window: int = 200, prior_weight: float = 5.0) -> None:
        self.q = q
        self.window = window
        self.prior_weight = prior_weight
        self._res: dict[str, deque[float]] = {}
        self._cache: dict[str, float] = {}

    def update(self, region: str, residual: float) -> None:
        d = self._res.get(region)
        if d is None:
            d = self._res[region] = deque(maxlen=self.window)
        d.append(abs(float(residual)))
        self._cache.pop(region, None)

    def count(self, region: str) -> int:
        d = self._res.get(region)
        return 0 if d is None else len(d)

    def quantile(self, region: str) -> float | None:
        if region in self._cache:
            return self._cache[region]
        d = self._res.get(region)
        if not d:
            return None
        v = quantiles(d, (self.q,))[0]  # np.quantile's
        self._cache[region] = v
        return v

    def margin(self, region: str, prior: float) -> float:
        """Margin (same unit as the residuals) for a region; ``prior`` when it has no residuals yet."""
        n = self.count(region)
        if n == 0:
            return prior
        return (n * self.quantile(region) + self.prior_weight * prior) / (n + self.prior_weight)

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q, "window": self.window, "prior_weight": self.prior_weight,
                "residuals": {k: list(v) for k, v in self._res.items()}}

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> ResidualQuantiles:
        rq = cls(q=d["q"], window=d["window"], prior_weight=d["prior_weight"])
        for k, v in d["residuals"].items():
            rq._res[k] = deque((float(x) for x in v), maxlen=rq.window)
        return rq
