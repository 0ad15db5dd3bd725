"""What a queue policy sees: the waiting jobs and the cluster, as arrays (the same in the simulator and the product).

Per job, ``FEATURES`` columns in [0, 1] (logs for heavy-tailed times), as the paper's observation: wait, GPUs asked,
requested run time, demand / supply (GPUs asked over GPUs free where it may run), near-future availability (GPUs
free in its pools once the running jobs ending within its requested time have ended), fragmentation of its pools,
feasible placements (nodes of its pools that could hold its share), schedulable now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from oltunes.rltune.cluster import NodeState

FEATURES = ("wait", "gpus", "runtime", "demand_supply", "near_future", "fragmentation", "feasible_nodes",
            "schedulable")
N_FEATURES = len(FEATURES)
MAX_VISIBLE = 128


def _log_scale(x: np.ndarray, top: float) -> np.ndarray:
    return np.clip(np.log1p(np.maximum(x, 0.0)) / np.log1p(top), 0.0, 1.0)


@dataclass
class QueueView:
    """The visible queue (oldest first) at time ``now``; ``duration`` is NaN where no run time is known."""

    now: float
    submit: np.ndarray
    gpus: np.ndarray
    duration: np.ndarray
    group: np.ndarray
    allowed: np.ndarray  # (jobs, pools)
    state: NodeState
    # running jobs: when they end, their pool, their GPUs (empty where unknown)
    running_end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    running_pool: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    running_gpus: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    group_usage: dict[int, float] = field(default_factory=dict)  # GPU-seconds each group has had so far
    candidates: np.ndarray | None = None  # which jobs may start now (None: all; else a backfill decision's mask)

    @property
    def mask(self) -> np.ndarray:
        return np.ones(len(self), bool) if self.candidates is None else self.candidates

    def __len__(self) -> int:
        return len(self.submit)

    @cached_property
    def features(self) -> np.ndarray:
        st = self.state
        n, npools = len(self), len(st.shape.pools)
        pool_free = st.pool_free().astype(float)
        pool_cap = st.pool_cap.astype(float)
        allowed = self.allowed.astype(float)
        gpus = self.gpus.astype(float)
        dur = np.nan_to_num(self.duration, nan=0.0)
        free_here = allowed @ pool_free
        cap_here = np.maximum(allowed @ pool_cap, 1.0)
        # near future: GPUs released in each pool by running jobs ending before now + this job's run time
        horizon = self.now + np.where(dur > 0, dur, 3600.0)
        ends = self.running_end[None, :] <= horizon[:, None]  # (jobs, running)
        rel = np.zeros((n, npools))
        if len(self.running_end):
            onehot = np.eye(npools)[self.running_pool] * self.running_gpus[:, None]
            rel = ends.astype(float) @ onehot
        near = ((pool_free[None, :] + rel) * allowed).sum(axis=1) / cap_here
        stranded = np.bincount(st.node_pool, weights=np.where(st.free < st.node_cap, st.free, 0), minlength=npools)
        frag = (allowed @ stranded) / np.maximum(free_here, 1.0)
        share = np.minimum(gpus[:, None], np.array([p.gpus_per_node for p in st.shape.pools])[None, :])
        node_ok = st.free[None, :] >= share[:, st.node_pool]  # (jobs, nodes)
        node_ok &= self.allowed[:, st.node_pool]
        nodes_here = np.maximum(allowed @ np.array([p.nodes for p in st.shape.pools], float), 1.0)
        sched = (self.allowed & (pool_free[None, :] >= gpus[:, None])).any(axis=1)
        return np.stack([
            _log_scale(self.now - self.submit, 7 * 86400.0),
            np.log2(gpus) / 6.0,
            _log_scale(dur, 30 * 86400.0),
            np.clip(gpus / np.maximum(free_here, 1.0), 0.0, 4.0) / 4.0,
            np.clip(near, 0.0, 1.0),
            frag,
            node_ok.sum(axis=1) / nodes_here,
            sched.astype(float),
        ], axis=1).astype(np.float32) if n else np.zeros((0, N_FEATURES), np.float32)
