"""Launchers start workers where a Decision says: ``Launcher.make("local" | "simulated" | "docker")``.

- ``local``: the worker CLI as a subprocess pinned to the pool's CPU set (default);
- ``simulated``: the simulator's performance model answers instead (every result tagged simulated);
- ``docker``: a GPU container through the Docker SDK (refuses clearly without an engine).

Flows do not pick a launcher themselves: they ask the `environment.Environment` of the same name, which bundles
it with the model catalogue, the inventory, how a streaming service is served (`serving.Serving`), the experiment
and the tuner state.
"""

from oltunes.launchers import docker_launcher as _docker_launcher  # noqa: F401  (registers "docker")
from oltunes.launchers.base import Handle, Launcher, WorkerResult, WorkerSpec
from oltunes.launchers.local import LocalLauncher, pool_cores
from oltunes.launchers.simulated import SimulatedLauncher

__all__ = ["Handle", "Launcher", "LocalLauncher", "SimulatedLauncher", "WorkerResult", "WorkerSpec", "pool_cores"]
