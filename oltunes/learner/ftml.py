"""FTML: Follow the Moving Leader (Zheng & Kwok, ICML 2017), as a river optimizer.

FTML is an FTRL variant whose "leader" weighs recent gradients more (an exponential moving average, like
Adam's first moment) and whose per-coordinate regulariser adapts like RMSprop/Adam's second moment. On a
drifting stream it forgets stale gradients geometrically, so it tracks a moving optimum faster than
FTRL-Proximal (which weighs every past gradient equally) or plain SGD (which has one global step size).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from river import optim, utils
from river.optim.base import DictLike, VectorLike


__all__ = ["FTML"]


class FTML(optim.base.Optimizer):
    """Follow the Moving Leader optimizer.

    Each step, for every coordinate *i* (one scalar weight, or one latent vector, per feature) with
    gradient :math:`g_t`:

    .. math::

        v_t &= \\beta_2 v_{t-1} + (1-\\beta_2) g_t^2 \\\\
        d_t &= \\frac{1-\\beta_1^t}{\\eta_t} \\left(\\sqrt{\\frac{v_t}{1-\\beta_2^t}} + \\epsilon\\right) \\\\
        \\sigma_t &= d_t - \\beta_1 d_{t-1} \\\\
        z_t &= \\beta_1 z_{t-1} + (1-\\beta_1) g_t - \\sigma_t \\theta_{t-1} \\\\
        \\theta_t &= -z_t / d_t

    Three paths share this rule:

    * ``step(w: dict, g: dict)`` — state keyed by the dict key. Values may be scalars **or numpy vectors**:
      a factorization machine should pass ``{feature: latent_vector}`` so that each feature keeps its own
      state. (river's FM passes ``dict(enumerate(latent))`` to one shared optimizer, which keys state by
      latent *index* and so mixes every feature's moments together; do not use it that way.)
      The step count *t* is kept per key, so a feature first seen late gets the same bias correction as
      one seen from the start.
    * ``step(w: ndarray, g: ndarray)`` — the whole array is one block of coordinates, *t* is global.
    * ``step_rows(table, rows, g)`` — a lean path for dense parameter tables (one row per feature): only
      ``rows`` are updated, state lives in arrays shaped like the table, *t* per row. This is what
      :class:`oltunes.learner.fm.FMRegressor` uses; it is numerically the dict path on the same keys.
      One instance may serve several tables (say an FM's weights and latents): each table's state is kept
      apart, by its row shape or by an explicit ``key``; a table whose row shape changes under the same key
      is refused rather than silently starting from zero state.

    The state is plain data: the instance pickles after any path, and :meth:`state_dict` (JSON) keeps the
    learning-rate schedule (a river scheduler: ``Constant``, ``InverseScaling``) and the step count, so a
    schedule resumes where it stopped.

    Parameters
    ----------
    lr
        Step size :math:`\\eta` (float or a river scheduler). The paper's reference value 0.0025 (the default
        here) is tuned for deep nets trained over many epochs. For single-pass online regression of
        log-latencies a larger rate is the tuned default: ``benchmarks/learner_accuracy.py`` picks 0.03 from
        {0.003, 0.01, 0.03, 0.1} on most seeds by progressive error (held-out MAPE ~2x lower than with 0.0025),
        and the FM and the Tuner default to ``lr=0.03``.
    beta_1
        Decay of the moving leader (how fast old gradients are forgotten).
    beta_2
        Decay of the second-moment estimate.
    eps
        Numerical floor.

    Examples
    --------
    >>> from oltunes.learner.ftml import FTML
    >>> opt = FTML(lr=0.1)
    >>> w = {"x": 0.0}
    >>> for _ in range(500):  # minimise (w - 3)^2 / 2
    ...     w = opt.step(w, {"x": w["x"] - 3.0})
    >>> round(float(w["x"]), 2)
    3.0

    References
    ----------
    Zheng, S. and Kwok, J.T., 2017. Follow the Moving Leader in Deep Learning. ICML 2017, PMLR 70:4110-4119.
    """

    def __init__(self, lr: float | optim.base.Scheduler = 0.0025, beta_1: float = 0.6, beta_2: float = 0.999,
                 eps: float = 1e-8) -> None:
        super().__init__(lr)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.eps = eps
        # Lazy state (river convention: __init__ only stores arguments).
        self._keyed: dict[Any, list[Any]] | None = None  # key -> [t, v, d, z]
        self._vec: list[Any] | None = None  # [v, d, z] for the whole-array path
        # table key -> {"t", "v", "d", "z"} shaped like that table
        self._rows: dict[str, dict[str, np.ndarray]] | None = None

    # -- the rule, shared by all three paths (works on scalars and arrays alike) -------------------------
    def _update(self, theta, g, t, v, d_prev, z, lr):
        """One step of ``theta`` given gradient ``g`` at step count ``t`` and the state ``v, d, z`` (the class
        docstring's formulas). Returns (theta, v, d, z)."""
        b1, b2 = self.beta_1, self.beta_2
        v = b2 * v + (1.0 - b2) * g * g
        d = (1.0 - b1**t) / lr * (np.sqrt(v / (1.0 - b2**t)) + self.eps)
        sigma = d - b1 * d_prev
        z = b1 * z + (1.0 - b1) * g - sigma * theta
        return -z / d, v, d, z

    def _step_with_dict(self, w: DictLike, g: DictLike) -> DictLike:
        if self._keyed is None:
            self._keyed = {}  # a plain dict (a defaultdict of a lambda would not pickle)
        lr = self.learning_rate
        for i, gi in g.items():
            st = self._keyed.get(i)
            if st is None:
                st = self._keyed[i] = [0, 0.0, 0.0, 0.0]
            st[0] += 1
            new, st[1], st[2], st[3] = self._update(w[i], gi, st[0], st[1], st[2], st[3], lr)
            w[i] = np.float64(new)  # a numpy scalar, as numpy's rule gave (river's FM calls ``.item()`` on sums)
        return w

    def _step_with_vector(self, w: VectorLike, g: VectorLike) -> VectorLike:
        if isinstance(w, utils.VectorDict) or isinstance(g, utils.VectorDict):
            raise NotImplementedError  # river then falls back to the keyed dict path
        if self._vec is None:
            self._vec = [np.zeros_like(w, dtype=float), np.zeros_like(w, dtype=float), np.zeros_like(w, dtype=float)]
        t = self.n_iterations + 1
        new, *self._vec = self._update(w, g, t, *self._vec, self.learning_rate)
        w[...] = new
        return w

    def step_rows(self, table: np.ndarray, rows: np.ndarray, g: np.ndarray, key: str | None = None) -> np.ndarray:
        """Update ``table[rows]`` in place given their gradients ``g`` (rows must be unique).

        State arrays grow with the table (new rows start at zero state, i.e. t = 0). ``key`` names the table's
        state (default: its row shape, so tables of different shapes never share state).
        """
        st = self._table_state(table, key)
        t = st["t"][rows] + 1
        st["t"][rows] = t
        t = t.reshape((-1,) + (1,) * (table.ndim - 1))
        table[rows], st["v"][rows], st["d"][rows], st["z"][rows] = self._update(
            table[rows], g, t, st["v"][rows], st["d"][rows], st["z"][rows], self.learning_rate)
        self.n_iterations += 1
        return table

    def _table_state(self, table: np.ndarray, key: str | None = None) -> dict[str, np.ndarray]:
        """The row path's state of ``table`` (``step_rows``' ``key``), grown to the table's rows."""
        key = key if key is not None else _shape_key(table.shape[1:])
        st = (self._rows or {}).get(key)
        if st is None or st["v"].shape[0] < table.shape[0] or st["v"].shape[1:] != table.shape[1:]:
            st = self._grow(key, table.shape)  # refuses a row shape that is not the key's
        return st

    def _grow(self, key: str, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
        if self._rows is None:
            self._rows = {}
        old = self._rows.get(key)
        if old is not None and old["v"].shape[1:] != shape[1:]:
            raise ValueError(f"FTML: the state {key!r} belongs to a table with rows shaped {old['v'].shape[1:]}, "
                             f"not {shape[1:]}; give each parameter table its own key (or its own FTML)")
        new = {"t": np.zeros(shape[0], dtype=np.int64), **{k: np.zeros(shape) for k in ("v", "d", "z")}}
        if old is not None:
            n = old["t"].shape[0]
            for k in new:
                new[k][:n] = old[k]
        self._rows[key] = new
        return new

    # -- JSON state (no pickle) ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain-JSON state: the learning-rate schedule, the iteration count and the row-path arrays per table
        (the keyed/vector paths are for small ad-hoc use and are not persisted)."""
        rows = None if self._rows is None else {
            key: {k: v.tolist() for k, v in st.items()} for key, st in self._rows.items()}
        return {"lr": _schedule_state(self.lr), "beta_1": self.beta_1, "beta_2": self.beta_2, "eps": self.eps,
                "n_iterations": self.n_iterations, "rows": rows}

    def load_state_dict(self, d: dict[str, Any]) -> FTML:
        self.n_iterations = int(d["n_iterations"])
        rows = d.get("rows")
        if rows is not None:
            if "t" in rows:  # state files before per-table keys: one table, keyed by its row shape
                rows = {_shape_key(np.asarray(rows["v"]).shape[1:]): rows}
            self._rows = {key: {k: np.asarray(v, dtype=np.int64 if k == "t" else float) for k, v in st.items()}
                          for key, st in rows.items()}
        return self

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> FTML:
        lr = _schedule_from_state(d.get("lr"))
        return cls(lr=lr, beta_1=d["beta_1"], beta_2=d["beta_2"], eps=d["eps"]).load_state_dict(d)


@functools.cache  # one string per row shape, built once (step_rows asks for it on every step)
def _shape_key(row_shape: tuple[int, ...]) -> str:
    return "rows" + "x".join(str(n) for n in row_shape)


# River schedulers whose parameters are plain numbers, so a state file can name and rebuild them.
_SCHEDULES = {"Constant": ("learning_rate",), "InverseScaling": ("learning_rate", "power")}


def _schedule_state(lr: optim.base.Scheduler) -> dict[str, Any]:
    name = type(lr).__name__
    if type(lr) is not getattr(optim.schedulers, name, None) or name not in _SCHEDULES:
        raise TypeError(f"FTML.state_dict: cannot save the learning-rate schedule {name}; "
                        f"savable: {', '.join(_SCHEDULES)}")
    return {"schedule": name, **{p: float(getattr(lr, p)) for p in _SCHEDULES[name]}}


def _schedule_from_state(s: Any) -> float | optim.base.Scheduler:
    if s is None:  # state files before schedules were saved: they held only constant rates, or none
        return 0.0025
    if isinstance(s, (int, float)):
        return float(s)
    name = s.get("schedule")
    if name not in _SCHEDULES:
        raise ValueError(f"FTML state: unknown learning-rate schedule {name!r}; known: {', '.join(_SCHEDULES)}")
    return getattr(optim.schedulers, name)(**{p: s[p] for p in _SCHEDULES[name]})
