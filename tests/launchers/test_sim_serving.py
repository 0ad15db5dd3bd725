"""Simulated streaming is the event engine's physics: at one configuration, requests queue once the offered load
passes what the configuration can serve (the closed-form model it replaced answered the same latency at any load)."""

from __future__ import annotations

import asyncio
import statistics

import numpy as np
import pytest

from oltunes.config import get_settings
from oltunes.launchers.environment import Environment
from oltunes.launchers.serving import ServiceSetup
from oltunes.launchers.sim_serving import SimulatedServing
from oltunes.sim.perfmodel import load_performance_model
from oltunes.types import Candidate, Decision, Explanation, JobSpec, Prediction

SEEDS = range(5)
POOL, BATCH = "t4-pool", 8


def _decision(job: JobSpec, variant) -> Decision:
    cand = Candidate(pool=POOL, accelerator="t4", variant=variant, batch_size=BATCH, concurrency=1)
    pred = Prediction(latency_p99_ms=1, energy_j_per_item=0.1, throughput_items_per_s=1)
    return Decision(job_id=job.job_id, candidate=cand, explanation=Explanation(predicted=pred, n_candidates=1, n_feasible=1))


def fixed_configuration():
    """resnet's first variant at batch 8 on a T4: the model, the variant, its capacity (requests/s, full batches)."""
    model = load_performance_model(get_settings())
    variant = next(v for v in model.variants() if v.family == "resnet")
    batch_ms = float(model.latency_row(model.variant_index(variant.name), "t4")[BATCH])
    return model, variant, BATCH / batch_ms * 1000.0


def serve_at_load(load: float, seed: int, tmp_path, duration: float = 8.0, interval: float = 2.0):
    """Poisson arrivals at ``load`` x the configuration's capacity, served by one fixed decision through the
    simulated environment's `Serving`: the intervals and the drained report."""
    _, variant, capacity = fixed_configuration()
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / (load * capacity), int(load * capacity * duration * 1.5) + 10))
    arrivals = arrivals[arrivals < duration]
    job = JobSpec(job_id=f"svc-{seed}", kind="streaming", family="resnet", slo_ms=1000.0, arrival_rate_rps=load * capacity)
    setup = ServiceSetup(jobs=[job], arrivals=arrivals, duration_s=duration, control_interval_s=interval,
                         cluster=Environment.make("simulated").cluster(), workdir=tmp_path)  # fmt: skip
    serving = Environment.make("simulated").serving(setup)
    assert isinstance(serving, SimulatedServing)

    async def run():
        await serving.start()
        await serving.switch(0, _decision(job, variant))
        out, stop = [], asyncio.Event()
        while not serving.finished:
            (iv,) = await serving.measure_interval(stop)
            out.append(iv)
        return out, await serving.drain()

    return asyncio.run(run())


@pytest.fixture(scope="module")
def runs(shared_data, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sim")
    return {load: [serve_at_load(load, s, tmp) for s in SEEDS] for load in (0.4, 2.0)}


def test_latency_grows_with_load_past_capacity_at_the_same_configuration(runs):
    def p99(load):
        return statistics.median(iv.measurement.request_latency_p99_ms for ivs, _ in runs[load] for iv in ivs)

    def queueing(load):
        return statistics.median(iv.measurement.queueing_delay_ms for ivs, _ in runs[load] for iv in ivs)

    # per seed (0-7), medians over intervals: request p99 250-360 ms at 0.4x and 2,500-3,000 ms at 2x (ratio
    # 8.2-10.1); queueing delay 22-62 ms against 1,700-2,100 ms (ratio 34-77). Asserted well below both.
    assert p99(2.0) > 4 * p99(0.4), (p99(0.4), p99(2.0))
    assert queueing(2.0) > 10 * queueing(0.4), (queueing(0.4), queueing(2.0))
    for ivs, _ in runs[2.0]:  # overloaded: the queue builds interval after interval (until shedding caps it)
        assert ivs[1].measurement.queueing_delay_ms > ivs[0].measurement.queueing_delay_ms


def test_every_request_is_served_or_dropped_and_only_overload_drops(runs):
    for load, results in runs.items():
        for ivs, report in results:
            r = report.requests
            assert r["sent"] == r["ok"] + r["failed"] and r["sent"] > 0 and r["in_flight"] == 0
            assert all(iv is not None and iv.measurement.simulated for iv in ivs) and len(ivs) == 4
            if load < 1:
                assert r["failed"] == 0
    # past capacity, requests waiting beyond drop_after x SLO are shed (7-26 % per seed over seeds 0-7)
    assert statistics.median(rep.requests["failed"] / rep.requests["sent"] for _, rep in runs[2.0]) > 0.03
