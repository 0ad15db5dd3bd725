"""What the batch guards cost: the flow's one-time dataset check vs the worker's run, and how fast orphans die.

Check: `check_input` (read + validate the dataset, load every model of the family for its input) against the bare
worker CLI on the same dataset with one model, alternated over rounds; ratio check / worker per round, median.

Orphans: a parent starts a child one of three ways (`spawn`: kernel parent-death signal; `watch`: the child's
own parent watch only; `keeper`: somebody else's child handed to the keeper, as Prefect's ephemeral server is),
is SIGKILLed, and the time until the child is gone is taken; median over rounds.

    .venv/bin/python -m benchmarks.batch_guards --json benchmarks/results/batch_guards.json
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import alternate, median, parser, print_table, write_json



def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def orphan_death_s(how: str) -> float:
    from tests.launchers.test_lifeline import PARENT as script

    parent = subprocess.Popen([sys.executable, "-c", script, how], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(0.5)
    t0 = time.perf_counter()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    while not _gone(child):
        if time.perf_counter() - t0 > 30:
            os.kill(child, signal.SIGKILL)
            return float("inf")
        time.sleep(0.005)
    return time.perf_counter() - t0


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    from oltunes.launchers.batch_job import check_input
    from oltunes.zoo import list_variants, make_dataset

    variants = list_variants(family="cnn")
    if not variants:
        sys.exit("no cnn variants: build the zoo first (`oltunes zoo build`)")
    work = Path(tempfile.mkdtemp(prefix="batch-guards-"))
    data = make_dataset("cnn", args.items, work / "in.parquet", seed=0)
    model = next(v for v in variants if v.name == "cnn-s-fp32").path
    n = iter(range(10_000))

    def check() -> float:
        t0 = time.perf_counter()
        check_input(data, variants)
        return time.perf_counter() - t0

    def worker() -> float:
        argv = [sys.executable, "-m", "oltunes.worker", "batch", "--model", model, "--input", str(data),
                "--output", str(work / f"out-{next(n)}"), "--threads", "1", "--batch-size", "64"]  # fmt: skip
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0

    times = alternate({"check": check, "worker": worker}, args.rounds)
    ratios = [c / w for c, w in zip(times["check"], times["worker"], strict=True)]
    deaths = {how: [orphan_death_s(how) for _ in range(args.rounds)] for how in ("spawn", "watch", "keeper")}

    rows = [
        ("dataset check (s)", median(times["check"]), f"{len(variants)} models, {args.items} items"),
        ("bare worker, cnn-s-fp32 (s)", median(times["worker"]), "1 thread, batch 64"),
        ("check / worker", median(ratios), "median of per-round ratios"),
        *((f"orphan gone after SIGKILL: {how} (s)", median(v), f"max {max(v):.3f}") for how, v in deaths.items()),
    ]
    print_table(f"Batch guards ({args.rounds} rounds, median)", ["what", "value", "note"], rows)
    write_json(args.json, {
        "items": args.items, "rounds": args.rounds, "models_checked": len(variants),
        "check_s": times["check"], "worker_s": times["worker"], "check_over_worker": ratios,
        "check_over_worker_median": median(ratios), "orphan_death_s": deaths,
    })  # fmt: skip


if __name__ == "__main__":
    main()
