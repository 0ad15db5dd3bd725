"""The trained policy: weights load from safetensors with their metadata, bad files are refused, and a tiny policy
beats random priority on fixed held-out sequences (three training seeds, medians)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from oltunes.errors import ModelError
from oltunes.rltune.evaluate import metrics, play
from oltunes.rltune.mapper import Mapper
from oltunes.rltune.net import load_policy
from oltunes.rltune.policies import QueuePolicy
from oltunes.rltune.traces import sequences


def test_weights_are_safetensors_with_training_metadata(tiny_policies):
    path = tiny_policies[0]
    raw = path.read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert "training" in header["__metadata__"] and not raw.startswith(b"\x80")  # not a pickle
    net, meta = load_policy(path)
    assert meta["seed"] == 0 and meta["trace"] == "synthetic" and len(meta["reward_history"]) == meta["iterations"]


def test_bad_weights_are_refused(tmp_path, tiny_policies):
    with pytest.raises(ModelError, match="not found"):
        load_policy(tmp_path / "none.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelError, match="safetensors"):
        load_policy(junk)
    from oltunes.errors import ConfigError

    with pytest.raises(ConfigError, match="weights"):
        QueuePolicy.make("rltune")


def test_trained_policy_beats_random_priority(tiny_trace, tiny_policies):
    from tests.rltune.conftest import TINY_LOAD

    seqs = sequences(tiny_trace, split="test", n=6, length=64, load=TINY_LOAD)

    def median_bsld(policy) -> float:
        return float(np.median([metrics(play(s, policy, Mapper.make("greedy")))["bounded_slowdown"] for s in seqs]))

    rl = [median_bsld(QueuePolicy.make("rltune", weights=w)) for w in tiny_policies.values()]
    rnd = [median_bsld(QueuePolicy.make("random", seed=s)) for s in range(5)]
    # measured: policies 2.07-2.13, random 2.38-2.75; the margin sits inside that gap
    assert np.median(rl) < 0.95 * np.median(rnd), (rl, rnd)


def test_training_keeps_the_best_validated_policy_and_stops_when_it_stalls(tiny_trace):
    from oltunes.rltune.policies import RLTune
    from oltunes.rltune.ppo import VALIDATION_SEED, TrainConfig, _baseline, _relative_gain, train
    from tests.rltune.conftest import TINY_LOAD

    cfg = TrainConfig(seed=1, iterations=40, episodes_per_iteration=2, train_sequences=6, sequence_length=32,
                      load=TINY_LOAD, validate_every=1, validation_sequences=2, patience=2)
    said: list[str] = []
    net, meta = train(tiny_trace, cfg, progress=said.append)
    val = meta["validation_history"]
    assert meta["iterations_run"] == len(val) < cfg.iterations, "a stalled validation score ends training early"
    # why it stopped where it did, in the metadata and as the last line the user sees
    reason = meta["stop_reason"]
    assert reason.startswith(f"stopped early at iteration {meta['iterations_run']} of 40") and "patience 2" in reason
    assert said[-1].startswith(reason) and f"after iteration {meta['best_iteration']}" in said[-1]
    assert sum(line.startswith("iteration ") for line in said) == meta["iterations_run"]
    assert val.index(max(val)) + 1 == meta["best_iteration"]
    seqs = sequences(tiny_trace, split="train", n=2, length=32, seed=VALIDATION_SEED + 1, load=TINY_LOAD)
    got = np.mean([_relative_gain(RLTune(snapshot=net.snapshot()), s, cfg, _baseline(s, cfg, None)[0])
                   for s in seqs])
    assert got == pytest.approx(max(val), abs=1e-4), "the returned network is the best validated one"
