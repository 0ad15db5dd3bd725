"""Probe shards' output guarantee: after a SIGKILL during a probe, the job's output holds the input's rows, once.

Each scenario runs the real batch flow (a process of its own: worker processes running ONNX Runtime, the local
launcher, the in-process tuner, MLflow SQLite, Prefect) on one dataset with probe shards on, and kills something
by PID once the first trial's probe shard has written its first shard:

- ``none``: no fault;
- ``worker``: the probe's worker (the flow's retry resumes it);
- ``flow``: the flow process (its worker dies with it), then the flow is run again on the same output;
- ``flow-rest``: the flow process once the rest of the job has begun, then run again.

Then it counts the output's rows against the input's ids: rows, duplicates, lost (input ids missing), extra (ids
not in the input). Target (issue 30): rows == input rows, duplicates 0, lost 0, in every scenario.

    .venv/bin/python -m benchmarks.probe_shards --items 20000 --json benchmarks/results/probe_shards.json
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks.common import parser, print_table, write_json

FLOW = r"""
import asyncio, json, sys
from flows.batch_inference import batch_inference
res = asyncio.run(batch_inference(**json.loads(sys.argv[1])))
first = res.first_decision.candidate.key if res.first_decision else None
print("OUTCOME " + json.dumps({"probes": len(res.probes), "first": first, "ran_on": res.decision.candidate.key}), flush=True)
"""
SCENARIOS = ("none", "worker", "flow", "flow-rest")
TRIAL_PROBE = 1  # the first trial's probe shard (probe 0 is the decision's own choice)


def flow(params: dict, log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "a") as f:
        return subprocess.Popen([sys.executable, "-c", FLOW, json.dumps(params)], stdout=f, stderr=subprocess.STDOUT,
                                env=env)


def first_shard_pid(out: Path, part: int, proc: subprocess.Popen, timeout_s: float = 600) -> int | None:
    """The PID of part `part`'s worker once it has written its first shard; None if the flow ended first."""
    wdir = out / f"worker-{part:05d}"
    pidfile, first = wdir / "_run" / "worker.pid", wdir / "part-00000.parquet"
    deadline = time.monotonic() + timeout_s
    while not (pidfile.exists() and first.exists()):
        if proc.poll() is not None or time.monotonic() > deadline:
            return None
        time.sleep(0.005)
    return int(pidfile.read_text())


def run_scenario(name: str, data: Path, work: Path, params: dict, env: dict[str, str]) -> dict:
    from oltunes.launchers.probe_shards import recorded_probes

    out, log = work / name, work / f"{name}.log"
    p = {**params, "dataset": str(data), "output": str(out), "job_id": f"bench-{name}"}
    t0 = time.perf_counter()
    proc = flow(p, log, env)
    killed, runs = "nothing", 1
    if name != "none":
        n_probes = None
        if name == "flow-rest":  # the first part after the probe shards
            while n_probes is None and proc.poll() is None:
                rec = recorded_probes(out) if (out / "_probes.json").is_file() else None
                n_probes = len(rec.probes) if rec else None
                time.sleep(0.01)
        part = TRIAL_PROBE if name != "flow-rest" else (n_probes or 0)
        pid = first_shard_pid(out, part, proc)
        if pid is not None:
            os.kill(pid if name == "worker" else proc.pid, signal.SIGKILL)
            killed = f"{'worker' if name == 'worker' else 'flow'} (part {part})"
    rc = proc.wait()
    if name.startswith("flow") and killed != "nothing":
        runs += 1
        rc = flow(p, log, env).wait()
    wall = time.perf_counter() - t0
    if rc != 0:  # say why, before the temporary directory (and the log) goes
        print(f"scenario {name}: the flow exited {rc}; its log ends:\n" + "\n".join(log.read_text().splitlines()[-30:]),
              file=sys.stderr)
    lines = reversed(log.read_text().splitlines())
    outcome = next((json.loads(line[8:]) for line in lines if line.startswith("OUTCOME ")), {})
    return {"scenario": name, "killed": killed, "runs": runs, "rc": rc, "wall_s": wall, **count_rows(data, out),
            "probes": len((recorded_probes(out).probes if recorded_probes(out) else [])),
            "first_choice": outcome.get("first"), "ran_on": outcome.get("ran_on")}


def count_rows(data: Path, out: Path) -> dict:
    import pyarrow.parquet as pq

    from oltunes.launchers.batch_job import job_outputs

    want = Counter(pq.read_table(data, columns=["id"]).column("id").to_pylist())
    got = Counter(i for f in job_outputs(out) for i in pq.read_table(f, columns=["id"]).column("id").to_pylist())
    return {"input_rows": sum(want.values()), "output_rows": sum(got.values()),
            "duplicates": sum(n - 1 for n in got.values() if n > 1), "lost": sum(1 for i in want if i not in got),
            "extra": sum(1 for i in got if i not in want)}


def main() -> None:
    a = parser(__doc__.splitlines()[0])
    a.add_argument("--items", type=int, default=20_000)
    a.add_argument("--shard-size", type=int, default=25)
    a.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    args = a.parse_args()

    from prefect.testing.utilities import prefect_test_harness

    from oltunes.config import get_settings
    from oltunes.zoo import make_dataset

    zoo = get_settings().zoo_dir
    if not zoo.is_dir():
        raise SystemExit(f"no model zoo at {zoo}: build it first (`oltunes zoo build`)")
    params = dict(family="cnn", slo_ms=1000.0, accuracy_floor=0.5, probes=2, probe_share=0.1, probe_min_items=1_000,
                  items_per_worker=max(args.items // 2, 1), shard_size=args.shard_size)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="probe-shards-") as tmp:
        work, home = Path(tmp), Path(tmp) / "home"
        home.mkdir()
        (home / "zoo").symlink_to(zoo)  # a home of its own: its runs and tuner state touch nobody's
        os.environ["OLTUNES_HOME"] = str(home)
        get_settings.cache_clear()
        data = make_dataset("cnn", args.items, work / "in.parquet", seed=30)
        with prefect_test_harness(server_startup_timeout=180):
            from prefect.settings import PREFECT_API_URL

            env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}  # the flows share its API
            results = [run_scenario(s, data, work, params, env) for s in args.scenarios]
    cols = ["scenario", "killed", "runs", "input_rows", "output_rows", "duplicates", "lost", "extra", "probes",
            "ran_on", "wall_s"]
    print_table("Probe shards: output rows after a SIGKILL during a probe", cols,
                [[r[c] for c in cols] for r in results])
    ok = all(r["output_rows"] == r["input_rows"] and not (r["duplicates"] or r["lost"] or r["extra"]) and r["rc"] == 0
             for r in results)
    print(f"exactly once in every scenario: {ok}")
    write_json(args.json, {"items": args.items, "params": params, "scenarios": results, "exactly_once": ok})


if __name__ == "__main__":
    main()
