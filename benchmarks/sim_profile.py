"""Where a simulated run's time goes: one ``sim_speed`` workload under cProfile, its own time summed by layer
(numpy, the tuner's / learner's / simulator's Python, builtins) and the costliest functions.

Issue 14 asks for this profile where a speed goal is not met. Run from the repo root:

    .venv/bin/python -m benchmarks.sim_profile --devices 1000 --requests 1000000 --json out.json

cProfile costs every Python call ~1 us more, so a layer made of many small Python calls looks bigger than it is:
read the shares as where the work is, and ``sim_speed``'s unprofiled CPU split (decide / observe / engine, printed
first) as what it costs. """

from __future__ import annotations

import cProfile
import pstats
import time

from benchmarks.common import parser, print_table, write_json
from benchmarks.sim_speed import measure, timed_simulation, warm_up, workload

# (layer, test on a pstats key (file, line, name)): the first that matches names the layer
LAYERS = (
    ("numpy (C)", lambda f, n: "numpy" in n or "/numpy/" in f),
    ("tuner Python", lambda f, n: "/oltunes/tuner/" in f),
    ("learner Python", lambda f, n: "/oltunes/learner/" in f),
    ("simulator Python", lambda f, n: "/oltunes/sim/" in f or f.endswith("/oltunes/simulation.py")),
    ("other OLTunes Python", lambda f, n: "/oltunes/" in f),
    ("Python builtins (dict, list, len, ...)", lambda f, n: f == "~"),
)


def layer_of(key: tuple[str, int, str]) -> str:
    """The layer a pstats function key belongs to (``other`` if none claims it)."""
    file, _, name = key
    return next((layer for layer, test in LAYERS if test(file, name)), "other")


def by_layer(stats: pstats.Stats) -> dict[str, dict[str, float]]:
    """Own time (tottime) and primitive calls per layer, costliest first."""
    out: dict[str, dict[str, float]] = {}
    for key, (prim_calls, _, tottime, _, _) in stats.stats.items():
        row = out.setdefault(layer_of(key), {"own_s": 0.0, "calls": 0})
        row["own_s"] += tottime
        row["calls"] += prim_calls
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["own_s"]))


def top_functions(stats: pstats.Stats, n: int) -> list[dict]:
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:n]
    return [{"function": f"{file.rsplit('/oltunes/', 1)[-1]}:{line}({name})", "layer": layer_of((file, line, name)),
             "calls": prim, "own_s": tot, "cum_s": cum} for (file, line, name), (prim, _, tot, cum, _) in rows]


def profiled_run(devices: int, requests: int, policy: str) -> tuple[pstats.Stats, dict]:
    warm_up(policy)
    prep = workload(devices, requests)  # the very workload sim_speed.measure runs
    sim, timed = timed_simulation(prep, policy)
    prof = cProfile.Profile()
    cpu0 = time.process_time()
    prof.runcall(sim.run, timed)
    cpu = time.process_time() - cpu0
    return pstats.Stats(prof), {"requests": prep.n_requests, "profiled_cpu_s": cpu, **timed.calls}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--policy", default="oltunes")
    p.add_argument("--devices", type=int, default=1000)
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--top", type=int, default=25, help="how many functions to list")
    a = p.parse_args()
    plain = measure(a.devices, a.requests, a.policy)  # first, unprofiled: what the run costs
    print_table(f"{a.policy}, {a.devices} devices, {plain['requests']:,} requests, unprofiled (CPU s)",
                ["sim CPU s", "decide", "observe", "engine", "decisions", "observations", "decide ms / decision",
                 "observe ms / measurement"],
                [[plain["sim_cpu_s"], plain["decide_cpu_s"], plain["observe_cpu_s"], plain["engine_cpu_s"],
                  plain["decisions"], plain["observations"], 1e3 * plain["decide_cpu_s"] / plain["decisions"],
                  1e3 * plain["observe_cpu_s"] / plain["observations"]]])
    stats, run = profiled_run(a.devices, a.requests, a.policy)
    layers = by_layer(stats)
    total = sum(v["own_s"] for v in layers.values())
    print_table(f"own time by layer under cProfile ({run['profiled_cpu_s']:.1f} CPU s profiled)",
                ["layer", "own s", "share", "calls", "calls / decision"],
                [[k, v["own_s"], v["own_s"] / total, v["calls"], v["calls"] / run["decide"]] for k, v in layers.items()])
    top = top_functions(stats, a.top)
    print_table("costliest functions by own time", ["function", "layer", "calls", "own s", "cum s"],
                [[r["function"], r["layer"], r["calls"], r["own_s"], r["cum_s"]] for r in top])
    write_json(a.json, {"policy": a.policy, "devices": a.devices, "unprofiled": plain, "profiled": run,
                        "layers": layers, "top": top})


if __name__ == "__main__":
    main()
