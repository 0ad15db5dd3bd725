"""Job-to-node mapping: a MILP (scipy.optimize.milp / HiGHS) over the chosen job's placements, greedy fallback.

Nodes of a pool with the same number of free GPUs form a class; per class the MILP chooses how many nodes to close
(take all their free GPUs) and whether to take part of one more node, plus which pool. Constraints: the job gets
exactly its GPUs, from one pool (gang jobs do not straddle GPU types or virtual clusters), never more than a node
has free, at most one partly taken node per pool (any other split only strands more).

Cost (lower is better), the same for both solvers::

    sum over opened empty nodes of their size     # free GPUs a new partial node strands: keep whole nodes whole
  + SPREAD  x nodes used                          # gang locality: fewer nodes, less cross-node traffic
  - CLOSE   x partly used nodes closed            # best fit: fill the leftovers before they strand

Taking GPUs from already partly used nodes costs nothing, so leftovers are used first and whole nodes stay free
for the next big jobs. A time limit bounds each solve; when HiGHS returns no proven-optimal placement the greedy
mapper answers instead and the fallback is counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import LinearConstraint, milp
from scipy.sparse import coo_array

from oltunes.registry import Registered
from oltunes.rltune.cluster import NodeState

SPREAD = 1.0
CLOSE = 0.5


def fits(state: NodeState, gpus: int, allowed: np.ndarray) -> bool:
    """Whether some allowed pool has enough free GPUs for the job now."""
    return bool(np.any(allowed & (state.pool_free() >= gpus)))


def cost(state: NodeState, alloc: dict[int, int]) -> float:
    c = 0.0
    for n, g in alloc.items():
        cap, free = int(state.node_cap[n]), int(state.free[n])
        c += SPREAD + (cap if free == cap else 0.0) - (CLOSE if g == free < cap else 0.0)
    return c


@dataclass
class MapperStats:
    solve_s: list[float] = field(default_factory=list)
    fallbacks: int = 0


class Mapper(Registered, root=True):
    """Places one job on nodes of a pool it may use; None when no allowed pool has room."""

    def __init__(self) -> None:
        self.stats = MapperStats()

    def place(self, state: NodeState, gpus: int, allowed: np.ndarray) -> dict[int, int] | None:
        raise NotImplementedError


def _greedy(state: NodeState, gpus: int, allowed: np.ndarray) -> dict[int, int] | None:
    best: tuple[float, dict[int, int]] | None = None
    pool_free = state.pool_free()
    for k in np.flatnonzero(allowed & (pool_free >= gpus)):
        nodes = np.flatnonzero((state.node_pool == k) & (state.free > 0))
        free = state.free[nodes]
        single = nodes[free >= gpus]
        if len(single):  # best fit: the node left with the fewest free GPUs, partly used nodes first
            partial = single[state.free[single] < state.node_cap[single]]
            pick = partial if len(partial) else single
            alloc = {int(pick[np.argmin(state.free[pick])]): gpus}
        else:  # fewest nodes: largest free first
            alloc, left = {}, gpus
            for n in nodes[np.argsort(-free, kind="stable")]:
                g = int(min(left, state.free[n]))
                alloc[int(n)] = g
                left -= g
                if not left:
                    break
        c = cost(state, alloc)
        if best is None or c < best[0]:
            best = (c, alloc)
    return None if best is None else best[1]


class Greedy(Mapper, name="greedy"):
    def place(self, state: NodeState, gpus: int, allowed: np.ndarray) -> dict[int, int] | None:
        t = time.perf_counter()
        alloc = _greedy(state, gpus, allowed)
        self.stats.solve_s.append(time.perf_counter() - t)
        return alloc


class Milp(Mapper, name="milp"):
    def __init__(self, time_limit_s: float = 0.1) -> None:
        super().__init__()
        self.time_limit_s = time_limit_s

    def place(self, state: NodeState, gpus: int, allowed: np.ndarray) -> dict[int, int] | None:
        if not fits(state, gpus, allowed):
            return None
        t = time.perf_counter()
        alloc = self._solve(state, gpus, allowed)
        self.stats.solve_s.append(time.perf_counter() - t)
        if alloc is None:
            self.stats.fallbacks += 1
            alloc = _greedy(state, gpus, allowed)
        return alloc

    def _solve(self, state: NodeState, gpus: int, allowed: np.ndarray) -> dict[int, int] | None:
        # Nodes of one pool with the same free count are interchangeable: one variable block per such class
        # (a: nodes closed, b/r: at most one node partly taken and how much), so the MILP stays small.
        classes = []  # (pool, free, node indices)
        pools = [int(k) for k in np.flatnonzero(allowed & (state.pool_free() >= gpus))]
        for k in pools:
            in_pool = np.flatnonzero((state.node_pool == k) & (state.free > 0))
            for f in np.unique(state.free[in_pool]):
                classes.append((k, int(f), in_pool[state.free[in_pool] == f]))
        nc, npool = len(classes), len(pools)
        A_, B_, R_, P_ = 0, nc, 2 * nc, 3 * nc
        nvar = 3 * nc + npool
        obj, upper = np.zeros(nvar), np.ones(nvar)
        rows, cols, vals, lb, ub = [], [], [], [], []

        def row(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
            for c_, v in entries:
                rows.append(len(lb))
                cols.append(c_)
                vals.append(v)
            lb.append(lo)
            ub.append(hi)

        pcol = {k: P_ + j for j, k in enumerate(pools)}
        for i, (k, f, members) in enumerate(classes):
            cap = float(state.shape.pools[k].gpus_per_node)
            whole = f == cap
            obj[A_ + i] = SPREAD + (cap if whole else -CLOSE)
            obj[B_ + i] = SPREAD + (cap if whole else 0.0)
            upper[A_ + i], upper[R_ + i] = min(len(members), gpus // f), max(min(f - 1, gpus), 0)
            upper[B_ + i] = float(f > 1)
            row([(R_ + i, 1.0), (B_ + i, -max(f - 1, 0))], -np.inf, 0)  # r only on the partly taken node
            row([(R_ + i, 1.0), (B_ + i, -1.0)], 0, np.inf)  # a partly taken node gives at least one GPU
            row([(A_ + i, 1.0), (B_ + i, 1.0), (pcol[k], -len(members))], -np.inf, 0)  # only the chosen pool
        row([(A_ + i, float(f)) for i, (_, f, _) in enumerate(classes)] + [(R_ + i, 1.0) for i in range(nc)],
            gpus, gpus)
        for k in pools:
            row([(B_ + i, 1.0) for i, c in enumerate(classes) if c[0] == k], -np.inf, 1)
        row([(pcol[k], 1.0) for k in pools], 1, 1)
        A = coo_array((vals, (rows, cols)), shape=(len(lb), nvar)).tocsr()
        try:
            res = milp(obj, integrality=np.ones(nvar), bounds=(np.zeros(nvar), upper),
                       constraints=LinearConstraint(A, lb, ub),
                       options={"time_limit": self.time_limit_s, "disp": False})
        except ValueError:
            return None
        if res.status != 0 or res.x is None:  # time limit or solver trouble: the greedy answers
            return None
        x = np.rint(res.x).astype(int)
        alloc: dict[int, int] = {}
        for i, (_, f, members) in enumerate(classes):
            a = x[A_ + i]
            for n in members[:a]:
                alloc[int(n)] = f
            if x[B_ + i] and x[R_ + i] > 0:
                alloc[int(members[a])] = int(x[R_ + i])
        ok = sum(alloc.values()) == gpus and len({int(state.node_pool[m]) for m in alloc}) == 1 and all(
            g <= state.free[m] for m, g in alloc.items())
        return alloc if ok else None
