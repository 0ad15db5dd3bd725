"""Scheduling metrics of a played sequence, and the per-trace comparison of queue policies (report + plots)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from oltunes.rltune.env import BatchQueueEnv, Outcome
from oltunes.rltune.mapper import Mapper
from oltunes.rltune.policies import MIN_RUNTIME_S, QueuePolicy, queue_policy
from oltunes.rltune.traces import Trace

METRICS = ("avg_jct_s", "p95_jct_s", "avg_queue_delay_s", "bounded_slowdown", "gpu_util")
# what a training reward may optimise: metric name and its sign (+1: lower is better)
OBJECTIVES = {"bounded_slowdown": 1.0, "wait": 1.0, "turnaround": 1.0, "utilisation": -1.0}
_OBJECTIVE_METRIC = {"bounded_slowdown": "bounded_slowdown", "wait": "avg_queue_delay_s",
                     "turnaround": "avg_jct_s", "utilisation": "gpu_util"}


def metrics(o: Outcome) -> dict[str, float]:
    s = o.seq
    jct = o.finish - s.submit
    wait = o.start - s.submit
    span = float(np.max(o.finish) - np.min(s.submit))
    return {
        "avg_jct_s": float(jct.mean()),
        "p95_jct_s": float(np.percentile(jct, 95)),
        "avg_queue_delay_s": float(wait.mean()),
        "bounded_slowdown": float(np.maximum(jct / np.maximum(s.duration, MIN_RUNTIME_S), 1.0).mean()),
        "gpu_util": float((s.gpus * s.duration).sum() / (s.shape.capacity * span)) if span > 0 else 0.0,
    }


def wait_weights(seq: Trace, name: str) -> np.ndarray | None:
    """Per-job weight of waiting time whose sum over the run is the objective up to a constant (None: utilisation,
    which has no such form). Bounded slowdown: wait / max(run time, 10 s); wait and turnaround: wait."""
    if name == "bounded_slowdown":
        return 1.0 / np.maximum(seq.duration, MIN_RUNTIME_S)
    if name in ("wait", "turnaround"):
        return np.ones(len(seq))
    return None


def objective(m: dict[str, float], name: str) -> float:
    """The training objective as a cost (lower is better)."""
    return OBJECTIVES[name] * m[_OBJECTIVE_METRIC[name]]


def play(seq: Trace, policy: QueuePolicy, mapper: Mapper) -> Outcome:
    return BatchQueueEnv(seq, mapper).run(policy)


def compare(seqs: list[Trace], policies: dict[str, Callable[[], QueuePolicy]],
            mapper: Callable[[], Mapper], progress: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """Every policy on every sequence (a fresh mapper per policy): mean metrics, MILP solve p50/p99, fallbacks.
    `progress` gets a line per policy played (its time and how many sequences)."""
    out: dict[str, dict[str, Any]] = {}
    for k, (name, make) in enumerate(policies.items(), 1):
        m = mapper()
        t0 = time.perf_counter()
        per_seq = [metrics(play(seq, make(), m)) for seq in seqs]
        if progress:
            progress(f"policy {k}/{len(policies)} {name}: {len(seqs)} sequences in {time.perf_counter() - t0:.1f} s")
        solve_ms = np.array(m.stats.solve_s) * 1000.0
        out[name] = {k: float(np.mean([x[k] for x in per_seq])) for k in METRICS}
        out[name]["per_sequence"] = {k: [x[k] for x in per_seq] for k in METRICS}
        out[name]["mapper_p50_ms"] = float(np.percentile(solve_ms, 50)) if len(solve_ms) else 0.0
        out[name]["mapper_p99_ms"] = float(np.percentile(solve_ms, 99)) if len(solve_ms) else 0.0
        out[name]["mapper_fallbacks"] = int(m.stats.fallbacks)
        out[name]["mapper_solves"] = len(solve_ms)
    return out


def table(report: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    cols = ["policy", "avg JCT s", "p95 JCT s", "avg queue s", "bounded sld", "GPU util", "MILP p50 ms",
            "MILP p99 ms", "fallbacks"]
    rows = [[name, f"{r['avg_jct_s']:.0f}", f"{r['p95_jct_s']:.0f}", f"{r['avg_queue_delay_s']:.0f}",
             f"{r['bounded_slowdown']:.2f}", f"{r['gpu_util']:.3f}", f"{r['mapper_p50_ms']:.1f}",
             f"{r['mapper_p99_ms']:.1f}", str(r["mapper_fallbacks"])] for name, r in report.items()]
    return cols, rows


def bar_figures(reports: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """One bar chart per metric (file name -> figure): traces side by side, one bar per policy, on a linear axis
    (a log axis made the best bar look like nothing) with each bar's value written on it, legend beside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    for metric in ("avg_jct_s", "avg_queue_delay_s", "bounded_slowdown", "gpu_util"):
        fig, ax = plt.subplots(figsize=(8, 4))
        traces = list(reports)
        policies = list(next(iter(reports.values())))
        width = 0.8 / max(len(policies), 1)
        for i, p in enumerate(policies):
            bars = ax.bar(np.arange(len(traces)) + i * width, [reports[t][p][metric] for t in traces], width, label=p)
            ax.bar_label(bars, fmt="%.3g", fontsize=6, padding=1)
        ax.set_xticks(np.arange(len(traces)) + 0.4 - width / 2, traces)
        ax.set_ylabel(metric)
        ax.set_title(f"batch queue: {metric} per policy")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)  # room for the value labels
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
        figs[f"rltune_{metric}.png"] = fig
    return figs


def write_plots(reports: dict[str, dict[str, dict[str, Any]]], out_dir: Path) -> list[Path]:
    """`bar_figures`, saved under `out_dir`."""
    import matplotlib.pyplot as plt

    from oltunes.atomic import atomic_write

    written = []
    for name, fig in bar_figures(reports).items():
        try:
            written.append(atomic_write(Path(out_dir) / name, lambda tmp, fig=fig: fig.savefig(
                tmp, format="png", bbox_inches="tight")))
        finally:
            plt.close(fig)
    return written


BASELINES = ("fcfs", "sjf", "f1", "slurm", "gavel-like", "random")


def policy_factories(names: list[str], weights: Path | None = None, seed: int = 0
                     ) -> dict[str, Callable[[], QueuePolicy]]:
    """Name -> fresh policy. ``rltune`` needs `weights`; ``random`` is seeded."""
    for n in names:  # fail early on a bad name or weights file, before any sequence runs
        queue_policy(n, weights, seed)
    return {n: (lambda n=n: queue_policy(n, weights, seed)) for n in names}


def evaluate_trace(trace: Trace, names: list[str], *, weights: Path | None = None, n: int = 10, length: int = 256,
                   load: float | None = None, mapper: str = "milp", time_limit_s: float = 0.1,
                   seed: int = 0, progress: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """The held-out comparison of one trace: `n` test sequences, every policy, one mapper kind."""
    from oltunes.rltune.traces import DEFAULT_LOAD, sequences

    seqs = sequences(trace, split="test", n=n, length=length, load=DEFAULT_LOAD if load is None else load)
    kw = {"time_limit_s": time_limit_s} if mapper == "milp" else {}
    Mapper.lookup(mapper)
    return compare(seqs, policy_factories(names, weights, seed), lambda: Mapper.make(mapper, **kw), progress)
