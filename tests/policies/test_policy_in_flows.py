"""The flows' ``policy`` parameter picks the deciding policy through ``Policy.make`` (flows/common.make_tuner)."""

from __future__ import annotations

import pytest

from flows.common import make_tuner
from oltunes.config import get_settings
from oltunes.errors import ConfigError
from oltunes.launchers.environment import Environment
from oltunes.tuner.protocol import TunerLike
from oltunes.types import ClusterState, JobSpec, Placement


@pytest.fixture(scope="module")
def simulated(shared_data):
    env = Environment.make("simulated")
    return env, env.variants(get_settings())


def _job(variants, family="resnet"):
    best = max(v.accuracy for v in variants if v.family == family)
    return JobSpec(job_id="j", kind="batch", family=family, slo_ms=2000, items=100, accuracy_floor=best - 0.04)


@pytest.mark.parametrize("name", ["static-profile", "round-robin", "oltunes"])
def test_the_named_policy_decides(name, simulated, oltunes_home):
    env, variants = simulated
    tuner, _ = make_tuner(env, variants, name)
    assert isinstance(tuner, TunerLike)
    d = tuner.decide(_job(variants), env.cluster())
    assert d.candidate.variant.family == "resnet"
    if name == "static-profile":  # it read the public table: the prediction is that table's
        assert d.explanation.predicted.latency_p99_ms > 0 and d.source == "policy"
    else:
        assert d.source == ("policy" if name == "round-robin" else "prior")


def test_the_tuner_keeps_its_state_and_a_baseline_has_none(simulated, oltunes_home):
    env, variants = simulated
    tuner, settings = make_tuner(env, variants, "oltunes")
    assert tuner.save() == settings.tuner_state_path and settings.tuner_state_path.is_file()
    baseline = make_tuner(env, variants, "round-robin")[0]
    assert baseline.save() is None and baseline.n_observed is None  # nothing learnt, nothing kept


def test_a_baseline_that_finds_no_place_says_so(simulated, oltunes_home):
    env, variants = simulated
    baseline = make_tuner(env, variants, "round-robin")[0]
    one = env.cluster().pools[0].model_copy(update={"count": 1, "slots_per_device": 1})
    taken = baseline.decide(_job(variants), ClusterState(pools=[one])).candidate
    full = ClusterState(pools=[one], placements=[Placement(job_id="other", pool=one.name, device=0, candidate=taken,
                                                           slo_ms=2000)])
    with pytest.raises(ConfigError, match="policy 'round-robin': no capacity for job j"):
        baseline.decide(_job(variants), full)


def test_an_unknown_policy_or_one_without_its_profile_is_refused(simulated, oltunes_home):
    env, variants = simulated
    with pytest.raises(ConfigError, match="unknown Policy 'nope'; known: .*static-profile"):
        make_tuner(env, variants, "nope")
    with pytest.raises(ConfigError, match="'static-profile' needs a profile table.*round-robin"):
        make_tuner(Environment.make("local"), variants, "static-profile")
