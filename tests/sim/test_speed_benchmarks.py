"""The speed benchmarks' own arithmetic: the profile's layers (every function in one, adding up to the run) and
sim_speed's median run."""

import pstats

from benchmarks.sim_profile import by_layer, layer_of, profiled_run, top_functions
from benchmarks.sim_speed import median_run


def test_layers_of_known_functions():
    assert layer_of(("/r/oltunes/tuner/model/estimate.py", 264, "_score_grid")) == "tuner Python"
    assert layer_of(("/r/oltunes/learner/fm_state.py", 113, "index")) == "learner Python"
    assert layer_of(("/r/oltunes/sim/jobrun.py", 106, "serve")) == "simulator Python"
    assert layer_of(("/r/oltunes/simulation.py", 1, "prepare")) == "simulator Python"
    assert layer_of(("/r/oltunes/trusted.py", 27, "trusted_model")) == "other OLTunes Python"
    assert layer_of(("~", 0, "<built-in method numpy.array>")) == "numpy (C)"
    assert layer_of(("~", 0, "<method 'get' of 'dict' objects>")) == "Python builtins (dict, list, len, ...)"
    assert layer_of(("/usr/lib/python3.11/functools.py", 981, "__get__")) == "other"


def test_a_small_run_is_accounted_in_full():
    stats, run = profiled_run(20, 5_000, "oltunes")
    assert isinstance(stats, pstats.Stats) and run["decide"] > 0 and run["observe"] > 0
    layers = by_layer(stats)
    total = sum(v[2] for v in stats.stats.values())
    assert abs(sum(v["own_s"] for v in layers.values()) - total) < 1e-9
    assert sum(v["calls"] for v in layers.values()) == sum(v[0] for v in stats.stats.values())
    assert {"tuner Python", "simulator Python"} <= set(layers)
    own = [v["own_s"] for v in layers.values()]
    assert own == sorted(own, reverse=True)
    top = top_functions(stats, 5)
    assert len(top) == 5 and [r["own_s"] for r in top] == sorted((r["own_s"] for r in top), reverse=True)


def test_median_run_is_one_whole_run():
    runs = [{"total_s": t, "decide_cpu_s": t / 2} for t in (12.0, 10.0, 11.0)]
    assert median_run(runs) == {"total_s": 11.0, "decide_cpu_s": 5.5, "total_s_runs": [12.0, 10.0, 11.0]}
    assert median_run(runs[:2])["total_s"] == 10.0  # an even count: the lower middle
    assert median_run(runs[:1])["total_s_runs"] == [12.0]
