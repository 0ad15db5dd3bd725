"""The MILP mapper: placements respect pools, capacity and gang size; it is never worse than the greedy on its own
cost; when HiGHS gives no answer in time the greedy answers and the fallback is counted."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.rltune.cluster import SHAPES, NodeState
from oltunes.rltune.mapper import Mapper, cost


def _random_state(rng) -> NodeState:
    st = NodeState(SHAPES["alibaba"])
    st.free = np.array([rng.integers(0, c + 1) for c in st.node_cap])
    return st


def _valid(st: NodeState, alloc: dict[int, int], gpus: int, allowed: np.ndarray) -> None:
    assert sum(alloc.values()) == gpus
    assert all(0 < g <= st.free[n] for n, g in alloc.items())
    pools = {int(st.node_pool[n]) for n in alloc}
    assert len(pools) == 1 and allowed[pools.pop()]


def test_milp_placements_are_valid_and_never_worse_than_greedy():
    rng = np.random.default_rng(0)
    milp, greedy = Mapper.make("milp", time_limit_s=5.0), Mapper.make("greedy")
    strictly_better = 0
    for _ in range(60):
        st = _random_state(rng)
        gpus, allowed = int(rng.choice([1, 2, 3, 4, 8, 12, 16])), rng.random(5) < 0.6
        a, b = milp.place(st, gpus, allowed), greedy.place(st, gpus, allowed)
        assert (a is None) == (b is None)
        if a is None:
            assert not np.any(allowed & (st.pool_free() >= gpus))
            continue
        _valid(st, a, gpus, allowed)
        _valid(st, b, gpus, allowed)
        assert cost(st, a) <= cost(st, b) + 1e-9
        strictly_better += cost(st, a) < cost(st, b) - 1e-9
    assert milp.stats.fallbacks == 0
    assert strictly_better > 0, "on random states the MILP should beat the greedy at least sometimes"


def test_milp_fills_leftovers_before_opening_a_whole_node():
    st = NodeState(SHAPES["philly"])  # 16 x 2-GPU nodes, 20 x 8-GPU nodes
    st.free[:] = st.node_cap
    partial = 20  # an 8-GPU node with 3 GPUs left
    st.free[partial] = 3
    alloc = Mapper.make("milp").place(st, 3, np.ones(2, bool))
    assert alloc == {partial: 3}
    # a 2-GPU job on an empty cluster takes a 2-GPU node, not a quarter of an 8-GPU one
    st.free[:] = st.node_cap
    (node,) = Mapper.make("milp").place(st, 2, np.ones(2, bool))
    assert st.node_cap[node] == 2


def test_fallback_is_counted_and_still_valid():
    rng = np.random.default_rng(1)
    m = Mapper.make("milp", time_limit_s=0.0)  # HiGHS stops before any answer
    st = _random_state(rng)
    allowed = np.ones(5, bool)
    alloc = m.place(st, 4, allowed)
    _valid(st, alloc, 4, allowed)
    assert m.stats.fallbacks == 1 and len(m.stats.solve_s) == 1


@pytest.mark.parametrize(("gpus", "full"), [(81, False), (300, False), (1, True)])
def test_no_room_means_no_placement(gpus, full):
    st = NodeState(SHAPES["alibaba"])  # largest pool: 80 GPUs
    if full:
        st.free[:] = 0
    assert Mapper.make("milp").place(st, gpus, np.ones(5, bool)) is None
