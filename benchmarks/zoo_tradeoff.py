"""Accuracy vs latency of every zoo variant (the frontier the tuner exploits), printed and plotted (PNG).

Per variant: accuracy (measured in ONNX Runtime at build time), per-call latency p50/p99 at batch 1 and
batch 32, and throughput at batch 32. Variants are measured in alternating rounds so machine noise hits
all of them alike.

    .venv/bin/python -m benchmarks.zoo_tradeoff --json benchmarks/results/zoo_tradeoff.json [--plot out.png]
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from benchmarks.common import alternate, parser, print_table, write_json
from oltunes.config import get_settings
from oltunes.worker import ModelSession
from oltunes.zoo import build_zoo, digits_split, list_variants

BATCHES = (1, 32)


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points not beaten by another with lower latency and higher-or-equal accuracy."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    best, keep = -1.0, []
    for i in order:
        if points[i][1] > best:
            keep.append(i)
            best = points[i][1]
    return keep


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(BATCHES), figsize=(12, 5), sharey=True)
    markers = {"fp32": "o", "fp16": "s", "int8": "^"}
    colors = {}
    for ax, b in zip(axes, BATCHES, strict=True):
        for r in rows:
            c = colors.setdefault(r["family"], f"C{len(colors)}")
            ax.scatter(r[f"b{b}_p50_ms"], r["accuracy"], marker=markers.get(r["precision"], "x"), color=c, s=60)
            ax.annotate(
                f"{r['size']}-{r['precision']}",
                (r[f"b{b}_p50_ms"], r["accuracy"]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
        front = [rows[i] for i in pareto([(r[f"b{b}_p50_ms"], r["accuracy"]) for r in rows])]
        ax.step(
            [r[f"b{b}_p50_ms"] for r in front],
            [r["accuracy"] for r in front],
            where="post",
            color="grey",
            ls="--",
            lw=1,
        )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # log minor labels collide
        ax.set_xlabel(f"p50 latency per call at batch {b} (ms, log)")
        ax.set_title(f"batch {b}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy (held-out digits, ONNX Runtime)")
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=f) for f, c in colors.items()]
    handles += [plt.Line2D([], [], color="k", marker=m, ls="", label=p) for p, m in markers.items()]
    axes[-1].legend(handles=handles, loc="lower right")
    fig.suptitle("OLTunes zoo: accuracy vs latency (dashed: Pareto frontier)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--plot", type=Path, default=None, help="PNG path (default: beside --json, else $OLTUNES_HOME/bench/)"
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget-ms", type=float, default=40.0, help="time per variant and batch size in each round")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--zoo-dir", type=Path, default=None)
    a = p.parse_args()

    build_zoo(a.zoo_dir)
    variants = list_variants(a.zoo_dir)
    x = digits_split(get_settings().seed).test.x
    sessions = {v.name: ModelSession(Path(v.path), threads=a.threads, device="auto") for v in variants}
    samples: dict[tuple[str, int], list[float]] = {(v.name, b): [] for v in variants for b in BATCHES}

    def measure(name: str, b: int):
        s, feed = sessions[name], sessions[name].prepare(x[:b])

        def fn() -> float:
            end = time.perf_counter() + a.budget_ms / 1e3
            while True:
                t = time.perf_counter()
                s.session.run(None, {s.input_name: feed})
                samples[(name, b)].append((time.perf_counter() - t) * 1e3)
                if t > end:
                    return 0.0

        return fn

    for key in samples:  # warm-up once each
        measure(*key)()
        samples[key].clear()
    alternate({f"{n}/{b}": measure(n, b) for n, b in samples}, a.rounds)

    rows = []
    for v in variants:
        row = {
            "variant": v.name,
            "family": v.family,
            "size": v.size,
            "precision": v.precision,
            "accuracy": v.accuracy,
            "params": v.params,
            "bytes": v.bytes,
        }
        for b in BATCHES:
            lat = np.asarray(samples[(v.name, b)])
            row[f"b{b}_p50_ms"] = float(np.percentile(lat, 50))
            row[f"b{b}_p99_ms"] = float(np.percentile(lat, 99))
            row[f"b{b}_calls"] = int(lat.size)
        row["throughput_b32_items_per_s"] = 32 / (float(np.mean(samples[(v.name, 32)])) / 1e3)
        rows.append(row)

    os.environ.setdefault("COLUMNS", "150")  # rich truncates an 80-column table into unreadable cells
    front = {rows[i]["variant"] for i in pareto([(r["b1_p50_ms"], r["accuracy"]) for r in rows])}
    print_table(
        f"zoo trade-off ({a.threads} thread(s), {a.rounds} alternating rounds; * = on the batch-1 frontier)",
        ["variant", "accuracy", "b1 p50 ms", "b1 p99 ms", "b32 p50 ms", "b32 p99 ms", "items/s @32", "params", "bytes"],
        [
            [
                ("*" if r["variant"] in front else "") + r["variant"],
                r["accuracy"],
                r["b1_p50_ms"],
                r["b1_p99_ms"],
                r["b32_p50_ms"],
                r["b32_p99_ms"],
                r["throughput_b32_items_per_s"],
                r["params"],
                r["bytes"],
            ]
            for r in rows
        ],
    )
    plot_path = a.plot or (a.json.with_suffix(".png") if a.json else get_settings().home / "bench" / "zoo_tradeoff.png")
    plot(rows, plot_path)
    print(f"plot: {plot_path}")
    write_json(
        a.json,
        {
            "variants": rows,
            "frontier_b1": sorted(front),
            "threads": a.threads,
            "rounds": a.rounds,
            "plot": str(plot_path),
        },
    )


if __name__ == "__main__":
    main()
