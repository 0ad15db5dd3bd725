"""Run a scenario under several policies: the one entry point the CLI, the benchmarks and the tests share.

The composition root: it joins the simulator (``oltunes.sim``: truth, cluster, engine) and the placement policies
(``oltunes.policies``), which never import each other — policies see only ``ClusterState`` and the
``oltunes.profiles.Profile`` interface, the engine only the shape of a policy (``decide`` / ``observe``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from oltunes.config import Settings, get_settings
from oltunes.policies import Policy, PolicyContext
from oltunes.sim.cluster import SimCluster
from oltunes.sim.engine import Simulator
from oltunes.sim.metrics import compute
from oltunes.sim.perfmodel import PerformanceModel, load_performance_model
from oltunes.sim.jobrun import RunResult
from oltunes.sim.scenario import Scenario
from oltunes.sim.world_noise import STRESS_SIGMA, WorldSpec, stress_world
from oltunes.sim.workload import SimJob, build_workload


@dataclass
class Prepared:
    scenario: Scenario
    model: PerformanceModel
    jobs: list[SimJob]

    def truth(self) -> PerformanceModel:
        """A fresh copy of the simulator's truth for one run (seeded by the scenario: every policy faces the same)."""
        return self.model.perturbed(self.world(), self.scenario.seed)

    def world(self) -> WorldSpec:
        """The scenario's world: grounded (sigma per level from the store) or stress (independent sigma)."""
        if self.scenario.world == "stress":
            return stress_world(STRESS_SIGMA if self.scenario.truth_sigma is None else self.scenario.truth_sigma)
        return self.model.grounded_world()

    @property
    def n_requests(self) -> int:
        return sum(j.n_requests for j in self.jobs)


def prepare(sc: Scenario, settings: Settings | None = None) -> Prepared:
    s = settings or get_settings()
    model = load_performance_model(s)
    return Prepared(sc, model, build_workload(sc, model, s.shared_data))


def context(p: Prepared, truth: PerformanceModel, cluster: SimCluster | None = None) -> PolicyContext:
    """What every policy of a run is built with: the public table, the truth (for the oracle only), and the
    cluster's clock and load monitor."""
    sc = p.scenario
    cluster = cluster or SimCluster(sc.pool_list())
    return PolicyContext(
        profile=p.model,
        truth=truth,
        clock=lambda: cluster.now,
        monitor=cluster.loads.get,
        variants=tuple(p.model.variants()),
        batch_sizes=tuple(sc.batch_sizes),
        concurrencies=tuple(sc.concurrencies),
        seed=sc.seed,
        arrivals={j.spec.job_id: j.arrivals for j in p.jobs if j.arrivals is not None},
        horizon_s=sc.retune_interval_s,
    )


def run_policy(p: Prepared, policy: str | Policy, progress: Callable[[float], None] | None = None,
               **policy_kwargs) -> RunResult:
    """One policy on a fresh cluster (same jobs, same seed: policies see the same workload and device drift).

    The physics is ``p.truth()``: the public table perturbed per (variant, accelerator) with the scenario's
    world (``Prepared.world``, fresh per run, since drift events change it); policies read the public table, the oracle the truth.
    """
    sim = simulator(p)
    if isinstance(policy, str):
        policy = Policy.make(policy, ctx=context(p, sim.model, sim.cluster), **policy_kwargs)
    return sim.run(policy, progress)


def exploring(policy: str, trials: bool) -> dict[str, bool]:
    """The keyword a policy that explores is built with to run ``trials`` or not (none for one that never does)."""
    return {"trials": trials} if Policy.lookup(policy).explores else {}


def simulator(p: Prepared) -> Simulator:
    """A fresh simulator of the scenario: its own truth (``p.truth()``) and cluster. A policy for it is built with
    ``context(p, sim.model, sim.cluster)`` (its clock and load monitor are that cluster's)."""
    sc = p.scenario
    return Simulator(
        p.truth(),
        SimCluster(sc.pool_list()),
        p.jobs,
        duration_s=sc.duration_s,
        seed=sc.seed,
        control_interval_s=sc.control_interval_s,
        retune_interval_s=sc.retune_interval_s,
        drop_after_slo=sc.drop_after_slo,
        events=sc.events,
    )


def run_scenario(p: Prepared, policies: list[str], progress: Callable[[str, float], None] | None = None,
                 trials: bool = True) -> dict[str, tuple[RunResult, dict[str, float]]]:
    """Each policy on a fresh cluster; ``trials=False``: the policies that explore do not (``Policy.explores``)."""
    out = {}
    for name in policies:
        cb = (lambda f, n=name: progress(n, f)) if progress else None
        res = run_policy(p, name, cb, **exploring(name, trials))
        out[name] = (res, compute(res))
    return out
