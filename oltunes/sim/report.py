"""The evaluation report: JSON (shape of issue 4), a printed table, and plots (latency CDF, SLO violations over
time, energy vs accuracy).

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
from pathlib import Path
from typing import Any

import numpy as np

from oltunes.atomic import atomic_write, atomic_write_json
from oltunes.sim import metrics as M
from oltunes.sim.result import RunResult
from oltunes.sim.scenario import Scenario

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


def _finish(plt, fig, ax, path: Path, xlabel: str, ylabel: str, title: str, legend: bool = True) -> Path:
    """Label, save atomically and close one plot."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=8)
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
    finally:
        plt.close(fig)


def write_plots(results: dict[str, tuple[RunResult, dict[str, float]]], out_dir: Path, title: str = "") -> list[Path]:
    """latency_cdf.png, slo_violations_over_time.png, energy_vs_accuracy.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    reqs = {name: M.request_arrays(res) for name, (res, _) in results.items()}  # shared by the first two plots

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name in results:
        lat = reqs[name]["latency"]
        lat = np.sort(lat[~np.isnan(lat)]) * 1000.0
        if len(lat):
            ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=name)
    ax.set_xscale("log")
    paths.append(_finish(plt, fig, ax, out_dir / "latency_cdf.png", "request latency (ms, served requests)", "CDF",
                         f"{title} latency CDF"))

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, (res, _) in results.items():
        t, v = M.violations_over_time(res, reqs[name])
        ax.plot(t, v, label=name)
    paths.append(_finish(plt, fig, ax, out_dir / "slo_violations_over_time.png", "time (s)",
                         "SLO violation rate (by arrival)", f"{title} SLO violations over time"))

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, (_, m) in results.items():
        ax.scatter(m["accuracy_loss_pts"], m["energy_j_per_req"], label=name)
        ax.annotate(name, (m["accuracy_loss_pts"], m["energy_j_per_req"]), fontsize=7)
    paths.append(_finish(plt, fig, ax, out_dir / "energy_vs_accuracy.png",
                         "accuracy loss vs the family's best variant (points)", "energy per request (J)",
                         f"{title} energy vs accuracy", legend=False))
    return paths
