"""Where a flow's jobs run, as one object registered by name (the flows' ``launcher`` parameter:
``Environment.make("local" | "docker" | "simulated")``): its model catalogue, its inventory, its launcher, how a
streaming service is served, its experiment and its tuner-state home, and the questions a batch job asks about
outputs. Flows ask the environment and never branch on its name or on whether results are simulated.

- `OnDisk` (``local``, ``docker``): real workers write output shards under a locked directory, record their
  decision there (a re-run resumes it), learn in ``settings.home`` from real measurements only, and register
  their ONNX variants in MLflow; a streaming service is real workers behind the gateway, in wall time.
- `Simulated` (``simulated``): the simulator's event engine answers, in simulated time (batch parts and
  streaming services alike, queueing, drift and interference included); no output rows, no lock, no decision record, a tuner state of its own
  under ``<home>/simulated`` warm-started from simulated measurements only, the public profile table for
  profile-based policies, and the ``oltunes-simulation`` experiment for streaming steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

from oltunes.config import REPO_ROOT, Settings
from oltunes.registry import Registered
from oltunes.types import ClusterState, Decision, Variant

if TYPE_CHECKING:
    from oltunes.launchers.base import Launcher
    from oltunes.launchers.serving import ServiceSetup, Serving


class Environment(Registered, root=True):
    """Where jobs run (registered by name: ``Environment.make("local")``); its launcher has the same name.

    A batch job's directory (`output`) always exists (its part plan and run directories live there); whether
    the job writes output rows into it, locks it and records its decision there is the environment's answer.
    """

    #: Measurements made here carry this tag; warm start replays only measurements with the same tag.
    simulated: bool = False
    #: A streaming service can serve live clients (not only a replayed trace).
    serves_live_clients: bool = True
    #: Variants are real ONNX files (registered in MLflow after a job); simulated variants are not.
    model_files: bool = True
    #: A batch job needs an input dataset (a simulated one only a count of items).
    needs_dataset: bool = True
    #: The cluster it drives unless the flow names an inventory (relative to the repository root).
    inventory: str = "infra/inventory.local.yaml"

    def launcher(self) -> Launcher:
        from oltunes.launchers import Launcher  # the package registers every launcher

        return Launcher.make(self.name)

    def variants(self, settings: Settings) -> list[Variant]:
        """The model catalogue: the model zoo's variants (real ONNX files)."""
        from oltunes.zoo import list_variants

        return list_variants(settings.zoo_dir)

    def cluster(self, inventory: str | None = None) -> ClusterState:
        """The pools of ``inventory`` (a path), else of this environment's own inventory."""
        from oltunes.inventory import load_inventory

        return ClusterState(pools=load_inventory(Path(inventory) if inventory else REPO_ROOT / self.inventory))

    def ready_cluster(self, cluster: ClusterState) -> tuple[ClusterState, list[str]]:
        """Before any decision: the pools that can start a worker here, and why each other one cannot (raises
        `MissingDependency` when none can)."""
        return cluster, []

    def usable_cluster(self, inventory: str | None, log: Any) -> ClusterState:
        """`cluster` less the pools that cannot start a worker (each left out with a warning on `log`); when none
        can, the reason goes to `log` as one ERROR line (what ``prefect deployment run --watch`` shows) and raises."""
        from oltunes.errors import MissingDependency

        try:
            cluster, left_out = self.ready_cluster(self.cluster(inventory))
        except MissingDependency as e:
            log.error("%s", e)
            raise
        for why in left_out:
            log.warning("left out of this run: %s", why)
        return cluster

    def serving(self, setup: ServiceSetup) -> Serving:
        """How a streaming service is served: real workers behind the gateway, in wall time."""
        from oltunes.launchers.gateway_serving import GatewayServing

        return GatewayServing(self.launcher(), setup)

    @contextlib.contextmanager
    def outputs_locked(self, output: Path, wait_s: float) -> Iterator[None]:
        """Hold `output`'s lock for the job's life: one run per output directory (two would race on its shards)."""
        from oltunes.locks import lock_dir

        lock = lock_dir(output, wait_s, what="parameter 'output': directory")
        try:
            yield
        finally:
            lock.release()

    def recorded_decision(self, output: Path) -> Decision | None:
        """The decision a job in `output` was started with (a re-run resumes with it); None when there is none."""
        from oltunes.launchers.batch_job import recorded_decision

        return recorded_decision(output)

    def record_decision(self, output: Path, decision: Decision) -> None:
        from oltunes.launchers.batch_job import record_decision

        record_decision(output, decision)

    def output_files(self, output: Path) -> int:
        """How many output shards the job in `output` holds."""
        from oltunes.launchers.batch_job import job_outputs

        return len(job_outputs(output))

    def reported_output(self, output: Path) -> str | None:
        """Where the job's outputs are, as reported to the user (None: it writes none)."""
        return str(output)

    def tuner_settings(self, settings: Settings) -> Settings:
        """The settings the tuner learns under (its state lives in ``settings.home``)."""
        return settings

    def profile(self, settings: Settings) -> Any | None:
        """The public profile table a profile-based policy decides from (None: none here)."""
        return None

    def experiment(self, kind: str) -> str:
        """The MLflow experiment a ``kind`` service (``streaming``) logs its steps to."""
        from oltunes.tracking.conventions import experiment_for

        return experiment_for(kind)


class OnDisk(Environment):
    """Real workers writing real outputs (the `Environment` defaults)."""


class Local(OnDisk, name="local"):
    """Worker processes on this machine, pinned to the pools' CPU sets."""


class Docker(OnDisk, name="docker"):
    """Worker containers through a Docker engine (GPU hosts: ``inventory=infra/inventory.gpu.yaml``).

    Each pool's engine is its inventory ``engine:``, else ``DOCKER_HOST`` of the flow run's process (a deployment
    sets it in its job variables, ``job_variables: env: DOCKER_HOST``, not the Prefect worker's environment).
    """

    def ready_cluster(self, cluster: ClusterState) -> tuple[ClusterState, list[str]]:
        """The pools whose engine answers with the worker image (and the NVIDIA runtime for GPU pools)."""
        from oltunes.errors import MissingDependency

        problems = self.launcher().engine_problems(cluster.pools)  # type: ignore[attr-defined]
        by_reason: dict[str, list[str]] = {}
        for name, reason in problems.items():  # pools sharing an engine share its reason: said once
            by_reason.setdefault(reason, []).append(name)
        why = [f"pool{'s' if len(names) > 1 else ''} {', '.join(names)}: {reason}" for reason, names in by_reason.items()]
        usable = [p for p in cluster.pools if p.name not in problems]
        if not usable:
            raise MissingDependency("launcher 'docker': no pool can start a worker container; " + "; ".join(why))
        return cluster.model_copy(update={"pools": usable}), why


class Simulated(Environment, name="simulated"):
    """The simulator answers: no rows are written, and nothing mixes with real measurements."""

    simulated = True
    serves_live_clients = False
    model_files = False
    needs_dataset = False
    inventory = "infra/inventory.yaml"  # the GPU pools

    def variants(self, settings: Settings) -> list[Variant]:
        """The variants of the public profile table (no files)."""
        from oltunes.sim.perfmodel import variants

        return variants(settings)

    def serving(self, setup: ServiceSetup) -> Serving:
        """The event engine of ``oltunes simulate``, in simulated time."""
        from oltunes.config import get_settings
        from oltunes.launchers.sim_engine import engine_truth
        from oltunes.launchers.sim_serving import SimulatedServing

        settings = get_settings()
        return SimulatedServing(engine_truth(settings=settings), setup, seed=settings.seed)

    @contextlib.contextmanager
    def outputs_locked(self, output: Path, wait_s: float) -> Iterator[None]:
        yield  # no output rows to race on

    def recorded_decision(self, output: Path) -> Decision | None:
        return None  # every run decides afresh: there are no finished shards to stay consistent with

    def record_decision(self, output: Path, decision: Decision) -> None:
        return None

    def output_files(self, output: Path) -> int:
        return 0

    def reported_output(self, output: Path) -> str | None:
        return None

    def tuner_settings(self, settings: Settings) -> Settings:
        # Simulated GPUs must never mix with real measurements: a tuner state of their own.
        return settings.model_copy(update={"home": settings.home / "simulated"})

    def profile(self, settings: Settings) -> Any:
        from oltunes.sim.perfmodel import load_performance_model

        return load_performance_model(settings)

    def experiment(self, kind: str) -> str:
        return super().experiment("simulation")
