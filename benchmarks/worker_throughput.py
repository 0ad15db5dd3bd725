"""Worker batch mode vs a bare ONNX Runtime loop: same model, batch size, threads; alternating reps, medians.

The worker figure is end to end (read the input file, load the model, infer, write parquet shards, write the
measurement record); the bare loop is only ``session.run`` over an in-memory array with a session created
beforehand, i.e. the ceiling. ``ratio`` is the median over repetitions of worker/raw measured back to back
(each pair sees the same machine load; on a shared box that is far steadier than a ratio of two medians,
which is reported too as ``ratio_of_medians``). The issue asks for ratio >= 0.95 on the largest variant at
batch 64.

    .venv/bin/python -m benchmarks.worker_throughput --json benchmarks/results/worker_throughput.json
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import alternate, median, parser, print_table, write_json
from oltunes.worker import ModelSession, read_dataset, run_batch
from oltunes.zoo import build_zoo, list_variants, make_dataset


def largest(zoo_dir: Path | None) -> str:
    """The most compute-heavy shipped variant: most parameters, full precision."""
    variants = [v for v in list_variants(zoo_dir) if v.precision == "fp32"]
    return max(variants, key=lambda v: (v.params, v.bytes)).name


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--variant", default=None, help="zoo variant (default: the largest)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--items", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--zoo-dir", type=Path, default=None)
    a = p.parse_args()

    build_zoo(a.zoo_dir)
    name = a.variant or largest(a.zoo_dir)
    model = Path(next(v.path for v in list_variants(a.zoo_dir) if v.name == name))
    work = Path(tempfile.mkdtemp(prefix="oltunes-bench-"))
    try:
        data_path = make_dataset(None, a.items, work / "in.npz")
        x = read_dataset(data_path).x
        session = ModelSession(model, threads=a.threads, device="auto")
        bs = a.batch_size
        counter = iter(range(10**9))
        compute_only: list[float] = []
        overhead: list[float] = []

        def worker() -> float:
            out = work / f"out{next(counter)}"
            rep = run_batch(model, data_path, out, batch_size=bs, threads=a.threads, report=out / "measurement.json")
            compute_only.append(rep.items / rep.compute_s)
            overhead.append(1 - rep.compute_s / rep.wall_s)  # same run, same load: robust to machine noise
            shutil.rmtree(out)
            return rep.throughput_items_per_s

        def raw() -> float:
            feed = session.prepare(x)
            t0 = time.perf_counter()
            for i in range(0, len(feed), bs):
                session.session.run(None, {session.input_name: feed[i : i + bs]})
            return len(feed) / (time.perf_counter() - t0)

        worker(), raw()  # warm-up: page cache, allocator, CPU frequency
        runs = alternate({"worker": worker, "raw": raw}, a.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    os.environ.setdefault("COLUMNS", "150")  # rich would squeeze the table into 80 columns
    w, r = median(runs["worker"]), median(runs["raw"])
    paired = [wi / ri for wi, ri in zip(runs["worker"], runs["raw"], strict=True)]
    ratio = median(paired)
    result = {
        "ratio": ratio,
        "worker_items_per_s": w,
        "raw_items_per_s": r,
        "ratio_of_medians": w / r,
        "worker_compute_only_items_per_s": median(compute_only[1:]),
        "worker_overhead_fraction": median(overhead[1:]),
        "variant": name,
        "batch_size": bs,
        "threads": a.threads,
        "items": a.items,
        "reps": a.reps,
        "provider": session.provider,
        "samples": runs,
    }
    print_table(
        f"worker vs bare ONNX Runtime: {name}, batch {bs}, {a.threads} thread(s), {a.items} items, median of {a.reps}",
        ["worker items/s", "raw items/s", "ratio (median of pairs)", "ratio of medians", "worker overhead share"],
        [[w, r, ratio, w / r, median(overhead[1:])]],
    )
    write_json(a.json, result)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
