"""The dense factorization machine's parameter tables and their bookkeeping: the feature vocabulary (one table row
per feature), the parameter version memos check, target standardisation and the JSON state.

Scoring (:mod:`oltunes.learner.fm_scoring`) and learning (:mod:`oltunes.learner.fm_learning`) are mixins over
these tables; the estimators that combine them are in :mod:`oltunes.learner.fm`.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from river import base, optim

from oltunes.jsonstate import rng_state, set_rng_state
from oltunes.learner.ftml import FTML

DEFAULT_LR = 0.03  # FTML step size picked by benchmarks/learner_accuracy.py (progressive error, lr grid)
_BIAS = "__bias__"  # row 0: the intercept; its latent row stays zero and is never updated
_VERSIONS = itertools.count(1)  # process-wide, so a memo can never match another model's parameters


class FMState(base.Base):
    """Hyper-parameters and parameter tables shared by the dense FMs; subclasses name the targets."""

    def __init__(self, n_factors: int = 8, weight_optimizer: optim.base.Optimizer | None = None,
                 latent_optimizer: optim.base.Optimizer | None = None, l2_weight: float = 0.0,
                 l2_latent: float = 1e-4, init_std: float = 0.01, clip_gradient: float = 1.0,
                 seed: int | None = None, replay: int = 0, replay_window: int = 256,
                 robust: float | None = None, replay_horizon: int | None = None, standardize: bool = False) -> None:
        self.n_factors = n_factors
        self.weight_optimizer = weight_optimizer
        self.latent_optimizer = latent_optimizer
        self.l2_weight = l2_weight
        self.l2_latent = l2_latent
        self.init_std = init_std
        self.clip_gradient = clip_gradient
        self.seed = seed
        self.replay = replay
        self.replay_window = replay_window
        self.robust = robust
        self.replay_horizon = replay_horizon
        self.standardize = standardize
        self._index: dict[str, int] | None = None  # lazy state

    def _unit_test_skips(self) -> set[str]:
        # Latent vectors are drawn from the seeded generator when a feature is first seen, so the order features
        # arrive in changes which feature gets which draw: a reshuffled sample yields a different, equally valid
        # model. River's own FM declares the same skip for the same reason.
        return {"check_shuffle_features_no_impact"}

    # -- state ---------------------------------------------------------------------------------------------
    @property
    def _n_targets(self) -> int:
        return len(self._target_names())

    def _target_names(self) -> tuple[str, ...]:
        raise NotImplementedError

    def _new_version(self) -> None:
        """Mark a parameter change (memoised grid blocks and plans check :attr:`parameters_version`)."""
        self._version = next(_VERSIONS)

    def _init_state(self) -> None:
        self._index = {_BIAS: 0}
        self._W = np.zeros((16, self._n_targets))
        self._V = np.zeros((16, self._n_targets, self.n_factors))
        self._rng = np.random.default_rng(self.seed)
        self._wopt = self.weight_optimizer if self.weight_optimizer is not None else FTML(lr=DEFAULT_LR)
        self._vopt = self.latent_optimizer if self.latent_optimizer is not None else FTML(lr=DEFAULT_LR)
        self.n_learned = 0
        self._new_version()
        # Replay buffer of recent observations (x, y, mask); its own generator so that replay does not shift
        # the latent initialisation of later features.
        self._buffer: deque = deque(maxlen=max(int(self.replay_window), 1))
        self._replay_rng = np.random.default_rng(None if self.seed is None else self.seed + 1)
        self._scale = np.zeros(self._n_targets)  # running |residual| per target (robust weighting)
        self._n_scale = np.zeros(self._n_targets, dtype=np.int64)
        # Running mean / variance of each target (Welford), used when ``standardize``.
        self._y_n = np.zeros(self._n_targets, dtype=np.int64)
        self._y_mean = np.zeros(self._n_targets)
        self._y_m2 = np.zeros(self._n_targets)
        self._mu = np.zeros(self._n_targets)
        self._sd = np.ones(self._n_targets)

    @property
    def parameters_version(self) -> int:
        """Changes whenever any parameter changes (process-wide unique: safe as a memo key)."""
        return 0 if self._index is None else self._version

    @property
    def vocabulary_version(self) -> int:
        """Changes whenever a new feature gets a row (callers caching index arrays invalidate on it)."""
        return 0 if self._index is None else len(self._index)

    def _row(self, name: str) -> int:
        r = self._index.get(name)
        if r is None:
            r = len(self._index)
            if r >= self._W.shape[0]:
                cap = 2 * self._W.shape[0]
                self._W = np.concatenate([self._W, np.zeros_like(self._W)])[:cap]
                self._V = np.concatenate([self._V, np.zeros_like(self._V)])[:cap]
            self._V[r] = self._rng.normal(0.0, self.init_std, size=self._V.shape[1:])
            self._index[name] = r
            self._new_version()
        return r

    def index(self, xs: Sequence[Mapping[str, float]]) -> tuple[np.ndarray, np.ndarray]:
        """Encode feature dicts as padded (rows, values) arrays of shape (len(xs), max features).

        Unknown and zero-valued features map to row 0 with value 0 (they contribute nothing).
        """
        if self._index is None:
            self._init_state()
        idx = self._index
        m = max((len(x) for x in xs), default=0) or 1
        rows = np.zeros((len(xs), m), dtype=np.intp)
        vals = np.zeros((len(xs), m))
        for i, x in enumerate(xs):
            j = 0
            for name, v in x.items():
                r = idx.get(name)
                if r is not None and v != 0.0:
                    rows[i, j] = r
                    vals[i, j] = v
                    j += 1
        return rows, vals

    # -- target standardisation ----------------------------------------------------------------------------
    def _unscale(self, out: np.ndarray, axis: int = -1) -> np.ndarray:
        """FM outputs (standardised units) -> target units: ``mu + sd * out`` along the target axis."""
        if not self.standardize:
            return out
        shape = [1] * out.ndim
        shape[axis] = -1
        return out * self._sd.reshape(shape) + self._mu.reshape(shape)

    def _update_target_stats(self, y: np.ndarray, mask: np.ndarray) -> None:
        """Welford's running mean and variance per target, of the measured ones (``mask``)."""
        n = self._y_n = self._y_n + mask
        d = np.where(mask, y - self._y_mean, 0.0)
        self._y_mean = self._y_mean + d / np.maximum(n, 1)
        self._y_m2 = self._y_m2 + d * np.where(mask, y - self._y_mean, 0.0)
        self._mu = self._y_mean.copy()
        var = np.where(n > 1, self._y_m2 / np.maximum(n, 1), 0.0)
        self._sd = np.where(var > 1e-12, np.sqrt(var), 1.0)

    # -- JSON state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self._index is None:
            self._init_state()
        n = len(self._index)
        out: dict[str, Any] = {
            "params": {"n_factors": self.n_factors, "l2_weight": self.l2_weight, "l2_latent": self.l2_latent,
                       "init_std": self.init_std, "clip_gradient": self.clip_gradient, "seed": self.seed,
                       "replay": self.replay, "replay_window": self.replay_window, "robust": self.robust,
                       "replay_horizon": self.replay_horizon, "standardize": self.standardize},
            "features": list(self._index),
            "W": self._W[:n].tolist(),
            "V": self._V[:n].tolist(),
            "rng": rng_state(self._rng),
            "n_learned": self.n_learned,
            "replay_rng": rng_state(self._replay_rng),
            "buffer": [[r.tolist(), v.tolist(), y.tolist(), m.tolist(), w] for r, v, y, m, w in self._buffer],
            "residual_scale": self._scale.tolist(),
            "residual_scale_n": self._n_scale.tolist(),
            "target_stats": [self._y_n.tolist(), self._y_mean.tolist(), self._y_m2.tolist()],
        }
        for name, opt in (("weight_optimizer", self._wopt), ("latent_optimizer", self._vopt)):
            if not isinstance(opt, FTML):
                raise TypeError(f"state_dict supports FTML optimizers only, {name} is {type(opt).__name__}")
            out[name] = opt.state_dict()
        return out

    def load_state_dict(self, d: dict[str, Any]) -> FMState:
        self._init_state()
        feats = d["features"]
        self._index = {f: i for i, f in enumerate(feats)}
        cap = max(16, 1 << math.ceil(math.log2(max(len(feats), 1))))
        self._W = np.zeros((cap, self._n_targets))
        self._V = np.zeros((cap, self._n_targets, self.n_factors))
        self._W[: len(feats)] = np.asarray(d["W"], dtype=float).reshape(len(feats), self._n_targets)
        self._V[: len(feats)] = np.asarray(d["V"], dtype=float).reshape(len(feats), self._n_targets, self.n_factors)
        set_rng_state(self._rng, d["rng"])
        self.n_learned = int(d["n_learned"])
        # Keys added with replay / robust weighting: absent in older state files (then: empty, cold).
        if "replay_rng" in d:
            set_rng_state(self._replay_rng, d["replay_rng"])
        for r, v, y, m, w in d.get("buffer", []):
            self._buffer.append((np.asarray(r, dtype=np.intp), np.asarray(v, dtype=float), np.asarray(y, dtype=float),
                                 np.asarray(m, dtype=bool), float(w)))
        if "residual_scale" in d:
            self._scale = np.asarray(d["residual_scale"], dtype=float)
            self._n_scale = np.asarray(d["residual_scale_n"], dtype=np.int64)
        if "target_stats" in d:
            n, mean, m2 = d["target_stats"]
            self._y_n = np.asarray(n, dtype=np.int64)
            self._y_mean = np.asarray(mean, dtype=float)
            self._y_m2 = np.asarray(m2, dtype=float)
            self._update_target_stats(np.zeros(self._n_targets), np.zeros(self._n_targets, dtype=bool))
        self._new_version()
        self._wopt = FTML.from_state_dict(d["weight_optimizer"])
        self._vopt = FTML.from_state_dict(d["latent_optimizer"])
        return self
