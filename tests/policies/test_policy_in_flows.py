"""The flows' ``policy`` parameter picks the deciding policy through ``Policy.make`` (flows/common.make_tuner)."""

from __future__ import annotations

import pytest

from flows.common import make_tuner
from oltunes.config import get_settings
from oltunes.errors import ConfigError
from oltunes.launchers.environment import Environment
from oltunes.types import JobSpec


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
    assert tuner.policy.name == name
    d = tuner.decide(_job(variants), env.cluster())
    assert d.candidate.variant.family == "resnet"
    if name == "static-profile":  # it read the public table: the prediction is that table's
        assert d.explanation.predicted.latency_p99_ms > 0 and d.source == "policy"


def test_the_tuner_policy_keeps_the_configured_tuner_state(simulated, oltunes_home):
    env, variants = simulated
    tuner, settings = make_tuner(env, variants, "oltunes")
    assert callable(tuner.save) and callable(tuner.replay)  # the flow tasks persist and warm-start through these
    path = settings.tuner_state_path
    tuner.save(path)
    assert path.is_file()
    baseline = make_tuner(env, variants, "round-robin")[0]
    assert not hasattr(baseline, "save") and getattr(baseline, "n_observed", None) is None  # no learning state
    assert baseline.replay([]) == 0  # a warm start passes through harmlessly


def test_an_unknown_policy_or_one_without_its_profile_is_refused(simulated, oltunes_home):
    env, variants = simulated
    with pytest.raises(ConfigError, match="unknown Policy 'nope'; known: .*static-profile"):
        make_tuner(env, variants, "nope")
    with pytest.raises(ConfigError, match="'static-profile' needs a profile table.*round-robin"):
        make_tuner(Environment.make("local"), variants, "static-profile")
