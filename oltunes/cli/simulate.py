"""`oltunes simulate --scenario NAME_OR_FILE --policies a,b,... [--json PATH] [--plots DIR]`.

Inference-serving scenarios run in :mod:`oltunes.sim`; batch-queue scenarios (``kind: batch-queue``) in
:mod:`oltunes.rltune` (:func:`oltunes.cli.rltune.simulate_batch_queue`)."""

from __future__ import annotations

from pathlib import Path

import typer

SERVING_POLICIES = "oltunes,oltunes-profiled,round-robin,least-loaded,random,static-profile,gavel-like,oracle"


def simulate(
    scenario: str = typer.Option("light", "--scenario", "-s", help="shipped scenario name or a YAML file"),
    policies: str | None = typer.Option(
        None,
        "--policies",
        "-p",
        help="comma-separated policy names (default: every serving policy; a batch-queue scenario's own list)",
    ),
    json_path: Path | None = typer.Option(None, "--json", help="write the report JSON here"),
    plots: Path | None = typer.Option(None, "--plots", help="write latency CDF / violations / energy plots here"),
    mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow", help="log a parent run + one child run per policy"),
    world: str | None = typer.Option(
        None, "--world", help="grounded (sigma per level from real measurements) or stress (independent sigma 0.5); "
                              "default: the scenario's"),
    trials: bool = typer.Option(True, "--trials/--no-trials", help="let the policies that explore (oltunes) run "
                                "shadows and probe shards (docs/simulator.md, Exploration)"),
) -> None:
    """Run a scenario under several policies and compare them (table, JSON, plots, MLflow)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from oltunes.cli.tables import print_table
    from oltunes.errors import OLTunesError
    from oltunes.policies import Policy
    from oltunes.rltune import scenario as batch_queue
    from oltunes.sim import report as R
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import prepare, run_scenario

    console = Console(width=max(Console().width, 130))
    names = [p.strip() for p in (policies or SERVING_POLICIES).split(",") if p.strip()]
    try:
        if batch_queue.is_batch_queue(scenario):
            from oltunes.cli.rltune import simulate_batch_queue

            return simulate_batch_queue(scenario, names if policies else None, json_path, plots, console)
        for n in names:
            Policy.lookup(n)
        sc = load_scenario(scenario)
        if world is not None:
            if world not in ("grounded", "stress"):
                raise typer.BadParameter("--world: grounded or stress")
            sc = sc.model_copy(update={"world": world, "truth_sigma": None if world == "grounded" else sc.truth_sigma})
        prep = prepare(sc)
        console.print(f"world: {prep.world().describe()}")
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                      TimeElapsedColumn(), console=console) as bar:
            tasks = {n: bar.add_task(f"{sc.name}: {n}", total=1.0) for n in names}
            results = run_scenario(prep, names, lambda n, f: bar.update(tasks[n], completed=f), trials=trials)
        rep = R.build(sc, results)
        cols, rows = R.table_rows(rep, short=True)
        print_table(console, f"scenario {sc.name}: {len(prep.jobs)} jobs, {prep.n_requests} requests, "
                             f"{rep['meta']['devices']} devices, {sc.duration_s:g} s", cols, rows)
        console.print("\n".join(f"  {line}" for line in R.column_notes()), highlight=False)
        if rep["learning"]:
            lr = rep["learning"]
            console.print(f"oltunes vs oracle: {R.warmup_note(lr, sc.retune_interval_s)}.\n"
                          f"  SLO attainment after warm-up: {lr['oracle_attainment_after_warmup']:.3f} of the oracle's; "
                          f"regret (violations vs oracle, cumulative) at quarters: "
                          f"{', '.join(f'{x:.3f}' for x in lr['regret_quarters'])}", highlight=False)  # fmt: skip
        if rep["regret_per_quarter"]:
            print_table(console, "regret vs the oracle per quarter of the run (violated requests, share of the quarter's)",
                        ("policy", "q1", "q2", "q3", "q4"),
                        ([name, *(f"{x:.3f}" for x in qs)] for name, qs in rep["regret_per_quarter"].items()))
        cols, rows = R.exploration_rows(rep)
        print_table(console, "exploration: energy share of trials (shadows, probe shards), trials per job"
                             + ("" if trials else " (--no-trials)"), cols, rows)
        if rep["events"]:
            cols, rows = R.event_rows(rep)
            print_table(console, "drift events: SLO violations before/after (2 re-tune intervals) and recovery time",
                        cols, rows)
        if json_path:
            console.print(f"report: {R.write_json(rep, json_path)}")
        written = R.write_plots(results, plots, sc.name) if plots else []
        for p in written:
            console.print(f"plot: {p}")
        if mlflow:
            from oltunes.sim.report import log_report

            console.print(f"MLflow parent run: {log_report(rep, written)}")
    except OLTunesError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


def register(root: typer.Typer) -> None:
    """Attach ``oltunes simulate`` to the root CLI."""
    root.command("simulate")(simulate)
