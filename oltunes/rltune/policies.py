"""Queue policies by name: which waiting batch job gets capacity next. Lower score = earlier; ties go oldest first.

The simulator's environment and the product call the same objects (the product through
:mod:`oltunes.rltune.service_queue`, which builds the same :class:`QueueView` the simulator builds).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from oltunes.errors import ConfigError
from oltunes.registry import Registered
from oltunes.rltune.features import QueueView

if TYPE_CHECKING:
    from oltunes.rltune.net import Snapshot

MIN_RUNTIME_S = 10.0  # bounded slowdown's floor, also F1's


class QueuePolicy(Registered, root=True):
    """Scores the visible queue; ``uses_runtime`` marks policies that read (oracle) run times."""

    uses_runtime = False

    def scores(self, view: QueueView) -> np.ndarray:
        raise NotImplementedError

    def order(self, view: QueueView) -> np.ndarray:
        """Indices into the view, first to run first."""
        return np.lexsort((view.submit, self.scores(view)))

    def choose(self, view: QueueView) -> int:
        """The first job in the policy's order among the candidates (the jobs that may start now)."""
        order = self.order(view)
        return int(order[view.mask[order]][0])


class Fcfs(QueuePolicy, name="fcfs"):
    def scores(self, view: QueueView) -> np.ndarray:
        return view.submit.astype(float)


class Sjf(QueuePolicy, name="sjf"):
    """Shortest job first on the trace's real run times (an oracle, as in the paper); unknown runs last."""

    uses_runtime = True

    def scores(self, view: QueueView) -> np.ndarray:
        return np.nan_to_num(view.duration, nan=np.inf)


class F1(QueuePolicy, name="f1"):
    """F1 (Carastan-Santos & de Camargo, SC'17): log10(run time) x GPUs + 870 x log10(submit time)."""

    uses_runtime = True

    def scores(self, view: QueueView) -> np.ndarray:
        r = np.maximum(np.nan_to_num(view.duration, nan=86400.0), MIN_RUNTIME_S)
        s = np.maximum(view.submit - view.submit.min(), 0.0) + 1.0
        return np.log10(r) * view.gpus + 870.0 * np.log10(s)


class SlurmMultifactor(QueuePolicy, name="slurm"):
    """Slurm multifactor priority (defaults' shape): age (to 7 days) + fair share + job size (large first)."""

    W_AGE, W_FAIRSHARE, W_SIZE, MAX_AGE_S = 1000.0, 1000.0, 500.0, 7 * 86400.0

    def scores(self, view: QueueView) -> np.ndarray:
        age = np.clip((view.now - view.submit) / self.MAX_AGE_S, 0.0, 1.0)
        usage = np.array([view.group_usage.get(int(g), 0.0) for g in view.group])
        total = sum(view.group_usage.values())
        groups = max(len(set(view.group_usage) | set(map(int, view.group))), 1)
        fairshare = 2.0 ** (-usage / (total / groups)) if total > 0 else np.ones(len(view))
        size = view.gpus / max(int(view.state.pool_cap.max()), 1)
        return -(self.W_AGE * age + self.W_FAIRSHARE * fairshare + self.W_SIZE * size)


class GavelLike(QueuePolicy, name="gavel-like"):
    """Gavel's fairness objective as a queue order: the group with the least attained GPU time goes first."""

    def scores(self, view: QueueView) -> np.ndarray:
        return np.array([view.group_usage.get(int(g), 0.0) for g in view.group])


class RandomOrder(QueuePolicy, name="random"):
    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def scores(self, view: QueueView) -> np.ndarray:
        return self.rng.random(len(view))


class RLTune(QueuePolicy, name="rltune"):
    """The trained policy network (greedy: highest logit first). Reads the requested run time, as the paper's."""

    uses_runtime = True

    def __init__(self, weights: str | Path | None = None, snapshot: Snapshot | None = None) -> None:
        from oltunes.rltune.net import load_policy

        if snapshot is not None:  # the network being trained (validation)
            self.net, self.meta = snapshot, {}
            return
        if weights is None:
            raise ConfigError("queue policy 'rltune' needs weights= (a file written by `oltunes rltune train`)")
        net, self.meta = load_policy(Path(weights))
        self.net = net.snapshot()

    def scores(self, view: QueueView) -> np.ndarray:
        return -self.net.logits(view.features)


def queue_policy(name: str = "fcfs", weights: str | Path | None = None, seed: int = 0) -> QueuePolicy:
    """A queue policy by name, as the product's batch queue and the simulator build it: ``rltune`` reads `weights`
    (a file from ``oltunes rltune train``), ``random`` is seeded; the others take nothing."""
    kwargs = {"rltune": {"weights": weights}, "random": {"seed": seed}}.get(name, {})
    return QueuePolicy.make(name, **kwargs)
