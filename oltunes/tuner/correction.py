"""Pooled correction of the prior: fast, hierarchical, and exact where something was measured.

The prior can be wrong by a large common factor (the heuristic prior is 15-50x too fast for the ONNX Runtime
latencies behind the simulator) and the FM, one small gradient step per observation, needs hundreds of
observations to learn an offset that size — while the safety margins, built from its errors, stay wide and
rule out almost everything. This correction learns the log residual ``log(measured) - log(prior)`` by partial
pooling along a chain of ever more specific groups of configurations::

    all  ->  accelerator  ->  accelerator x family  ->  accelerator x variant  ->  accelerator x variant x b x c

Each group's estimate is the mean of its residuals shrunk towards its parent's estimate by a pseudo-count
``k`` (a Gaussian posterior mean with equal noise): ``est = (S + k est(parent)) / (n + k)``. So one measurement
moves every related candidate (its accelerator, its family there), a configuration measured n times converges
to what was measured (weight ``n / (n + 1)``), and the prior's own confidence is the root's pseudo-count
(``Prior.evidence``: how many measurements the prior is worth). Sums and counts decay by ``decay`` per update of
the group, so recent measurements dominate and drift is followed.

The FM then learns what is left (co-runner interference, batch and concurrency slopes across variants).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from oltunes.jsonstate import pack_floats, unpack_floats
from oltunes.types import Candidate, Variant

__all__ = ["PooledCorrection"]

# Pseudo-counts of the levels below the root: how many of its own measurements a group needs to weigh as much
# as its parent's estimate.
LEVEL_K = (2.0, 2.0, 1.0, 1.0)


def _path(acc: str, v: Variant, batch: int, conc: int) -> tuple[str, ...]:
    return (f"acc={acc}", f"af={acc}/{v.family}", f"av={acc}/{v.name}", f"cfg={acc}/{v.name}/{batch}/{conc}")


class PooledCorrection:
    """Hierarchical shrinkage of log residuals per target (module docstring).

    Parameters
    ----------
    n_targets
        Targets learned side by side (a measurement may lack some: see ``mask``).
    root_k
        Pseudo-count of the prior (the root's parent is the prior itself, residual 0).
    decay
        Per-update forgetting of a group's sums and counts (1 = none).

    Examples
    --------
    >>> import numpy as np
    >>> from oltunes.types import Variant
    >>> v = Variant(family="cnn", name="cnn-s", size="s", accuracy=0.7)
    >>> pc = PooledCorrection(n_targets=1, root_k=1.0)
    >>> pc.learn("t4", v, 1, 1, np.array([3.0]), np.array([True]))
    >>> round(float(pc.predict("t4", v, 1, 1)[0]), 2), round(float(pc.predict("a100", v, 1, 1)[0]), 2)
    (2.83, 1.5)
    """

    def __init__(self, n_targets: int = 3, root_k: float = 1.0, decay: float = 0.98) -> None:
        self.n_targets = n_targets
        self.root_k = float(root_k)
        self.decay = float(decay)
        self._sums: dict[str, list[float]] = {}  # group -> decayed sum of residuals per target
        self._counts: dict[str, list[float]] = {}  # group -> decayed count per target
        self._configs: dict[str, list[tuple[int, int, str]]] = {}  # "av=..." -> measured (batch, conc, key)
        self.version = 0

    # ------------------------------------------------------------------------------------------------ learn
    def learn(self, acc: str, v: Variant, batch: int, conc: int, y: np.ndarray, mask: np.ndarray) -> None:
        """One measurement's residuals ``y`` (n_targets,), learned where ``mask``."""
        # Plain floats: for three targets, Python arithmetic is several times cheaper than numpy's per-call cost.
        ys = [float(a) if ok else 0.0 for a, ok in zip(y, mask)]
        ms = [1.0 if ok else 0.0 for ok in mask]
        d = self.decay
        for key in ("*", *_path(acc, v, batch, conc)):
            s = self._sums.get(key)
            if s is None:
                self._sums[key], self._counts[key] = list(ys), list(ms)
                if key.startswith("cfg="):
                    self._index_config(key)
            else:
                n = self._counts[key]
                for i in range(self.n_targets):
                    s[i] = d * s[i] + ys[i]
                    n[i] = d * n[i] + ms[i]
        self.version += 1

    def _index_config(self, key: str) -> None:
        acc, name, b, c = key[4:].rsplit("/", 3)
        self._configs.setdefault(f"av={acc}/{name}", []).append((int(b), int(c), key))

    # ------------------------------------------------------------------------------------------------ predict
    def _shrunk(self, key: str, parent: list[float], k: float) -> list[float]:
        s = self._sums.get(key)
        if s is None:
            return parent
        n = self._counts[key]
        return [(s[i] + k * parent[i]) / (n[i] + k) for i in range(self.n_targets)]

    def predict(self, acc: str, v: Variant, batch: int, conc: int) -> np.ndarray:
        """Correction (n_targets,) of one configuration."""
        est = self._shrunk("*", [0.0] * self.n_targets, self.root_k)
        for key, k in zip(_path(acc, v, batch, conc), LEVEL_K):
            est = self._shrunk(key, est, k)
        return np.array(est)

    def predict_candidate(self, c: Candidate) -> np.ndarray:
        return self.predict(c.accelerator, c.variant, c.batch_size, c.concurrency)

    def grid(self, accelerators: Sequence[str], variants: Sequence[Variant], batch_sizes: Sequence[int],
             concurrencies: Sequence[int]) -> np.ndarray:
        """Correction over (n_targets, accelerators, variants, batch sizes, concurrencies)."""
        T, P, V = self.n_targets, len(accelerators), len(variants)
        out = np.empty((T, P, V, len(batch_sizes), len(concurrencies)))
        root = self._shrunk("*", [0.0] * T, self.root_k)
        b_at = {b: i for i, b in enumerate(batch_sizes)}
        c_at = {c: i for i, c in enumerate(concurrencies)}
        k_acc, k_af, k_av, k_cfg = LEVEL_K
        for p, acc in enumerate(accelerators):
            a = self._shrunk(f"acc={acc}", root, k_acc)
            for j, v in enumerate(variants):
                av_key = f"av={acc}/{v.name}"
                av = self._shrunk(av_key, self._shrunk(f"af={acc}/{v.family}", a, k_af), k_av)
                out[:, p, j] = np.array(av)[:, None, None]
                for b, c, key in self._configs.get(av_key, ()):
                    if b in b_at and c in c_at:
                        out[:, p, j, b_at[b], c_at[c]] = self._shrunk(key, av, k_cfg)
        return out

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Group keys, and their sums and counts as two packed (groups x targets) tables: thousands of groups
        at scale, which as nested lists of decimals were the slowest part of a save."""
        keys = list(self._sums)

        def table(rows: dict[str, list[float]]) -> dict[str, Any]:
            flat = itertools.chain.from_iterable(rows[k] for k in keys)
            n, t = len(keys), self.n_targets
            return pack_floats(np.fromiter(flat, float, n * t).reshape(n, t))

        return {"root_k": self.root_k, "decay": self.decay, "keys": keys,
                "sums": table(self._sums), "counts": table(self._counts)}

    @classmethod
    def from_state_dict(cls, d: dict[str, Any], n_targets: int = 3) -> PooledCorrection:
        pc = cls(n_targets=n_targets, root_k=float(d["root_k"]), decay=float(d["decay"]))
        if "groups" in d:  # state version 1: {key: [sums, counts]}
            groups = [(key, s, n) for key, (s, n) in d["groups"].items()]
        else:
            keys, sums, counts = d["keys"], unpack_floats(d["sums"]), unpack_floats(d["counts"])
            if sums.shape != (len(keys), n_targets) or counts.shape != sums.shape:
                raise ValueError(f"correction: {len(keys)} groups but tables of shape {sums.shape}, {counts.shape}")
            groups = zip(keys, sums.tolist(), counts.tolist())
        for key, s, n in groups:
            pc._sums[key] = [float(x) for x in s]
            pc._counts[key] = [float(x) for x in n]
            if key.startswith("cfg="):
                pc._index_config(key)
        return pc
