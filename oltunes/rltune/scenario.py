"""Batch-queue scenarios: a trace, a cluster, held-out sequences and the queue policies to compare.

A YAML file with ``kind: batch-queue`` (shipped ones live in ``oltunes/rltune/scenarios/<name>.yaml``)::

    kind: batch-queue
    name: philly
    trace: philly                 # loader: philly, alibaba, helios or csv (your own job log)
    file: null                    # default: the loader's file under shared_data; relative paths: the YAML's folder
    cluster: null                 # default: the loader's cluster shape; csv needs {name, pools: [{name, nodes,
                                  #   gpus_per_node}]}
    sequences: 10                 # held-out sequences (last 30 % of the trace) ...
    length: 256                   # ... of this many jobs
    load: 1.5                     # offered load each sequence is rescaled to
    mapper: milp                  # or greedy
    policies: [fcfs, sjf, f1, slurm, gavel-like, random, rltune]
    rltune:                       # where the 'rltune' policy's weights come from: a file, or ...
      weights: null
      train: {seed: 0, iterations: 60}   # ... trained on the first 70 % (cached under $OLTUNES_HOME/rltune)

``oltunes simulate --scenario`` runs it (see :func:`run`); inference-serving scenarios are :mod:`oltunes.sim`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from oltunes.errors import ConfigError, invalid
from oltunes.rltune.cluster import ClusterShape, NodePool
from oltunes.rltune.evaluate import BASELINES
from oltunes.rltune.mapper import Mapper
from oltunes.rltune.policies import QueuePolicy
from oltunes.rltune.traces import DEFAULT_LOAD, TraceLoader

KIND = "batch-queue"
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PoolSpec(_Strict):
    name: str = Field(pattern=_NAME)
    nodes: int = Field(ge=1, le=4096)
    gpus_per_node: int = Field(ge=1, le=64)


class ClusterSpec(_Strict):
    name: str = Field(pattern=_NAME)
    pools: list[PoolSpec] = Field(min_length=1, max_length=64)

    def shape(self) -> ClusterShape:
        if len({p.name for p in self.pools}) != len(self.pools):
            raise ConfigError(f"cluster {self.name}: field 'pools': pool names must differ")
        return ClusterShape(self.name, tuple(NodePool(p.name, p.nodes, p.gpus_per_node) for p in self.pools))


class TrainSpec(_Strict):
    seed: int = Field(default=0, ge=0, le=2**31)
    iterations: int = Field(default=60, ge=1, le=10_000)
    episodes_per_iteration: int = Field(default=4, ge=1, le=256)
    objective: str = "bounded_slowdown"

    @field_validator("objective")
    @classmethod
    def _known_objective(cls, v: str) -> str:
        from oltunes.rltune.evaluate import OBJECTIVES

        if v not in OBJECTIVES:
            raise ValueError(f"unknown objective; known: {', '.join(OBJECTIVES)}")
        return v


class RLTuneSpec(_Strict):
    weights: str | None = Field(default=None, max_length=4096)
    train: TrainSpec | None = None


class BatchQueueScenario(_Strict):
    kind: Literal["batch-queue"]
    name: str = Field(pattern=_NAME)
    description: str = Field(default="", max_length=2000)
    trace: str = Field(pattern=_NAME)
    file: str | None = Field(default=None, max_length=4096)
    cluster: ClusterSpec | None = None
    sequences: int = Field(default=10, ge=1, le=200)
    length: int = Field(default=256, ge=8, le=10_000)
    load: float = Field(default=DEFAULT_LOAD, gt=0, le=100, allow_inf_nan=False)
    mapper: str = "milp"
    time_limit_s: float = Field(default=0.1, gt=0, le=60, allow_inf_nan=False)
    seed: int = Field(default=0, ge=0, le=2**31, description="the random policy's seed")
    policies: list[str] = Field(default=[*BASELINES, "rltune"], min_length=1, max_length=32)
    rltune: RLTuneSpec | None = None

    @field_validator("trace")
    @classmethod
    def _known_trace(cls, v: str) -> str:
        if v not in TraceLoader.known():
            raise ValueError(f"unknown trace loader; known: {', '.join(TraceLoader.known())}")
        return v

    @field_validator("mapper")
    @classmethod
    def _known_mapper(cls, v: str) -> str:
        if v not in Mapper.known():
            raise ValueError(f"unknown mapper; known: {', '.join(Mapper.known())}")
        return v

    @field_validator("policies")
    @classmethod
    def _known_policies(cls, v: list[str]) -> list[str]:
        known = QueuePolicy.known()
        if any(p not in known for p in v):
            raise ValueError(f"unknown queue policy; known: {', '.join(known)}")
        return list(dict.fromkeys(v))


def _shipped_dir():
    return resources.files("oltunes.rltune") / "scenarios"


def shipped() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in _shipped_dir().iterdir() if p.name.endswith(".yaml"))


def _read_yaml(name_or_path: str | Path) -> tuple[Any, str, Path | None] | None:
    """(data, source, folder relative paths resolve against), or None when it is no batch-queue scenario."""
    path = Path(name_or_path)
    if path.is_file():
        text, source, folder = path.read_text(), f"scenario {path}", path.parent
    else:
        candidate = _shipped_dir() / f"{name_or_path}.yaml"
        if not candidate.is_file():
            return None
        text, source, folder = candidate.read_text(), f"scenario {name_or_path}", None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"{source}: not valid YAML") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return None
    return data, source, folder


def is_batch_queue(name_or_path: str | Path) -> bool:
    """Whether `name_or_path` is a shipped batch-queue scenario or a YAML file with ``kind: batch-queue``."""
    return _read_yaml(name_or_path) is not None


def load(name_or_path: str | Path) -> tuple[BatchQueueScenario, Path | None]:
    """The scenario and the folder its relative paths are resolved against (None for shipped ones)."""
    found = _read_yaml(name_or_path)
    if found is None:
        raise ConfigError(f"scenario {str(name_or_path)[:200]!r}: not a batch-queue scenario; shipped: "
                          f"{', '.join(shipped())}")
    data, source, folder = found
    try:
        return BatchQueueScenario.model_validate(data), folder
    except ValidationError as e:
        raise invalid(e, source) from None


def _resolve(p: str, folder: Path | None) -> Path:
    path = Path(p).expanduser()
    return path if path.is_absolute() or folder is None else folder / path


def run(name_or_path: str | Path, policies: list[str] | None = None,
        progress: Callable[[str], None] | None = None) -> tuple[BatchQueueScenario, dict[str, dict[str, Any]]]:
    """Play the scenario's held-out sequences under every queue policy (`policies` overrides the scenario's)."""
    from oltunes.rltune.evaluate import evaluate_trace
    from oltunes.rltune.ppo import TrainConfig, trained_weights
    from oltunes.rltune.traces import load_trace

    sc, folder = load(name_or_path)
    names = list(dict.fromkeys(policies)) if policies else sc.policies
    for n in names:
        QueuePolicy.lookup(n)
    shape = sc.cluster.shape() if sc.cluster else None
    trace = load_trace(sc.trace, _resolve(sc.file, folder) if sc.file else None, shape)
    weights = None
    if "rltune" in names:
        spec = sc.rltune or RLTuneSpec()
        if spec.weights:
            weights = _resolve(spec.weights, folder)
        else:
            t = spec.train or TrainSpec()
            cfg = TrainConfig(seed=t.seed, iterations=t.iterations, episodes_per_iteration=t.episodes_per_iteration,
                              objective=t.objective, load=sc.load, sequence_length=sc.length)
            weights = trained_weights(trace, cfg, progress=progress)
    rep = evaluate_trace(trace, names, weights=weights, n=sc.sequences, length=sc.length, load=sc.load,
                         mapper=sc.mapper, time_limit_s=sc.time_limit_s, seed=sc.seed, progress=progress)
    return sc, rep
