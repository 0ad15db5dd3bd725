"""How the streaming flow applies the tuner's trial as a shadow (`apply_shadow`), against a real lease book: the
first trial is shadowed under its own lease, an unchanged trial keeps its shadow, another replaces it, none stops
it; a shadow without a free slot or that fails to start is skipped with its lease given back."""

from __future__ import annotations

import asyncio
import logging

import pytest

from flows.streaming_service import SHADOW_TAG, ModelParams, ModelRun, apply_shadow, shadow_id
from oltunes.allocator.book import LeaseBook
from oltunes.allocator.holder import lease_decisions
from oltunes.errors import WorkerError
from oltunes.gateway.shadow import ShadowBudget
from oltunes.launchers.serving import Serving
from oltunes.inventory import CATALOG
from oltunes.types import Candidate, ColocationGroup, Decision, Explanation, JobSpec, Pool, Prediction, Trial, Variant

POOL = Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=1, slots_per_device=2, cpu_set=(0,))
PRED = Prediction(latency_p99_ms=5, energy_j_per_item=0.1, throughput_items_per_s=100)
JOB = JobSpec(job_id="svc-x", kind="streaming", family="cnn", slo_ms=100, arrival_rate_rps=50, trials=1)
LOG = logging.getLogger("test")


def cand(name: str, batch: int = 8) -> Candidate:
    return Candidate(pool=POOL.name, accelerator="cpu", variant=Variant(name=name, family="cnn", size=name[-1], accuracy=0.9), batch_size=batch)


def decision(serve: str, trial: str | None, device: int = 0) -> Decision:
    trials = (Trial(candidate=cand(trial), device=device, predicted=PRED, value=1.0),) if trial else ()
    return Decision(job_id=JOB.job_id, candidate=cand(serve), trials=trials,
                    group=ColocationGroup(pool=POOL.name, device=0, members=(JOB.job_id,)),
                    explanation=Explanation(predicted=PRED, n_candidates=2, n_feasible=2))  # fmt: skip


class RecordingServing(Serving):
    """Only what `apply_shadow` asks of a serving side: start or stop a shadow (optionally failing to start)."""

    supports_shadow = True

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str | None] = []
        self.fail = fail

    async def shadow(self, model, decision, budget):
        self.calls.append(decision.candidate.variant.name if decision else None)
        if decision is not None and self.fail:
            raise WorkerError("serve worker never became healthy")
        return "ok"

    async def start(self): ...
    async def switch(self, model, decision): ...
    async def measure_interval(self, stop): ...
    async def drain(self): ...

    @property
    def finished(self):
        return False


class Run:
    def __init__(self) -> None:
        self.tags: dict[str, str] = {}

    def set_tags(self, tags):
        self.tags.update(tags)


def model() -> ModelRun:
    m = ModelRun(params=ModelParams(family="cnn", slo_ms=100), job=JOB, index=0, run=Run())  # type: ignore[arg-type]
    m.decisions.append(decision("cnn-s", None))
    return m


def book(slots: int = 2) -> LeaseBook:
    pool = POOL.model_copy(update={"slots_per_device": slots})
    return LeaseBook([pool], lambda j, c: pytest.fail("a shadow's lease names its placement: nothing to decide"))


def shadow_leases(b: LeaseBook) -> list[str]:
    return sorted(lease.job.job_id for lease in b.leases.values())


def test_the_trial_is_shadowed_under_its_own_lease_kept_replaced_and_stopped():
    async def main():
        b, serving, m, budget = book(), RecordingServing(), model(), ShadowBudget(share=0.1)
        async with lease_decisions(b, wait_s=1) as held:
            await apply_shadow(serving, m, decision("cnn-s", "cnn-m"), held, budget, LOG)
            assert serving.calls == ["cnn-m"] and shadow_leases(b) == [shadow_id(JOB.job_id)]
            lease = next(iter(b.leases.values()))
            assert lease.job.arrival_rate_rps == pytest.approx(5.0) and lease.device == 0  # the mirrored share
            assert m.run.tags[SHADOW_TAG] == f"{cand('cnn-m').key} on device 0" and m.shadowed == [m.run.tags[SHADOW_TAG]]
            assert [p.job_id for p in m.placements(0.1)] == [JOB.job_id, shadow_id(JOB.job_id)]  # a co-runner there
            await apply_shadow(serving, m, decision("cnn-l", "cnn-m"), held, budget, LOG)  # same trial: kept
            assert serving.calls == ["cnn-m"]
            await apply_shadow(serving, m, decision("cnn-s", "cnn-l"), held, budget, LOG)  # another: replaced
            assert serving.calls == ["cnn-m", None, "cnn-l"] and shadow_leases(b) == [shadow_id(JOB.job_id)]
            await apply_shadow(serving, m, decision("cnn-s", None), held, budget, LOG)  # none: stopped, lease back
            assert serving.calls[-1] is None and shadow_leases(b) == [] and m.shadow is None
            assert m.run.tags[SHADOW_TAG] == "none" and len(m.shadowed) == 2

    asyncio.run(main())


def test_a_shadow_without_a_free_slot_is_skipped_without_waiting_long():
    async def main():
        b, serving, m = book(slots=1), RecordingServing(), model()
        async with lease_decisions(b, wait_s=0.5) as primary, lease_decisions(b, wait_s=0.5) as held:
            await primary.apply(JOB, m.decision)  # the service's own worker holds the only slot
            await apply_shadow(serving, m, decision("cnn-s", "cnn-m"), held, ShadowBudget(), LOG)
            assert serving.calls == [] and m.shadow is None and shadow_leases(b) == [JOB.job_id]

    asyncio.run(main())


def test_a_shadow_that_fails_to_start_gives_its_lease_back_and_the_service_goes_on():
    async def main():
        b, serving, m = book(), RecordingServing(fail=True), model()
        async with lease_decisions(b, wait_s=1) as held:
            await apply_shadow(serving, m, decision("cnn-s", "cnn-m"), held, ShadowBudget(), LOG)
            assert serving.calls == ["cnn-m"] and m.shadow is None and m.shadowed == [] and shadow_leases(b) == []

    asyncio.run(main())
