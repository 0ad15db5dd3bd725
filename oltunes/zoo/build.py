"""Build, list and extend the model zoo.

`build_zoo` trains every family × size once (seeded), exports fp32 ONNX, derives fp16 and int8 from it and
measures every file's accuracy in ONNX Runtime on the held-out split. A variant whose file and manifest
entry match its configuration hash is skipped, so a second build costs only file hashing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime
import torch

from oltunes.atomic import sha256_file
from oltunes.config import get_settings
from oltunes.errors import ConfigError, DataError, ModelError
from oltunes.types import Variant
from oltunes.worker.dataset import read_dataset, write_dataset
from oltunes.worker.session import ModelSession
from oltunes.zoo.data import CALIBRATION_ITEMS, TEST_FRACTION, Split, digits_split
from oltunes.zoo.evaluate import measure_accuracy
from oltunes.zoo.export import OPSET, Converter, Int8, export_fp32
from oltunes.zoo.families import Family
from oltunes.zoo.flops import onnx_gflops
from oltunes.zoo.manifest import (
    ZooEntry,
    config_hash,
    load_entries,
    locked,
    model_fields,
    save_entries,
    zoo_dir_or_default,
)
from oltunes.zoo.spec import PRECISIONS, SIZES
from oltunes.zoo.train import train

EVAL_SET = "eval.npz"
# Bump when the build recipe changes in a way the per-variant config does not capture.
RECIPE = 1
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding `oltunes/`, for child processes

Progress = Callable[[str], None]


def _variant_config(family: Family, size: str, precision: str, seed: int) -> dict:
    cfg = {
        "recipe": RECIPE,
        "seed": seed,
        "split": {"test_fraction": TEST_FRACTION, "calibration_items": CALIBRATION_ITEMS},
        "opset": OPSET,
        "precision": precision,
        "torch": torch.__version__,
        **family.config(size),
    }
    if precision == "int8":
        cfg["int8_ops"] = Int8.op_types
    if precision != "fp32":
        cfg["onnxruntime"] = onnxruntime.__version__  # the fp16 converter and the quantiser live in onnxruntime
    return cfg


def _cached(entry: ZooEntry | None, chash: str) -> bool:
    if entry is None or entry.config_hash != chash or not entry.path or not Path(entry.path).is_file():
        return False
    return sha256_file(Path(entry.path)) == entry.sha256


def _with_gflops(entry: ZooEntry) -> ZooEntry:
    """A cached entry, with its compute counted if its manifest predates ``gflops`` (counting takes milliseconds)."""
    return entry if entry.gflops or not entry.path else entry.model_copy(update={"gflops": onnx_gflops(entry.path)})


def _entry(
    family: str, size: str, precision: str, path: Path, params: int, chash: str, eval_path: Path, split: Split
) -> ZooEntry:
    session = ModelSession(path, threads=1, device="cpu")
    return ZooEntry(
        family=family,
        name=f"{family}-{size}-{precision}",
        size=size,
        precision=precision,
        accuracy=measure_accuracy(session, split.test),
        params=params,
        source="zoo",
        config_hash=chash,
        eval_set=str(eval_path),
        eval_items=len(split.test),
        **model_fields(path, session),
    )


def _train_export(family: str, size: str, seed: int, path: Path) -> tuple[int, float]:
    """Train one family/size and export its fp32 ONNX file; returns (parameter count, seconds).

    Each run is single-threaded and seeded, so running several at once gives the same files as running them
    one by one.
    """
    t0 = time.perf_counter()
    fam = Family.make(family)
    train_set = digits_split(seed).train
    module = train(lambda: fam.module(size), train_set, fam.epochs[size], fam.lr, seed)
    export_fp32(module, train_set.x, Path(path))
    return sum(p.numel() for p in module.parameters()), time.perf_counter() - t0


# Child entry point. A fresh interpreter via `-c` rather than a multiprocessing pool: spawn re-imports the
# caller's __main__ (a user script without a main guard would run again in every child), and fork after
# torch/onnxruntime have started thread pools can deadlock.
_CHILD = (
    "import json, sys; from oltunes.zoo.build import _train_export\n"
    "for f, s, seed, path in json.loads(sys.argv[1]):\n"
    "    print(json.dumps([f, s, *_train_export(f, s, seed, path)]), flush=True)"
)


def _train_in_child(jobs: list[tuple[str, str, int, Path]]) -> dict[tuple[str, str], tuple[int, float]]:
    """Run several jobs in one child process (one interpreter start and exporter warm-up per child)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))}
    arg = json.dumps([[f, s, seed, str(path)] for f, s, seed, path in jobs])
    proc = subprocess.run([sys.executable, "-c", _CHILD, arg], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        names = ", ".join(f"{f}-{s}" for f, s, *_ in jobs)
        raise ModelError(f"training {names} failed in a worker process:\n{proc.stderr[-2000:]}")
    done = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
    return {(f, s): (int(n), float(sec)) for f, s, n, sec in done}


def _cost(job: tuple[str, str, int, Path]) -> float:
    """Rough training cost (epochs x parameters) to balance the children; exactness does not matter."""
    fam = Family.make(job[0])
    return fam.epochs[job[1]] * sum(p.numel() for p in fam.module(job[1]).parameters())


def _run_training(jobs: list[tuple[str, str, int, Path]]) -> list[tuple[int, float]]:
    """Run `_train_export` for every job: split over child processes when there are several jobs and cores."""
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers <= 1:
        return [_train_export(*job) for job in jobs]
    groups: list[list[tuple[str, str, int, Path]]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    costs = {job[:2]: _cost(job) for job in jobs}  # builds a torch module: once per job
    for job in sorted(jobs, key=lambda j: costs[j[:2]], reverse=True):  # longest first onto the least loaded child
        i = load.index(min(load))
        groups[i].append(job)
        load[i] += costs[job[:2]]
    results: dict[tuple[str, str], tuple[int, float]] = {}
    with ThreadPoolExecutor(workers) as pool:
        for part in pool.map(_train_in_child, groups):
            results.update(part)
    return [results[(f, s)] for f, s, *_ in jobs]


def _same_eval_set(path: Path, split: Split) -> bool:
    try:
        return path.is_file() and np.array_equal(read_dataset(path).ids, split.test.ids)
    except DataError:
        return False  # unreadable: rewrite it


def build_zoo(
    zoo_dir: Path | str | None = None,
    force: bool = False,
    progress: Progress | None = None,
    families: Sequence[str] | None = None,
    sizes: Sequence[str] | None = None,
) -> list[Variant]:
    """Build (or reuse) every shipped variant and return them all, user-registered ones included.

    Parameters
    ----------
    zoo_dir
        Where models and ``manifest.json`` go; default ``get_settings().zoo_dir``.
    force
        Rebuild every shipped variant even when its cached file matches.
    progress
        Called with one line per variant built or reused.
    families, sizes
        Build only these (default: all); entries of the others already in the manifest are kept.
    """
    zoo_dir = zoo_dir_or_default(zoo_dir)
    say = progress or (lambda _msg: None)
    seed = get_settings().seed
    families = list(families) if families is not None else Family.known()
    sizes = list(sizes) if sizes is not None else list(SIZES)
    for f in families:
        Family.lookup(f)  # unknown names fail here, listing the known ones
    if bad := [s for s in sizes if s not in SIZES]:
        raise ConfigError(f"sizes: unknown {', '.join(bad)}; known: {', '.join(SIZES)}")
    with locked(zoo_dir):
        old = {e.name: e for e in load_entries(zoo_dir, tolerate_corrupt=force)}
        split = digits_split(seed)
        eval_path = zoo_dir / EVAL_SET
        if not _same_eval_set(eval_path, split):
            write_dataset(eval_path, split.test)
        models = zoo_dir / "models"
        # Keep what this call does not rebuild: user variants and shipped ones outside the filter.
        entries: dict[str, ZooEntry] = {
            n: e for n, e in old.items() if e.source == "user" or e.family not in families or e.size not in sizes
        }
        plan: list[tuple[str, str, dict[str, str], list[str]]] = []  # family, size, hash per precision, todo
        for fam_name in families:
            family = Family.make(fam_name)
            for size in sizes:
                hashes = {p: config_hash(_variant_config(family, size, p, seed)) for p in PRECISIONS}
                todo = [p for p in PRECISIONS if force or not _cached(old.get(f"{fam_name}-{size}-{p}"), hashes[p])]
                for p in PRECISIONS:
                    if p not in todo:
                        name = f"{fam_name}-{size}-{p}"
                        entries[name] = _with_gflops(old[name])
                        say(f"cached  {name}  accuracy={old[name].accuracy:.4f}")
                if todo:
                    plan.append((fam_name, size, hashes, todo))
        # Train what needs training (the slow part) in parallel, then derive and measure every variant.
        jobs = [(f, s, seed, models / f"{f}-{s}-fp32.onnx") for f, s, _h, todo in plan if "fp32" in todo]
        params = {(f, s): old[f"{f}-{s}-fp32"].params for f, s, _h, _t in plan if f"{f}-{s}-fp32" in old}
        if jobs:
            say(f"training {len(jobs)} model(s) ({', '.join(f'{f}-{s}' for f, s, *_ in jobs)}) on "
                f"{min(len(jobs), os.cpu_count() or 1)} core(s): minutes on a small machine, once (then cached)")
        for (f, s, *_), (n_params, seconds) in zip(jobs, _run_training(jobs), strict=True):
            params[(f, s)] = n_params
            say(f"trained {f}-{s} ({n_params} params) in {seconds:.1f}s")
        for fam_name, size, hashes, todo in plan:
            fp32 = models / f"{fam_name}-{size}-fp32.onnx"
            for p in todo:
                out = models / f"{fam_name}-{size}-{p}.onnx"
                Converter.make(p).convert(fp32, out, split.calibration())
                entries[out.stem] = e = _entry(
                    fam_name, size, p, out, params[(fam_name, size)], hashes[p], eval_path, split
                )
                say(f"built   {e.name}  accuracy={e.accuracy:.4f}  bytes={e.bytes}")
        save_entries(zoo_dir, list(entries.values()))
    return [e.variant() for e in load_entries(zoo_dir)]
