"""`oltunes simulate --plots`: legends beside the data, no labels piled on each other, RLTune bars on a linear
axis, and every printed column and the warm-up result explained."""

from __future__ import annotations

import pytest

from oltunes.sim import report as R


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.fixture(scope="module")
def tiny_results(shared_data, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("OLTUNES_HOME", str(tmp_path_factory.mktemp("home")))
    from oltunes.config import get_settings
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import prepare, run_scenario

    get_settings.cache_clear()
    try:
        yield run_scenario(prepare(load_scenario("tiny")), ["round-robin", "oracle", "least-loaded"], lambda n, f: None)
    finally:
        mp.undo()
        get_settings.cache_clear()


def test_every_legend_sits_beside_its_axes_and_no_label_covers_another(tiny_results):
    figs = R.figures(tiny_results, "tiny")
    assert set(figs) == {"latency_cdf.png", "slo_violations_over_time.png", "energy_vs_accuracy.png"}
    for name, fig in figs.items():
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        (ax,) = fig.axes
        legend = ax.get_legend()
        assert legend is not None, name
        assert not _overlaps(legend.get_window_extent(renderer), ax.get_window_extent(renderer)), name
        texts = [t.get_window_extent(renderer) for t in ax.texts]
        assert not any(_overlaps(a, b) for i, a in enumerate(texts) for b in texts[i + 1:]), name
    # energy vs accuracy: each policy named once, in the legend (points of equal values used to pile their labels)
    ax = figs["energy_vs_accuracy.png"].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(tiny_results)


def test_every_printed_column_and_the_warmup_result_are_explained():
    explained = {part.strip() for key in R.COLUMN_NOTES for part in key.split("/")}
    short = {part.strip() for v in R.SHORT.values() for part in v.split("/")}
    assert short <= explained | {"p50 ms", "p99 ms"} and {"p50 ms", "p99 ms"} <= explained
    assert "stranded" in R.COLUMN_NOTES["frag"]
    never = R.warmup_note({"warmup_s": None}, 60.0)
    assert never.startswith("warm-up never reached") and "95 %" in never and "60 s window" in never
    assert R.warmup_note({"warmup_s": 120.0}, 60.0).startswith("warm-up 120 s")


def test_rltune_bars_use_a_linear_axis_so_the_best_bar_is_visible():
    from oltunes.rltune.evaluate import bar_figures

    rep = {"philly": {"fcfs": {"avg_jct_s": 9000.0, "avg_queue_delay_s": 5000.0, "bounded_slowdown": 40.0, "gpu_util": 0.5},
                      "rltune": {"avg_jct_s": 3000.0, "avg_queue_delay_s": 12.0, "bounded_slowdown": 1.2, "gpu_util": 0.6}}}
    for name, fig in bar_figures(rep).items():
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        (ax,) = fig.axes
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0, name
        assert not _overlaps(ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)), name
        assert len(ax.texts) == 2  # each bar's value written on it
