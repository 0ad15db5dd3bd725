"""Every registered queue policy through the same invariants: each job runs exactly once, gang and GPU-type
constraints hold, no node is ever over capacity, EASY backfilling never delays the chosen job."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.rltune.env import BatchQueueEnv, Outcome
from oltunes.rltune.mapper import Mapper
from oltunes.rltune.policies import QueuePolicy
from oltunes.rltune.traces import sequences


def check_invariants(o: Outcome) -> None:
    s = o.seq
    n = len(s)
    assert np.isfinite(o.start).all() and np.isfinite(o.finish).all(), "every job started and finished"
    assert np.all(o.start >= s.submit - 1e-9), "no job starts before it is submitted"
    np.testing.assert_allclose(o.finish - o.start, s.duration)  # runs its whole run time, once
    node_cap = np.concatenate([np.full(p.nodes, p.gpus_per_node) for p in s.shape.pools])
    node_pool = np.concatenate([np.full(p.nodes, i) for i, p in enumerate(s.shape.pools)])
    for j in range(n):
        a = o.alloc[j]
        assert sum(a.values()) == s.gpus[j], "gang: exactly the GPUs asked, all at once"
        pools = {int(node_pool[m]) for m in a}
        assert pools == {int(o.pool[j])}, "one pool per job"
        assert s.allowed[j, o.pool[j]], "GPU-type constraint respected"
    # capacity: sweep starts and ends (ends first at equal times), per node
    events = sorted([(o.finish[j], 0, j) for j in range(n)] + [(o.start[j], 1, j) for j in range(n)])
    used = np.zeros(len(node_cap), int)
    for _, is_start, j in events:
        for m, g in o.alloc[j].items():
            used[m] += g if is_start else -g
        assert np.all(used <= node_cap) and np.all(used >= 0)


def _policy(name: str, weights):
    return QueuePolicy.make(name, **({"weights": weights} if name == "rltune" else {}))


@pytest.mark.parametrize("name", QueuePolicy.known())
@pytest.mark.parametrize("mapper", ["milp", "greedy"])
def test_every_queue_policy_keeps_the_invariants(name, mapper, tiny_trace, tiny_policies):
    seq = sequences(tiny_trace, split="test", n=1, length=96)[0]
    o = BatchQueueEnv(seq, Mapper.make(mapper)).run(_policy(name, tiny_policies[0]))
    check_invariants(o)
    assert 1 <= o.decisions <= len(seq)


def test_environment_is_deterministic_and_policies_differ(tiny_trace):
    seq = sequences(tiny_trace, split="test", n=1, length=96)[0]
    a = BatchQueueEnv(seq, Mapper.make("milp")).run(QueuePolicy.make("sjf"))
    b = BatchQueueEnv(seq, Mapper.make("milp")).run(QueuePolicy.make("sjf"))
    c = BatchQueueEnv(seq, Mapper.make("milp")).run(QueuePolicy.make("fcfs"))
    np.testing.assert_array_equal(a.start, b.start)
    assert not np.array_equal(a.start, c.start), "a queue this busy must be ordered differently by SJF and FCFS"


def test_backfilling_never_delays_the_reserved_job():
    """Two 8-GPU nodes; a long job holds one, the chosen 16-GPU job must wait for it; a short 8-GPU job may run
    in the hole only because it ends before the reservation, a long one may not."""
    from tests.rltune.conftest import NodePool, build_trace
    from oltunes.rltune.cluster import ClusterShape

    shape = ClusterShape("two", (NodePool("n", 2, 8),))
    # job0: 8 GPUs x 1000 s; job1 (16 GPUs) waits for it; job2 short 8-GPU fits before t=1000; job3 too long
    tr = build_trace("hole", shape, [0, 1, 2, 3], [1000, 100, 500, 5000], [8, 16, 8, 8], np.ones((4, 1), bool),
                     [0, 0, 0, 0])
    o = BatchQueueEnv(tr, Mapper.make("milp")).run(QueuePolicy.make("fcfs"))
    check_invariants(o)
    assert o.start[1] == pytest.approx(1000.0), "the reserved job starts when the long job ends"
    assert o.start[2] == pytest.approx(2.0), "a job that ends before the reservation is backfilled"
    assert o.start[3] >= o.finish[1], "a job that would delay the reservation waits"


def test_alibaba_sequence_respects_gpu_types():
    from tests.rltune.conftest import shared_file
    from oltunes.rltune.traces import load_trace

    tr = load_trace("alibaba", shared_file("alibaba/gpu_v2023/openb_pod_list_gpuspec33.csv"))
    assert (~tr.allowed).any(), "the gpuspec33 list binds some pods to GPU types"
    seq = sequences(tr, split="test", n=1, length=128)[0]
    check_invariants(BatchQueueEnv(seq, Mapper.make("milp")).run(QueuePolicy.make("slurm")))


def test_backfilled_jobs_start_in_the_policy_order():
    """One 8-GPU node: a 4-GPU job runs until t=1000 and the next (8 GPUs) holds the reservation; two 4-GPU jobs
    arriving together both end before it but fit beside the runner only one at a time: SJF backfills the shorter
    first, FCFS the older."""
    from tests.rltune.conftest import NodePool, build_trace
    from oltunes.rltune.cluster import ClusterShape

    shape = ClusterShape("one", (NodePool("n", 1, 8),))
    tr = build_trace("order", shape, [0, 1, 2, 2], [1000, 100, 600, 300], [4, 8, 4, 4], np.ones((4, 1), bool),
                     [0, 0, 0, 0])
    fcfs = BatchQueueEnv(tr, Mapper.make("greedy")).run(QueuePolicy.make("fcfs"))
    sjf = BatchQueueEnv(tr, Mapper.make("greedy")).run(QueuePolicy.make("sjf"))
    for o in (fcfs, sjf):
        check_invariants(o)
        assert o.start[1] == pytest.approx(1000.0), "backfilling never delays the reserved job"
    assert fcfs.start[2] == pytest.approx(2.0) and fcfs.start[3] == pytest.approx(602.0)
    assert sjf.start[3] == pytest.approx(2.0) and sjf.start[2] == pytest.approx(302.0)
