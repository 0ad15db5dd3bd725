"""Accelerator catalog and the cluster inventory (YAML) that real pools and the simulator share.

Inventory format (``infra/inventory.yaml``, simulator scenarios embed the same ``pools:`` list)::

    pools:
      - name: a100-east
        accelerator: a100        # a catalog name, or an inline mapping of Accelerator fields
        count: 8
        slots_per_device: 4
        device_ids: [GPU-...]    # optional, Docker launcher
        engine: ssh://gpu-host-1 # optional, Docker launcher: the engine of this pool's host (default DOCKER_HOST)
      - name: cpu-2
        accelerator: cpu
        count: 1
        cpu_set: [0, 1]          # optional, local launcher pins the worker to these cores
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from oltunes.errors import ConfigError, invalid
from oltunes.types import Accelerator, Pool

# Board power is the vendor's published TDP/TBP; idle power and on-demand price are typical public
# cloud/datasheet figures (approximate: they rank pools, they are not billing data).
CATALOG: dict[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator(name="cpu", memory_gb=16, idle_w=10, max_w=65, cost_per_hour=0.10),
        Accelerator(name="p100", memory_gb=16, idle_w=30, max_w=250, cost_per_hour=1.46),
        Accelerator(name="t4", memory_gb=16, idle_w=10, max_w=70, cost_per_hour=0.35),
        Accelerator(name="l4", memory_gb=24, idle_w=16, max_w=72, cost_per_hour=0.70),
        Accelerator(name="a10", memory_gb=24, idle_w=20, max_w=150, cost_per_hour=0.75),
        Accelerator(name="v100", memory_gb=16, idle_w=40, max_w=300, cost_per_hour=2.48),
        Accelerator(name="a100", memory_gb=40, idle_w=50, max_w=400, cost_per_hour=3.67),
        Accelerator(name="h100", memory_gb=80, idle_w=70, max_w=700, cost_per_hour=6.98),
    )
}


class _PoolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    accelerator: str | Accelerator
    count: int
    slots_per_device: int = 4
    cpu_set: list[int] | None = None
    device_ids: list[str] = []
    engine: str | None = None


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pools: list[_PoolSpec]


def _resolve_accelerator(spec: str | Accelerator, where: str) -> Accelerator:
    if isinstance(spec, Accelerator):
        return spec
    try:
        return CATALOG[spec]
    except KeyError:
        raise ConfigError(f"{where}.accelerator: unknown {spec!r}; known: {', '.join(CATALOG)}") from None


def pools_from_data(data: Any, source: str = "inventory") -> list[Pool]:
    """Validate an inventory mapping (``{"pools": [...]}``) into Pools; errors name the field."""
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as e:
        raise invalid(e, source) from e
    pools: list[Pool] = []
    for i, spec in enumerate(inv.pools):
        where = f"{source}: pools[{i}]"
        try:
            pools.append(
                Pool(
                    name=spec.name,
                    accelerator=_resolve_accelerator(spec.accelerator, where),
                    count=spec.count,
                    slots_per_device=spec.slots_per_device,
                    cpu_set=tuple(spec.cpu_set) if spec.cpu_set is not None else None,
                    device_ids=tuple(spec.device_ids),
                    engine=spec.engine,
                )
            )
        except ValidationError as e:
            raise invalid(e, where) from e
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: pool names must be unique, got {names}")
    return pools


def load_inventory(path: str | Path) -> list[Pool]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"inventory file not found: {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    return pools_from_data(data, source=str(path))
