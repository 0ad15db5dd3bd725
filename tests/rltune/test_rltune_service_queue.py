"""The product's batch queue: jobs waiting on a full pool are released in the queue policy's order, by the same
policy objects the simulator evaluates; bad requests are refused with the field named."""

from __future__ import annotations

import pytest

from oltunes.errors import ConfigError
from oltunes.rltune.policies import QueuePolicy, queue_policy
from oltunes.rltune.service_queue import admit, release_order

WAITING = [  # submitted oldest first; the longest job is the oldest
    {"job_id": "a", "gpus": 4, "submitted_s": 10, "expected_duration_s": 9000, "group": 1},
    {"job_id": "b", "gpus": 4, "submitted_s": 20, "expected_duration_s": 60, "group": 2},
    {"job_id": "c", "gpus": 4, "submitted_s": 30, "expected_duration_s": 600, "group": 2},
]


def _drain(policy: QueuePolicy) -> list[str]:
    """A full 2 x 4-GPU pool frees one node at a time; each time the queue admits what fits."""
    waiting, order, now = list(WAITING), [], 100.0
    free = [0, 0]
    for node in (0, 1, 0):
        free[node] = 4
        for job_id, pool, alloc in admit(policy, waiting, [{"name": "v100", "gpus_per_node": 4,
                                                            "free_per_node": free}], now):
            assert pool == "v100" and sum(alloc.values()) == 4
            for n, g in alloc.items():
                free[n] -= g
            order.append(job_id)
            waiting = [w for w in waiting if w["job_id"] != job_id]
        now += 60
    assert not waiting
    return order


def test_waiting_jobs_are_released_in_the_policys_order():
    assert _drain(QueuePolicy.make("fcfs")) == ["a", "b", "c"]
    assert _drain(QueuePolicy.make("sjf")) == ["b", "c", "a"]
    # gavel-like: group 2 has had more GPU time, so group 1's job goes first
    assert release_order(QueuePolicy.make("gavel-like"), WAITING, [{"name": "p", "gpus_per_node": 4,
                                                                    "free_per_node": [0]}], 0.0,
                         group_usage={1: 10.0, 2: 500.0})[0] == "a"


def test_trained_policy_orders_the_service_queue(tiny_policies):
    pools = [{"name": "p", "gpus_per_node": 8, "free_per_node": [0, 4]}]
    order = release_order(queue_policy("rltune", weights=tiny_policies[0]), WAITING, pools, 100.0)
    assert sorted(order) == ["a", "b", "c"]
    assert _drain(queue_policy()) == ["a", "b", "c"], "fcfs is the service queue's default"
    assert release_order(QueuePolicy.make("fcfs"), [], pools, 0.0) == []


def test_only_jobs_that_fit_are_admitted_and_pools_are_respected():
    waiting = [{"job_id": "big", "gpus": 8, "submitted_s": 0}, {"job_id": "t4", "gpus": 1, "submitted_s": 1,
                                                                "pools": ["t4"]}]
    pools = [{"name": "v100", "gpus_per_node": 8, "free_per_node": [4]}, {"name": "t4", "gpus_per_node": 2,
                                                                          "free_per_node": [1, 2]}]
    assert admit(QueuePolicy.make("fcfs"), waiting, pools, 5.0) == [("t4", "t4", {0: 1})]  # fills the leftover


@pytest.mark.parametrize(("job", "field"), [
    ({"job_id": "x", "gpus": 0, "submitted_s": 0}, "gpus"),
    ({"job_id": "bad id!", "gpus": 1, "submitted_s": 0}, "job_id"),
    ({"job_id": "x", "gpus": 1, "submitted_s": float("nan")}, "submitted_s"),
    ({"job_id": "x", "gpus": 1, "submitted_s": 0, "secret": 1}, "secret"),
])
def test_bad_waiting_jobs_are_refused_naming_the_field(job, field):
    with pytest.raises(ConfigError, match=field) as e:
        release_order(QueuePolicy.make("fcfs"), [job], [{"name": "p", "gpus_per_node": 2, "free_per_node": [2]}], 0)
    assert "bad id!" not in str(e.value)


def test_bad_pools_are_refused():
    with pytest.raises(ConfigError, match="free_per_node"):
        release_order(QueuePolicy.make("fcfs"), WAITING, [{"name": "p", "gpus_per_node": 2, "free_per_node": [3]}], 0)
    with pytest.raises(ConfigError, match="now"):
        release_order(QueuePolicy.make("fcfs"), WAITING, [], float("inf"))
