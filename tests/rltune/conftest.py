"""Synthetic batch-queue traces (no shared data needed) and one tiny trained policy per session."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.config import get_settings
from oltunes.rltune.cluster import ClusterShape, NodePool
from oltunes.rltune.traces import Trace, build_trace

# two GPU types: whole 8-GPU nodes and small 2-GPU nodes
TINY_LOAD = 3.0  # a crowded queue, where the order matters (measured: SJF 1.9 vs random 2.4-2.8 bounded slowdown)
TINY = ClusterShape("tiny", (NodePool("big", 4, 8), NodePool("small", 6, 2)))


def synthetic_trace(n: int = 1500, seed: int = 0) -> Trace:
    """Heavy-tailed run times, 1-16 GPUs, a third of the jobs bound to one GPU type."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 1, 1, 2, 2, 4, 8, 16], size=n)
    duration = np.exp(rng.normal(6.0, 1.5, size=n))
    allowed = np.ones((n, 2), bool)
    kind = rng.random(n)
    allowed[kind < 0.2, 1] = False  # big only
    allowed[(kind >= 0.2) & (kind < 0.33), 0] = False  # small only
    submit = np.cumsum(rng.exponential(60.0, size=n))
    return build_trace("synthetic", TINY, submit, duration, gpus, allowed, rng.integers(0, 4, size=n))


def shared_file(rel: str):
    """A file under shared_data, or a skip naming what is missing (CI has the folder)."""
    path = get_settings().shared_data / rel
    if not path.exists():
        pytest.skip(f"{rel} not under shared_data ({get_settings().shared_data}); the public traces are read there")
    return path


@pytest.fixture(scope="session")
def tiny_trace() -> Trace:
    return synthetic_trace()


@pytest.fixture(scope="session")
def tiny_policies(tiny_trace, tmp_path_factory) -> dict[int, object]:
    """Three tiny policies (training seeds 0-2) as weights files: a few CPU-seconds each."""
    from oltunes.rltune.net import save_policy
    from oltunes.rltune.ppo import TrainConfig, train

    out = {}
    for seed in range(3):
        cfg = TrainConfig(seed=seed, iterations=6, episodes_per_iteration=4, train_sequences=12, sequence_length=48,
                          load=TINY_LOAD)
        net, meta = train(tiny_trace, cfg)
        out[seed] = save_policy(net, tmp_path_factory.mktemp("rltune") / f"tiny-{seed}.safetensors", meta)
    return out
