"""`oltunes rltune train|eval`: train the batch-queue policy on a trace; compare queue policies on held-out data."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from oltunes.cli.tables import print_table
from oltunes.cli.worker import clean_errors

rltune_app = typer.Typer(no_args_is_help=True, help="RLTune: learned queue order + MILP placement for GPU batch jobs.")
TraceOpt = Annotated[str, typer.Option("--trace", "-t", help="trace loader: philly, alibaba or helios")]
FileOpt = Annotated[Path | None, typer.Option("--file", help="trace file (default: its file under shared_data)")]
LoadOpt = Annotated[float | None, typer.Option(help="offered load of each sequence (default 1.5)")]


@rltune_app.command("train")
def train_cmd(
    trace: TraceOpt,
    file: FileOpt = None,
    seed: Annotated[int, typer.Option(help="seed of sequences, network and sampling")] = 0,
    iterations: Annotated[int, typer.Option(help="PPO iterations")] = 30,
    episodes: Annotated[int, typer.Option(help="episodes (sequences) per iteration")] = 4,
    length: Annotated[int, typer.Option(help="jobs per training sequence")] = 256,
    objective: Annotated[str, typer.Option(help="bounded_slowdown, wait, turnaround or utilisation")] =
        "bounded_slowdown",
    baseline: Annotated[str, typer.Option(help="queue policy whose score the reward is relative to")] = "fcfs",
    load: LoadOpt = None,
    out: Annotated[Path | None, typer.Option(help="weights (default $OLTUNES_HOME/rltune/TRACE-seedN.safetensors)")]
        = None,
) -> None:
    """Train the queue policy with PPO on the first 70 % of a trace; write safetensors weights + metadata."""
    console = Console(stderr=True)
    with clean_errors():
        from oltunes.config import get_settings
        from oltunes.rltune.net import save_policy
        from oltunes.rltune.ppo import TrainConfig, train
        from oltunes.rltune.traces import DEFAULT_LOAD, load_trace

        cfg = TrainConfig(seed=seed, iterations=iterations, episodes_per_iteration=episodes, sequence_length=length,
                          objective=objective, baseline=baseline, load=DEFAULT_LOAD if load is None else load)
        tr = load_trace(trace, file)
        console.print(f"training on {tr.name}: up to {iterations} iterations x {episodes} episodes of {length} jobs "
                      f"(validated every {cfg.validate_every}; stops early after {cfg.patience} checks without "
                      "improvement)", highlight=False)  # fmt: skip
        net, meta = train(tr, cfg, progress=lambda msg: console.print(msg, highlight=False))
        path = out or get_settings().home / "rltune" / f"{trace}-seed{seed}.safetensors"
        console.print(f"trained in {meta['train_seconds']:g} s; weights: {save_policy(net, path, meta)}")


@rltune_app.command("eval")
def eval_cmd(
    trace: TraceOpt,
    file: FileOpt = None,
    weights: Annotated[Path | None, typer.Option(help="trained policy (adds 'rltune' to the policies)")] = None,
    policies: Annotated[str | None, typer.Option(help="comma-separated queue policies (default: every baseline)")]
        = None,
    sequences: Annotated[int, typer.Option(help="held-out sequences")] = 10,
    length: Annotated[int, typer.Option(help="jobs per sequence")] = 256,
    load: LoadOpt = None,
    mapper: Annotated[str, typer.Option(help="milp or greedy")] = "milp",
    time_limit: Annotated[float, typer.Option(help="MILP time limit per decision, s")] = 0.1,
    json_path: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
    plots: Annotated[Path | None, typer.Option(help="write bar charts here")] = None,
) -> None:
    """Compare queue policies on held-out sequences (last 30 % of the trace): JCT, queueing, slowdown, util, MILP."""
    with clean_errors():
        from oltunes.rltune.evaluate import BASELINES, evaluate_trace
        from oltunes.rltune.traces import load_trace

        names = [p.strip() for p in policies.split(",") if p.strip()] if policies else list(BASELINES)
        if weights is not None and "rltune" not in names:
            names.append("rltune")
        say = Console(stderr=True)
        say.print(f"evaluating {len(names)} policies on {sequences} held-out sequences x {length} jobs ({mapper} mapper)",
                  highlight=False)  # fmt: skip
        rep = evaluate_trace(load_trace(trace, file), names, weights=weights, n=sequences, length=length, load=load,
                             mapper=mapper, time_limit_s=time_limit,
                             progress=lambda msg: say.print(msg, highlight=False))  # fmt: skip
        _print_report(trace, rep, f"{trace}: {sequences} held-out sequences x {length} jobs, {mapper} mapper",
                      json_path, plots, Console(width=140))


def _print_report(key: str, rep: dict, title: str, json_path: Path | None, plots: Path | None, console: Console
                  ) -> None:
    """The per-policy table; the JSON report ({key: {policy: metrics}}) and bar charts when asked."""
    from oltunes.atomic import atomic_write_json
    from oltunes.rltune.evaluate import table, write_plots

    print_table(console, title, *table(rep))
    if json_path:
        console.print(f"report: {atomic_write_json(json_path, {key: rep})}")
    for p in write_plots({key: rep}, plots) if plots else []:
        console.print(f"plot: {p}")


def simulate_batch_queue(scenario: str, policies: list[str] | None, json_path: Path | None, plots: Path | None,
                         console: Console) -> None:
    """``oltunes simulate`` on a batch-queue scenario: every queue policy on its held-out sequences."""
    from oltunes.rltune.scenario import run

    sc, rep = run(scenario, policies, progress=lambda msg: console.print(msg, highlight=False))
    title = (f"batch-queue scenario {sc.name}: {sc.trace} trace, {sc.sequences} held-out sequences x {sc.length} "
             f"jobs, load {sc.load:g}, {sc.mapper} mapper")
    _print_report(sc.name, rep, title, json_path, plots, console)


def register(root: typer.Typer) -> None:
    """Attach ``oltunes rltune`` to the root CLI."""
    root.add_typer(rltune_app, name="rltune")
