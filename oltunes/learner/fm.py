"""Factorization machines with dense parameter tables: river's estimator interface, numpy speed.

river's ``facto.FMRegressor`` keeps its parameters in dicts and costs ~1 ms per ``learn_one`` and ~0.25 ms
per ``predict_one`` here; the tuner must score thousands of candidates per request and learn thousands of
measurements per second. These models keep the same equation and interface, but store weights and latent
vectors in numpy tables (one row per feature, a vocabulary maps feature names to rows), so that

* ``learn_one`` gathers the active rows once and hands the optimizer one block (``step_rows``, with state
  kept per feature — see :class:`~oltunes.learner.ftml.FTML`);
* ``predict_many`` scores many encoded rows in one pass with the O(nk) identity
  :math:`\\sum_{i<j}\\langle v_i,v_j\\rangle x_i x_j = \\tfrac12(\\lVert\\sum_i v_i x_i\\rVert^2 - \\sum_i\\lVert v_i x_i\\rVert^2)`;
* ``predict_grid`` scores an outer product of disjoint feature *parts* (placement × variant × batch ×
  concurrency) by combining per-part sums — no per-candidate gather at all.

Any river optimizer works; others than FTML are driven through their keyed dict path with one
key per (feature, target[, factor]) so that their state is per parameter too.

The estimators here combine three mixins over one set of tables: :mod:`~oltunes.learner.fm_state` (vocabulary,
versions, standardisation, JSON state), :mod:`~oltunes.learner.fm_scoring` and :mod:`~oltunes.learner.fm_learning`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from river import base, facto, optim

from oltunes.learner.fm_learning import FMLearning
from oltunes.learner.fm_scoring import FMScoring
from oltunes.learner.fm_state import FMState

__all__ = ["ONLINE_SETTINGS", "FMRegressor", "MultiFMRegressor", "RiverFMRegressor"]

# The measured online-learning settings: learn each observation as it arrives, replay 16 recent ones while
# the stream is short (tapering after 256), down-weight outliers, standardise targets. benchmarks/
# learner_accuracy.py: held-out MAPE after 200 observations about 4x lower than a plain single pass; the
# tuner's observe rate with them ~3,600/s at 500-3,500 observations (~7,000/s without), on this machine.
# Opt-in — the classes default to a plain single pass — as ``MultiFMRegressor(..., **ONLINE_SETTINGS)``.
ONLINE_SETTINGS: dict[str, Any] = {"replay": 16, "replay_window": 256, "replay_horizon": 256, "robust": 2.0,
                                   "standardize": True}


class FMRegressor(FMScoring, FMLearning, FMState, base.Regressor):
    """Factorization machine regressor (squared loss), dense tables, FTML by default.

    Parameters
    ----------
    n_factors
        Dimension of the latent vectors.
    weight_optimizer, latent_optimizer
        river optimizers for the linear weights (incl. intercept) and the latent vectors. Default
        ``FTML(lr=0.03)`` each (``DEFAULT_LR``). FTML steps the touched rows of a table at once (``step_rows``).
    l2_weight, l2_latent
        L2 penalties.
    init_std
        Std of the normal initialisation of a new feature's latent vector (small, so that untrained
        interactions add little noise).
    clip_gradient
        Bound on the loss gradient (squared loss inside, absolute loss outside: a Huber loss). On log
        targets 1.0 means errors beyond e^1 stop growing the step; without it one wild measurement can
        throw the latent vectors into a divergent oscillation.
    seed
        Seed of the latent initialisation (and, + 1, of the replay draws).
    replay
        Extra steps per observation on observations drawn uniformly from the last ``replay_window`` (a
        bounded replay buffer; 0 = each observation is learned once, the default). Each call still learns
        one observation (``n_learned``); the model just gets more out of a short stream. It costs ``replay + 1``
        gradient steps per observation (~0.12 ms each for the tuner's 3-target model here): use
        ``replay_horizon`` in a long-running service. See ``ONLINE_SETTINGS`` for measured values.
    replay_window
        Size of the replay buffer (older observations drop out: replay still follows drift).
    standardize
        Learn on standardised targets ``(y - mean) / std`` (running, per target) and map outputs back, so that
        the intercept is not walked up from zero at a small step size and the replay buffer (which keeps raw
        targets) is always scaled with the current statistics. False (the default) = raw targets.
    replay_horizon
        If set (H), replay tapers after H observations to ``replay x (H / n)^2`` per observation
        (stochastically rounded): replay matters while the stream is short; later the stream supplies the
        passes, the per-observation cost falls back to one step, and drift is tracked by FTML alone.
        None = always ``replay``.
    robust
        If set (e.g. 2.0), residuals beyond ``robust`` x the running mean |residual| are down-weighted by
        ``(robust s / |r|)^2``: one failed measurement cannot drag the model (``fm_learning.FMLearning._robust_weight``).
        None = off (the default).

    Examples
    --------
    >>> from oltunes.learner import FMRegressor
    >>> fm = FMRegressor(seed=0)
    >>> data = [({"acc=gpu": 1, "fam=bert": 1}, 1.0), ({"acc=cpu": 1, "fam=bert": 1}, 3.0),
    ...         ({"acc=gpu": 1, "fam=cnn": 1}, 0.5), ({"acc=cpu": 1, "fam=cnn": 1}, 1.5)]
    >>> for _ in range(300):
    ...     for x, y in data:
    ...         fm.learn_one(x, y)
    >>> round(fm.predict_one({"acc=cpu": 1, "fam=bert": 1}), 1)
    3.0
    """

    def _target_names(self) -> tuple[str, ...]:
        return ("y",)

    def learn_one(self, x: dict, y: float, w: float = 1.0) -> None:
        self._learn(x, np.array([float(y)]), np.array([True]), w)

    def predict_one(self, x: dict) -> float:
        rows, vals = self.index([x])
        return float(self._raw_many(rows, vals)[0, 0])

    def predict_many(self, rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Vectorised predictions for index arrays from :meth:`index`."""
        return self._raw_many(rows, vals)[:, 0]

    @classmethod
    def _unit_test_params(cls):
        yield {"seed": 42}


class MultiFMRegressor(FMScoring, FMLearning, FMState, base.MultiTargetRegressor):
    """One factorization machine per target, sharing one feature vocabulary and one gather.

    Learning a measurement updates every target present in ``y``; absent (or ``None``) targets are skipped.
    Used by the tuner for log p99 latency, log energy per item and log throughput.

    Parameters
    ----------
    targets
        Target names, in output order.
    n_factors, weight_optimizer, latent_optimizer, l2_weight, l2_latent, init_std, clip_gradient, seed, replay,
    replay_window, robust, replay_horizon, standardize
        As :class:`FMRegressor` (the replay buffer keeps each observation's target mask; robust scales are
        per target).

    Examples
    --------
    >>> from oltunes.learner import MultiFMRegressor
    >>> fm = MultiFMRegressor(targets=("lat", "energy"), seed=0)
    >>> for _ in range(300):
    ...     fm.learn_one({"acc=gpu": 1}, {"lat": 1.0, "energy": 2.0})
    ...     fm.learn_one({"acc=cpu": 1}, {"lat": 3.0})
    >>> round(fm.predict_one({"acc=cpu": 1})["lat"], 1)
    3.0
    """

    def __init__(self, targets: Sequence[str] = ("y",), n_factors: int = 8,
                 weight_optimizer: optim.base.Optimizer | None = None,
                 latent_optimizer: optim.base.Optimizer | None = None, l2_weight: float = 0.0,
                 l2_latent: float = 1e-4, init_std: float = 0.01, clip_gradient: float = 1.0,
                 seed: int | None = None, replay: int = 0, replay_window: int = 256,
                 robust: float | None = None, replay_horizon: int | None = None, standardize: bool = False) -> None:
        super().__init__(n_factors, weight_optimizer, latent_optimizer, l2_weight, l2_latent, init_std,
                         clip_gradient, seed, replay, replay_window, robust, replay_horizon, standardize)
        self.targets = tuple(targets)

    def _target_names(self) -> tuple[str, ...]:
        return self.targets

    def learn_one(self, x: dict, y: dict, w: float = 1.0) -> None:
        self.learn_predict_one(x, y, w)

    def learn_predict_one(self, x: dict, y: dict, w: float = 1.0) -> np.ndarray:
        """Learn the targets in ``y``; return the raw predictions made just before the update (progressive
        validation without a second gather)."""
        given = [y.get(t) for t in self.targets]
        return self.learn_predict(x, np.array([0.0 if v is None else float(v) for v in given]),
                                  np.array([v is not None for v in given]), w)

    def learn_predict(self, x: dict, y: np.ndarray, mask: np.ndarray, w: float = 1.0) -> np.ndarray:
        """``learn_predict_one`` with the targets as arrays (n_targets,): their values ``y`` (any where not
        ``mask``) and which are given ``mask``."""
        return self._learn(x, y, mask, w)

    def predict_one(self, x: dict) -> dict[str, float]:
        rows, vals = self.index([x])
        out = self._raw_many(rows, vals)[0]
        return {t: float(v) for t, v in zip(self.targets, out)}

    def predict_many(self, rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Vectorised predictions (n, n_targets) for index arrays from :meth:`index`."""
        return self._raw_many(rows, vals)


class RiverFMRegressor(facto.FMRegressor):
    """river's own ``facto.FMRegressor``, with latent updates keyed per feature.

    river hands each feature's latent vector to the shared latent optimizer as ``dict(enumerate(vector))``,
    so a stateful optimizer (Adam, FTML, FTRL) keeps its moments per latent *index*, mixing every feature's
    history. This subclass passes ``{feature: vector}`` instead (FTML's keyed path accepts vector values), so
    the state is per feature. It is the reference implementation for tests; the tuner uses the dense
    :class:`MultiFMRegressor` (same equation, vectorised).

    Examples
    --------
    >>> from oltunes.learner.fm import RiverFMRegressor
    >>> from oltunes.learner.ftml import FTML
    >>> fm = RiverFMRegressor(n_factors=2, weight_optimizer=FTML(0.05), latent_optimizer=FTML(0.05),
    ...                       intercept_lr=0.05, seed=0)
    >>> for _ in range(300):
    ...     fm.learn_one({"a": 1.0}, 2.0)
    >>> round(fm.predict_one({"a": 1.0}), 1)
    2.0
    """

    def _update_latents(self, x, g_loss):
        v, l1, l2 = self.latents, self.l1_latent, self.l2_latent
        precomputed_sum = sum(v[j] * xj for j, xj in x.items())
        grads = {j: g_loss * (xj * precomputed_sum - v[j] * xj**2) + l1 * np.sign(v[j]) + l2 * v[j]
                 for j, xj in x.items()}
        current = {j: v[j] for j in x}
        updated = self.latent_optimizer.step(w=current, g=grads)
        for j in x:
            self.latents[j] = np.asarray(updated[j], dtype=float)
