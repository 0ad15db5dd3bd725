"""The evaluation report: JSON (shape of issue 4), a printed table, plots (latency CDF, SLO violations over time,
energy vs accuracy), and its log to MLflow (``log_report``).

JSON::

    {"scenario": "light",
     "policies": {"oracle": {"slo_violation_rate": ..., "p50_ms": ..., "p99_ms": ..., "throughput_rps": ...,
                             "gpu_util": ..., "energy_j_per_req": ..., "accuracy_loss_pts": ...,
                             "queueing_delay_s": ..., "jct_s": ..., "fragmentation": ..., ...}, ...},
     "learning": {"warmup_s": ..., "oracle_attainment_after_warmup": ..., "regret_quarters": [...]},
     "regret_per_quarter": {"<policy>": [q1, q2, q3, q4], ...},
     "events": [{"at_s": ..., "event": "slow_accelerator accelerator=t4 factor=1.6",
                 "policies": {"<policy>": {"before": ..., "after": ..., "recovery_s": ...}, ...}}, ...],
     "meta": {...}, "timeseries": {"<policy>": {"t_s": [...], "slo_violation_rate": [...], ...}}}

``learning`` (when both ``oltunes`` and ``oracle`` ran): warm-up length and cumulative regret, see
``metrics.warmup``; ``regret_per_quarter`` and ``events`` are defined in :mod:`oltunes.sim.metrics`.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from oltunes.atomic import atomic_write, atomic_write_json
from oltunes.config import Settings, apply_offline_env, get_settings
from oltunes.errors import MissingDependency
from oltunes.sim import metrics as M
from oltunes.sim.jobrun import RunResult
from oltunes.sim.scenario import Scenario
from oltunes.tracking.client import mlflow_errors, open_client
from oltunes.tracking.conventions import EXPERIMENT_TAGS, EXPERIMENTS

HEADLINE = (
    "slo_violation_rate",
    "p50_ms",
    "p99_ms",
    "throughput_rps",
    "gpu_util",
    "energy_j_per_req",
    "accuracy_loss_pts",
    "queueing_delay_s",
    "jct_s",
    "fragmentation",
)


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return _clean(x.item())
    return x


def build(sc: Scenario, results: dict[str, tuple[RunResult, dict[str, float]]]) -> dict[str, Any]:
    """The report as a JSON-ready dict."""
    ts = {}
    for name, (res, _) in results.items():
        t, viol = M.violations_over_time(res)
        ts[name] = {
            "t_s": [float(x) for x in t],
            "slo_violation_rate": [float(x) for x in viol],
            "energy_j": [float(x) for x in res.energy_j],
            "gpu_util": [float(x) for x in res.util],
            "active_devices": [int(x) for x in res.active_devices],
        }
    learning = {}
    if "oltunes" in results and "oracle" in results:
        ol, orc = results["oltunes"][0], results["oracle"][0]
        wl, att = M.warmup(ol, orc, sc.retune_interval_s)
        learning = {"warmup_s": wl, "oracle_attainment_after_warmup": _clean(att),
                    "regret_quarters": M.regret(ol, orc)}
    return {
        "scenario": sc.name,
        "learning": learning,
        "regret_per_quarter": regret_per_quarter(results),
        "events": events(sc, results),
        "policies": {name: {k: _clean(v) for k, v in m.items()} for name, (_, m) in results.items()},
        "meta": {
            "seed": sc.seed,
            "duration_s": sc.duration_s,
            "control_interval_s": sc.control_interval_s,
            "retune_interval_s": sc.retune_interval_s,
            "world": sc.world,
            "truth_sigma": sc.truth_sigma,
            "devices": sum(p["count"] for p in sc.pools),
            "definitions": M.__doc__,
        },
        "timeseries": ts,
    }


def regret_per_quarter(results: dict[str, tuple[RunResult, dict[str, float]]]) -> dict[str, list[float]]:
    """Every policy's regret against the oracle per quarter of the run (empty without an oracle run)."""
    if "oracle" not in results:
        return {}
    orc = results["oracle"][0]
    return {name: M.regret_per_quarter(res, orc) for name, (res, _) in results.items() if name != "oracle"}


def events(sc: Scenario, results: dict[str, tuple[RunResult, dict[str, float]]]) -> list[dict[str, Any]]:
    """Per drift-event time (events at the same time are one change), every policy's violations before/after it
    and its recovery time."""
    orc = results.get("oracle", (None,))[0]
    times = sorted({e.at_s for e in sc.events})
    out = []
    for i, at in enumerate(times):
        until = times[i + 1] if i + 1 < len(times) else sc.duration_s
        what = "; ".join(e.summary() for e in sc.events if e.at_s == at)
        out.append({"at_s": at, "event": what, "policies": {
            name: M.event_impact(res, at, 2 * sc.retune_interval_s, sc.retune_interval_s, until, orc)
            for name, (res, _) in results.items()}})
    return out


def event_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per (event, policy): violations before -> after, recovery time."""
    rows = []
    for ev in report["events"]:
        for name, x in ev["policies"].items():
            rec = "never" if x["recovery_s"] is None else f'{x["recovery_s"]:g}'
            rows.append([f'{ev["at_s"]:g} s {ev["event"]}', name, f'{x["before"]:.3f}', f'{x["after"]:.3f}', rec])
    return ["event", "policy", "viol before", "viol after", "recovery s"], rows


EXPLORATION = ("exploration_energy_share", "shadows_per_job", "probes_per_job")


def exploration_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per policy: exploration energy share, shadows per streaming job, probe shards per batch job."""
    rows = [[name, *("–" if m.get(k) is None else f"{m[k]:.3g}" for k in EXPLORATION)]
            for name, m in report["policies"].items()]
    return ["policy", "exploration energy share", "shadows / stream", "probes / batch job"], rows


def write_json(report: dict[str, Any], path: Path) -> Path:
    """Atomic write (temp file + rename)."""
    return atomic_write_json(Path(path), report)


SHORT = {
    "slo_violation_rate": "SLO viol",
    "p50_ms": "p50 ms",
    "p99_ms": "p99 ms",
    "throughput_rps": "goodput/s",
    "gpu_util": "util",
    "energy_j_per_req": "J/req",
    "accuracy_loss_pts": "acc loss",
    "queueing_delay_s": "queue s",
    "jct_s": "JCT s",
    "fragmentation": "frag",
}


def table_rows(report: dict[str, Any], short: bool = False) -> tuple[list[str], list[list[str]]]:
    cols = ["policy", *(SHORT[k] if short else k for k in HEADLINE)]
    rows = []
    for name, m in report["policies"].items():
        rows.append([name] + ["–" if m.get(k) is None else f"{m[k]:.4g}" for k in HEADLINE])
    return cols, rows


# What each column of the printed table means (`oltunes simulate` prints these under the table).
COLUMN_NOTES = {
    "SLO viol": "share of requests answered after their SLO or dropped (lower is better)",
    "p50 ms / p99 ms": "request latency percentiles of served requests, queueing included",
    "goodput/s": "requests answered within their SLO, per second",
    "util": "mean busy share of the devices in use",
    "J/req": "energy per request, idle power of held devices included",
    "acc loss": "accuracy points below the family's best variant, request-weighted",
    "queue s": "mean time a request waits before its batch starts",
    "JCT s": "mean batch-job completion time (submit to last item)",
    "frag": "fragmentation: mean share of free device slots stranded on partly used devices, free capacity no "
            "whole-device job can use (lower is better)",
}


def column_notes() -> list[str]:
    return [f"{k}: {v}" for k, v in COLUMN_NOTES.items()]


def warmup_note(learning: dict[str, Any], retune_interval_s: float) -> str:
    """The warm-up result in words: when it ended, or what "never reached" means."""
    rule = (f"the learner's SLO attainment in every {retune_interval_s:g} s window from then on stays within 95 % of "
            "the oracle's")
    if learning["warmup_s"] is None:
        return (f"warm-up never reached: no point after which {rule}; the attainment below is over the second half "
                "of the run")
    return f"warm-up {learning['warmup_s']:g} s: from then on {rule}"


def _legend_outside(ax: Any) -> None:
    """The legend beside the axes, never over the data."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def figures(results: dict[str, tuple[RunResult, dict[str, float]]], title: str = "") -> dict[str, Any]:
    """The three plots as matplotlib figures, by file name (labels set, not saved): every legend beside its axes,
    and energy vs accuracy with one marker per policy named in the legend (no labels over the points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs: dict[str, Any] = {}
    reqs = {name: M.request_arrays(res) for name, (res, _) in results.items()}  # shared by the first two plots
    markers = "osD^vP*Xh<>"

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name in results:
        lat = reqs[name]["latency"]
        lat = np.sort(lat[~np.isnan(lat)]) * 1000.0
        if len(lat):
            ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=name)
    ax.set_xscale("log")
    ax.set(xlabel="request latency (ms, served requests)", ylabel="CDF", title=f"{title} latency CDF")
    _legend_outside(ax)
    figs["latency_cdf.png"] = fig

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, (res, _) in results.items():
        t, v = M.violations_over_time(res, reqs[name])
        ax.plot(t, v, label=name)
    ax.set(xlabel="time (s)", ylabel="SLO violation rate (by arrival)", title=f"{title} SLO violations over time")
    _legend_outside(ax)
    figs["slo_violations_over_time.png"] = fig

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, (name, (_, m)) in enumerate(results.items()):
        ax.scatter(m["accuracy_loss_pts"], m["energy_j_per_req"], label=name, marker=markers[i % len(markers)],
                   s=48, alpha=0.8)  # fmt: skip
    ax.set(xlabel="accuracy loss vs the family's best variant (points)", ylabel="energy per request (J)",
           title=f"{title} energy vs accuracy")
    ax.margins(0.15)
    _legend_outside(ax)
    figs["energy_vs_accuracy.png"] = fig
    return figs


def write_plots(results: dict[str, tuple[RunResult, dict[str, float]]], out_dir: Path, title: str = "") -> list[Path]:
    """latency_cdf.png, slo_violations_over_time.png, energy_vs_accuracy.png."""
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figures(results, title).items():
        try:
            paths.append(atomic_write(out_dir / name, lambda tmp, fig=fig: fig.savefig(tmp, format="png", dpi=110,
                                                                                       bbox_inches="tight")))
        finally:
            plt.close(fig)
    return paths


# ---------------------------------------------------------------------- MLflow
# One parent run per scenario run, one nested child run per policy, in experiment ``oltunes-simulation``
# (``oltunes.tracking.conventions.EXPERIMENTS["simulation"]``); params and metrics are named like the report JSON so
# the MLflow UI compares the policies side by side. ``oltunes.tracking.Tracker`` logs flat runs only, hence these few
# plain ``mlflow`` calls.

EXPERIMENT = EXPERIMENTS["simulation"]


def log_report(report: dict[str, Any], plots: list[Path] = (), settings: Settings | None = None) -> str:
    """Returns the parent run id."""
    apply_offline_env()
    s = settings or get_settings()
    try:
        import mlflow
    except ImportError as e:  # pragma: no cover - mlflow is a core dependency
        raise MissingDependency("mlflow is not installed: pip install mlflow") from e
    now = int(time.time() * 1000)
    s.home.mkdir(parents=True, exist_ok=True)
    open_client(s.mlflow_uri)  # creates a fresh store under a lock (concurrent first use races in alembic)
    with mlflow_errors(s.mlflow_uri):
        return _log(mlflow, report, plots, s, now)


def _log(mlflow: Any, report: dict[str, Any], plots: list[Path], s: Settings, now: int) -> str:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(s.mlflow_uri)
    if mlflow.get_experiment_by_name(EXPERIMENT) is None:
        mlflow.create_experiment(EXPERIMENT, artifact_location=s.mlflow_artifacts.as_uri(), tags=EXPERIMENT_TAGS)
    mlflow.set_experiment(EXPERIMENT)
    meta = report.get("meta", {})
    with mlflow.start_run(run_name=f"simulate-{report['scenario']}") as parent:
        mlflow.set_tags({"simulated": "true", "scenario": report["scenario"]})
        mlflow.log_params({k: v for k, v in meta.items() if k != "definitions"} | {"scenario": report["scenario"]})
        for p in plots:
            mlflow.log_artifact(str(p))
        for name, m in report["policies"].items():
            with mlflow.start_run(run_name=name, nested=True) as child:
                mlflow.set_tags({"policy": name, "simulated": "true", "scenario": report["scenario"]})
                mlflow.log_params({"policy": name, "scenario": report["scenario"]})
                mlflow.log_metrics({k: float(v) for k, v in m.items() if isinstance(v, (int, float)) and v is not None})
                ts = report.get("timeseries", {}).get(name)
                if ts:  # the violation series as one metric with steps (one batch call, not one per point)
                    series = [
                        Metric("slo_violation_rate_over_time", float(v), now, step)
                        for step, v in enumerate(ts["slo_violation_rate"])
                    ]
                    MlflowClient().log_batch(child.info.run_id, metrics=series)
        return parent.info.run_id
