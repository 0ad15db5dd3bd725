"""Node pools of a GPU batch cluster and the paper's cluster shapes.

A pool is a set of identical nodes (one GPU type, or one virtual cluster); a gang job runs inside one pool, on
one or several of its nodes. :class:`NodeState` is the occupancy the environment changes and the mapper reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oltunes.errors import ConfigError


@dataclass(frozen=True)
class NodePool:
    name: str
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class ClusterShape:
    name: str
    pools: tuple[NodePool, ...]

    def pool_index(self, name: str) -> int:
        for i, p in enumerate(self.pools):
            if p.name == name:
                return i
        raise ConfigError(f"cluster {self.name}: unknown pool {name!r}; known: {', '.join(p.name for p in self.pools)}")

    @property
    def capacity(self) -> int:
        return sum(p.nodes * p.gpus_per_node for p in self.pools)


# The shapes the RLTune paper simulates (its code's cluster descriptions).
SHAPES: dict[str, ClusterShape] = {
    "philly": ClusterShape("philly", (NodePool("2gpu", 16, 2), NodePool("8gpu", 20, 8))),
    "alibaba": ClusterShape("alibaba", (NodePool("T4", 8, 2), NodePool("MISC", 8, 8), NodePool("P100", 15, 2),
                                        NodePool("V100-16GB", 10, 8), NodePool("V100-32GB", 8, 8))),
    "helios": ClusterShape("helios", tuple(NodePool(f"vc{i}", n, 8) for i, n in enumerate((6, 4, 3, 2, 2)))),
}


class NodeState:
    """Free GPUs per node; the only mutable cluster state (the environment changes it, capacity is enforced)."""

    def __init__(self, shape: ClusterShape) -> None:
        self.shape = shape
        self.node_pool = np.concatenate([np.full(p.nodes, i) for i, p in enumerate(shape.pools)])
        self.node_cap = np.concatenate([np.full(p.nodes, p.gpus_per_node) for p in shape.pools])
        self.pool_cap = np.array([p.nodes * p.gpus_per_node for p in shape.pools])
        self.free = self.node_cap.copy()

    def pool_free(self) -> np.ndarray:
        return np.bincount(self.node_pool, weights=self.free, minlength=len(self.shape.pools)).astype(np.int64)

    def take(self, alloc: dict[int, int]) -> None:
        for n, g in alloc.items():
            if g <= 0 or g > self.free[n]:
                raise ConfigError(f"node {n}: cannot take {g} GPUs, {self.free[n]} free")
        for n, g in alloc.items():
            self.free[n] -= g

    def give(self, alloc: dict[int, int]) -> None:
        for n, g in alloc.items():
            self.free[n] += g
        if np.any(self.free > self.node_cap):
            raise ConfigError("released more GPUs than a node has")

    def fragmentation(self, pools: np.ndarray | None = None) -> float:
        """Share of free GPUs stranded on partly used nodes (usable only by jobs that fit in the leftovers)."""
        sel = np.ones(len(self.free), bool) if pools is None else pools[self.node_pool]
        f = self.free[sel]
        total = int(f.sum())
        return float(f[f < self.node_cap[sel]].sum()) / total if total else 0.0
