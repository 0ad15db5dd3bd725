"""One call path: flows, the simulator and the HTTP client all drive a tuner through `TunerLike`.

- the simulator's ``oltunes`` policy and a batch flow's tasks drive the very tuner a flow gets (`make_tuner`);
- the tuning service over HTTP decides what the same tuner decides in-process, from the same measurements;
- a measurement observed while the service is down is learnt exactly once, through the client's outbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil

from flows.common import make_tuner
from oltunes.config import get_settings
from oltunes.launchers.environment import Environment
from oltunes.netaddr import free_port
from oltunes.policies import Policy
from oltunes.simulation import context, prepare, simulator
from oltunes.sim.scenario import load_scenario
from oltunes.tuner import Tuner, TunerLike
from oltunes.service.app import create_app, serve_in_thread
from oltunes.types import JobSpec, Measurement
from tasks import tuning
from tests.tuner.test_client import JOB, TOKEN, client, make_cluster, make_measurement
from tests.tuner.variants import make_variants


def test_the_simulator_and_a_batch_flow_drive_the_same_tuner(oltunes_home, shared_data):
    p = prepare(load_scenario("tiny"))
    env = Environment.make("simulated")
    tuner, settings = make_tuner(env, env.variants(get_settings()), "oltunes")  # what flows/batch_inference gets
    assert isinstance(tuner, TunerLike) and tuner.n_observed == 0

    sim = simulator(p)
    ctx = dataclasses.replace(context(p, sim.model, sim.cluster), tuner=tuner)
    policy = Policy.make("oltunes", ctx=ctx)
    sim.run(policy)
    learnt_in_sim = tuner.n_observed
    assert learnt_in_sim > 0  # the simulator's measurements went into the flow's tuner, not a private one

    # the batch flow's own tasks, on the same object: decide, then observe (which keeps the state on disk)
    cluster = env.cluster()
    job = JobSpec(job_id="batch-1", kind="batch", family="resnet", slo_ms=2000, items=100)
    decision = asyncio.run(tuning.decide.fn(tuner, job, cluster))
    assert decision.candidate.variant.family == "resnet" and decision.source in {"model", "prior", "explore"}
    m = Measurement(measurement_id="batch-1-m", job_id="batch-1", candidate=decision.candidate, items=100,
                    wall_s=1.0, latency_p50_ms=5.0, latency_p95_ms=6.0, latency_p99_ms=7.0,
                    throughput_items_per_s=100.0, energy_j_per_item=0.1, energy_source="simulated", simulated=True)
    assert asyncio.run(tuning.observe.fn(tuner, m)) is True
    assert asyncio.run(tuning.observe.fn(tuner, m)) is False  # exactly once
    kept = Tuner.load(settings.tuner_state_path)
    assert kept.n_observed == learnt_in_sim + 1 and kept.has_seen("batch-1-m")


def test_the_service_over_http_decides_what_the_tuner_decides_in_process(tmp_path, oltunes_home):
    served, twin = Tuner(make_variants(), seed=7), Tuner(make_variants(), seed=7)
    history = [make_measurement(i) for i in range(30)]
    with serve_in_thread(create_app(served, token=TOKEN)) as url, client(url, tmp_path) as c:
        for tuner in (c, twin):
            assert isinstance(tuner, TunerLike)
            assert sum(tuner.observe_many(history[:20])) == 20
            assert all(tuner.observe(m) for m in history[20:])
        cluster = make_cluster()
        for i in range(6):
            job = JOB.model_copy(update={"job_id": f"job-{i}", "slo_ms": 20.0 * (i + 1)})
            remote, local = c.decide(job, cluster), twin.decide(job, cluster)
            assert remote.source != "fallback"
            assert (remote.candidate.key, remote.source, remote.feasible) == \
                   (local.candidate.key, local.source, local.feasible)
            assert c.expect(job, cluster) == twin.expect(job, cluster)


def test_an_observation_made_while_the_service_is_down_is_learnt_exactly_once(tmp_path, oltunes_home):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first, second = make_measurement(1), make_measurement(2)
    with client(url, tmp_path) as c:
        assert c.observe(first) is True and c.pending == 1  # down: kept in the outbox, not lost
        assert c.decide(JOB, make_cluster()).source == "fallback"
    kept = tmp_path / "kept"
    shutil.copytree(tmp_path / "outbox", kept)

    served, twin = Tuner(make_variants(), seed=3), Tuner(make_variants(), seed=3)
    with serve_in_thread(create_app(served, token=TOKEN), port=port), client(url, tmp_path) as c:
        assert c.observe(second) is True  # the queued one goes first, in the same delivery
        assert c.pending == 0 and served.n_observed == 2
        # a crash between "sent" and "deleted": the same file is delivered again, and dropped as a duplicate
        shutil.copytree(kept, tmp_path / "outbox", dirs_exist_ok=True)
        assert c.flush() == 1 and c.pending == 0 and served.n_observed == 2
        assert twin.observe_many([first, second]) == [True, True]
        assert c.decide(JOB, make_cluster()).candidate.key == twin.decide(JOB, make_cluster()).candidate.key
