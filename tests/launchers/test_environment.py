"""Each registered environment bundles what the flows ask (catalogue, inventory, launcher, serving, outputs, lock,
decision record, tuner state, history, experiment) so the flows never ask whether results are simulated."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.config import REPO_ROOT, Settings
from oltunes.errors import ConfigError
from oltunes.launchers import Launcher
from oltunes.launchers.environment import Docker, Environment, Local, OnDisk, Simulated
from oltunes.launchers.gateway_serving import GatewayServing
from oltunes.launchers.serving import ServiceSetup
from oltunes.launchers.sim_serving import SimulatedServing
from oltunes.tracking import conventions as cv
from oltunes.types import Candidate, Decision, Explanation, Prediction, Variant

VARIANT = Variant(family="cnn", name="cnn-s-fp32", size="s", precision="fp32", accuracy=0.9)


def _decision() -> Decision:
    cand = Candidate(pool="cpu-1core", accelerator="cpu", variant=VARIANT, batch_size=8, concurrency=2)
    pred = Prediction(latency_p99_ms=18, energy_j_per_item=0.2, throughput_items_per_s=60)
    return Decision(job_id="job-1", candidate=cand, explanation=Explanation(predicted=pred, n_candidates=4, n_feasible=2))


def _shard(output, part: int = 0, shard: int = 0) -> None:
    d = output / f"worker-{part:05d}"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"part-{shard:05d}.parquet").write_bytes(b"not read, only counted")


@pytest.mark.parametrize(("name", "env"), [("local", Local), ("docker", Docker), ("simulated", Simulated)])
def test_every_launcher_has_a_registered_environment_of_its_name(name, env):
    e = Environment.make(name)
    assert type(e) is env and set(Environment.known()) == set(Launcher.known())
    assert type(e.launcher()) is Launcher.lookup(name)
    real = name != "simulated"
    assert e.simulated is not real and e.model_files is real and e.needs_dataset is real


@pytest.mark.parametrize(("name", "serving", "accelerators"), [
    ("local", GatewayServing, {"cpu"}), ("docker", GatewayServing, {"cpu"}), ("simulated", SimulatedServing, {"t4", "a100"}),
])  # fmt: skip
def test_environment_bundles_its_inventory_and_how_a_service_is_served(name, serving, accelerators, shared_data, tmp_path):
    env = Environment.make(name)
    cluster = env.cluster()
    assert accelerators <= {p.accelerator.name for p in cluster.pools}
    setup = ServiceSetup(jobs=[], arrivals=np.zeros(0), duration_s=1.0, control_interval_s=1.0, cluster=cluster, workdir=tmp_path)
    assert type(env.serving(setup)) is serving
    assert env.cluster(str(REPO_ROOT / "infra/inventory.yaml")) == Environment.make("simulated").cluster()  # named: wins


def test_catalogues_are_the_zoo_or_the_public_profile_table(shared_data, tmp_path):
    s = Settings(home=tmp_path / "home")
    assert Environment.make("local").variants(s) == []  # the zoo's files only: none built here
    assert any(v.family == "resnet" for v in Environment.make("simulated").variants(s))


def test_on_disk_locks_records_and_counts_outputs(tmp_path):
    env, out = OnDisk(), tmp_path / "job"
    with env.outputs_locked(out, 0.0):
        with pytest.raises(ConfigError, match="parameter 'output'"), env.outputs_locked(out, 0.0):
            pass  # a second run on the same directory is refused while the first holds it
    with env.outputs_locked(out, 0.0):  # released on exit
        pass
    assert env.recorded_decision(out) is None
    d = _decision()
    env.record_decision(out, d)
    assert env.recorded_decision(out) == d
    assert env.output_files(out) == 0
    _shard(out, 0, 0), _shard(out, 0, 1), _shard(out, 1, 0)
    assert env.output_files(out) == 3
    assert env.reported_output(out) == str(out)
    assert env.model_files


def test_simulated_writes_no_lock_no_record_and_reports_no_output(tmp_path):
    env, out = Simulated(), tmp_path / "job"
    with env.outputs_locked(out, 0.0), env.outputs_locked(out, 0.0):  # nothing to race on: no lock at all
        pass
    assert not out.exists()
    env.record_decision(out, _decision())
    assert not out.exists()
    OnDisk().record_decision(out, _decision())  # even a record left there is not resumed: no shards to match
    _shard(out)
    assert env.recorded_decision(out) is None and env.output_files(out) == 0 and env.reported_output(out) is None
    assert not env.model_files


def test_tuner_state_and_experiments_are_kept_apart(tmp_path):
    s = Settings(home=tmp_path / "home")
    assert OnDisk().tuner_settings(s).home == s.home
    sim = Simulated().tuner_settings(s)
    assert sim.home == s.home / "simulated" and sim.tuner_state_path != s.tuner_state_path
    assert OnDisk().experiment("streaming") == cv.experiment_for("streaming")
    assert Simulated().experiment("streaming") == cv.experiment_for("simulation") != cv.experiment_for("streaming")
    assert OnDisk().profile(s) is None


def test_simulated_environment_gives_the_public_profile_table(shared_data, tmp_path):
    profile = Simulated().profile(Settings(home=tmp_path / "home"))
    assert any(v.family == "resnet" for v in profile.variants())
