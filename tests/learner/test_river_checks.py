"""River's own estimator checks (``river.checks``) over every estimator of ``oltunes.learner``, and the FTML defects
they and their neighbours exposed: pickling after a dict-path step, one instance shared by two parameter tables,
and a learning-rate schedule across save/load."""

from __future__ import annotations

import inspect
import json
import pickle

import numpy as np
import pytest
from river import base, checks, optim

from oltunes.learner import fm as fm_module
from oltunes.learner.fm import FMRegressor, MultiFMRegressor, RiverFMRegressor
from oltunes.learner.ftml import FTML


def _estimators():
    """Every river estimator class defined in oltunes.learner.fm, with its unit-test parameters, plus FTML
    driving each optimizer path (row path shared by two tables, a schedule; the keyed dict path)."""
    classes = [c for _, c in inspect.getmembers(fm_module, inspect.isclass)
               if issubclass(c, base.Estimator) and c.__module__ == fm_module.__name__ and not c.__name__.startswith("_")]
    assert {FMRegressor, MultiFMRegressor, RiverFMRegressor} <= set(classes)
    for cls in classes:
        for params in cls._unit_test_params():
            yield cls(**params)
    shared = FTML(lr=0.03)
    yield FMRegressor(weight_optimizer=shared, latent_optimizer=shared, seed=1)
    yield MultiFMRegressor(targets=("a", "b"), latent_optimizer=FTML(lr=optim.schedulers.InverseScaling(0.05)),
                           seed=2)
    yield RiverFMRegressor(n_factors=2, weight_optimizer=FTML(0.05), latent_optimizer=FTML(0.05), seed=3)


CASES = [(model, check) for model in _estimators() for check in checks.yield_checks(model)
         if check.__name__ not in model._unit_test_skips()]


@pytest.mark.parametrize("model, check", CASES, ids=[f"{m!r:.60}-{c.__name__}" for m, c in CASES])
def test_river_check(model, check):
    check(model.clone())


def test_the_fms_declare_the_feature_order_skip_river_declares_for_its_own_fm():
    from river import facto

    for cls in (FMRegressor, MultiFMRegressor):
        assert cls()._unit_test_skips() == facto.FMRegressor()._unit_test_skips() == {"check_shuffle_features_no_impact"}


def test_ftml_pickles_after_a_dict_path_step():
    opt = FTML(lr=0.1)
    w = opt.step({"a": 1.0, "b": np.ones(2)}, {"a": 0.5, "b": np.full(2, -0.5)})
    again = pickle.loads(pickle.dumps(opt))
    w1 = opt.step(dict(w), {"a": 0.2, "b": np.ones(2)})
    w2 = again.step(dict(w), {"a": 0.2, "b": np.ones(2)})
    assert w1["a"] == w2["a"] and np.array_equal(w1["b"], w2["b"])


def _fm_predictions(weight_opt, latent_opt, xs):
    model = FMRegressor(weight_optimizer=weight_opt, latent_optimizer=latent_opt, seed=0)
    for x, y in xs:
        model.learn_one(x, y)
    return [model.predict_one(x) for x, _ in xs]


def test_one_ftml_shared_by_weights_and_latents_equals_two():
    rng = np.random.default_rng(0)
    xs = [({f"f{k}": 1.0, f"g{int(rng.integers(3))}": 1.0}, float(rng.normal())) for k in rng.integers(0, 5, 200)]
    shared = FTML(lr=0.03)
    np.testing.assert_array_equal(_fm_predictions(shared, shared, xs), _fm_predictions(FTML(0.03), FTML(0.03), xs))


def test_a_table_whose_rows_change_shape_under_one_key_is_refused():
    opt = FTML(lr=0.1)
    opt.step_rows(np.zeros((4, 2)), np.array([0]), np.ones((1, 2)), key="w")
    with pytest.raises(ValueError, match="own key"):
        opt.step_rows(np.zeros((4, 3)), np.array([0]), np.ones((1, 3)), key="w")


@pytest.mark.parametrize("lr", [optim.schedulers.InverseScaling(0.2, power=0.7), optim.schedulers.Constant(0.05), 0.07])
def test_the_learning_rate_schedule_survives_save_and_load(lr):
    opt = FTML(lr=lr)
    table = np.zeros((3, 2))
    for _ in range(5):
        opt.step_rows(table, np.array([0, 2]), np.ones((2, 2)))
    again = FTML.from_state_dict(json.loads(json.dumps(opt.state_dict())))
    assert type(again.lr) is type(opt.lr) and again.learning_rate == opt.learning_rate
    t1, t2 = table.copy(), table.copy()
    for _ in range(3):
        opt.step_rows(t1, np.array([0, 1]), np.full((2, 2), -0.3))
        again.step_rows(t2, np.array([0, 1]), np.full((2, 2), -0.3))
    np.testing.assert_array_equal(t1, t2)


def test_an_unsavable_schedule_is_refused_by_name():
    opt = FTML(lr=optim.schedulers.Optimal(optim.losses.Squared()))
    with pytest.raises(TypeError, match="Optimal.*savable: Constant, InverseScaling"):
        opt.state_dict()


def test_state_files_written_before_per_table_keys_still_load():
    opt = FTML(lr=0.05)
    table = np.zeros((3, 2))
    opt.step_rows(table, np.array([0, 2]), np.ones((2, 2)))
    d = opt.state_dict()
    (st,) = d["rows"].values()
    old = {**d, "lr": 0.05, "rows": st}  # the earlier format: one unkeyed table, a bare constant rate
    again = FTML.from_state_dict(old)
    t1, t2 = table.copy(), table.copy()
    opt.step_rows(t1, np.array([0, 1]), np.full((2, 2), -0.3))
    again.step_rows(t2, np.array([0, 1]), np.full((2, 2), -0.3))
    np.testing.assert_array_equal(t1, t2)
