"""The simulated launcher runs a batch part through the event engine of ``oltunes simulate``: what happens to the
device while the part runs (a drift event mid-run) shows in its measurement, which a closed form over the
candidate cannot see; re-runs reproduce, parallel parts are independent, the shared table is never changed."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from oltunes.inventory import CATALOG
from oltunes.launchers import Launcher, WorkerSpec
from oltunes.sim.events import SlowAccelerator
from oltunes.types import Candidate, CoRunner, JobSpec, Pool

ITEMS = 28000  # parts of a few minutes on a T4: long against the engine's 5 s control interval


@pytest.fixture
def public(shared_data):
    from oltunes.sim.perfmodel import load_performance_model

    return load_performance_model()


def _spec(public, run_dir: Path, batch: int = 8, co_runners: tuple[CoRunner, ...] = ()) -> WorkerSpec:
    v = next(v for v in public.variants() if v.family == "resnet")
    pool = Pool(name="t4-pool", accelerator=CATALOG["t4"], count=1)
    cand = Candidate(pool=pool.name, accelerator="t4", variant=v, batch_size=batch, co_runners=co_runners)
    job = JobSpec(job_id="job-1", family="resnet", slo_ms=500, items=ITEMS)
    return WorkerSpec(mode="batch", job=job, candidate=cand, pool=pool, run_dir=run_dir, decision_id="dec-1")


def _measure(launcher, spec):
    return launcher.wait(launcher.start(spec)).measurement


def test_a_slowdown_mid_part_slows_the_rest_of_the_part(public, tmp_path):
    """The accelerator halves its speed halfway through the part: the engine serves the first half at the old speed
    and the rest at the new one, about 1.5x the wall time (a closed form over the candidate sees 1x or 2x)."""
    ratios = []
    for seed in range(5):
        spec = _spec(public, tmp_path / f"part-{seed}")
        base = _measure(Launcher.make("simulated", model=public, seed=seed), spec)
        half = SlowAccelerator(kind="slow_accelerator", at_s=base.wall_s / 2, accelerator="t4", factor=2.0)
        slowed = _measure(Launcher.make("simulated", model=public, seed=seed, events=[half]), spec)
        assert slowed.items == base.items == ITEMS
        ratios.append(slowed.wall_s / base.wall_s)
    # events apply at the start of a control interval (5 s, against parts of ~200 s): a margin of 0.15
    assert 1.35 < statistics.median(ratios) < 1.65, ratios
    # the shared public table never feels a part's slowdown
    vi = public.variant_index(spec.candidate.variant.name)
    row = public.latency_row(vi, "t4").copy()
    _measure(Launcher.make("simulated", model=public, seed=0, events=[half]), spec)
    assert np.array_equal(public.latency_row(vi, "t4"), row)


def test_co_runners_named_by_the_decision_interfere(public, tmp_path):
    """Co-runners on the device slow the part (interference and time-slicing, as the engine models them)."""
    heavy = next(v for v in public.variants() if v.family != "resnet")
    co = tuple(CoRunner(job_id=f"other-{i}", family=heavy.family, variant=heavy.name, size=heavy.size, load=0.9)
               for i in range(2))  # fmt: skip
    alone, shared = [], []
    for seed in range(5):
        launcher = Launcher.make("simulated", model=public, seed=seed)
        alone.append(_measure(launcher, _spec(public, tmp_path / f"p{seed}")).throughput_items_per_s)
        shared.append(_measure(launcher, _spec(public, tmp_path / f"p{seed}", co_runners=co)).throughput_items_per_s)
    assert statistics.median(shared) < 0.9 * statistics.median(alone), (alone, shared)


def test_a_rerun_reproduces_and_parallel_parts_are_independent(public, tmp_path):
    launcher = Launcher.make("simulated", model=public, seed=3)
    spec = _spec(public, tmp_path / "part-0")
    a, b = _measure(launcher, spec), _measure(launcher, spec)
    fields = ("items", "wall_s", "latency_p50_ms", "latency_p99_ms", "energy_j_per_item", "throughput_items_per_s")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert a.simulated and a.energy_source == "simulated" and a.decision_id == "dec-1" and a.job_id == "job-1"
    others = [_measure(launcher, _spec(public, tmp_path / f"part-{i}")) for i in range(1, 4)]
    assert len({m.latency_p99_ms for m in [a, *others]}) == 4  # each part draws its own noise
    assert np.isfinite([m.energy_j_per_item for m in others]).all()
