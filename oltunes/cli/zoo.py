"""`oltunes zoo` commands: build and list the model zoo, register a user model, write a demo dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from oltunes.cli.worker import clean_errors

zoo_app = typer.Typer(no_args_is_help=True, help="Model variants (family x size x precision) with measured accuracy.")
DirOpt = Annotated[Path | None, typer.Option("--zoo-dir", help="zoo folder (default: $OLTUNES_HOME/zoo)")]


@zoo_app.command("build")
def build(
    force: Annotated[bool, typer.Option(help="rebuild even variants whose cached files match")] = False,
    zoo_dir: DirOpt = None,
) -> None:
    """Train, export and measure every shipped variant (cached: unchanged variants are skipped)."""
    out = Console(stderr=True)
    with clean_errors():
        from oltunes.zoo import build_zoo

        variants = build_zoo(zoo_dir, force=force, progress=lambda msg: out.print(msg, highlight=False))
    out.print(f"{len(variants)} variants in the zoo")


def _rows(zoo_dir: Path | None) -> list[dict]:
    from oltunes.zoo import list_entries

    return [
        {
            "family": e.family,
            "variant": e.name,
            "name": e.name,
            "size": e.size,
            "precision": e.precision,
            "accuracy": e.accuracy,
            "path": e.path,
            "params": e.params,
            "bytes": e.bytes,
            "source": e.source,
            "input_shape": list(e.input_shape),
            "input_dtype": e.input_dtype,
            "eval_set": e.eval_set,
            "eval_items": e.eval_items,
        }
        for e in list_entries(zoo_dir)
    ]


@zoo_app.command("list")
def list_(
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per line, one line per variant")] = False,
    zoo_dir: DirOpt = None,
) -> None:
    """List the variants of the zoo (build it first with `oltunes zoo build`)."""
    with clean_errors():
        rows = _rows(zoo_dir)
    if json_out:
        for r in rows:
            typer.echo(json.dumps(r))
        return
    if not rows:
        Console(stderr=True).print("the zoo is empty: run `oltunes zoo build`")
        return
    table = Table(title="model zoo")  # family/size/precision are in the name; --json has every field
    for c in ("variant", "accuracy", "params", "bytes", "source"):
        table.add_column(c, no_wrap=True)
    for r in rows:
        table.add_row(r["variant"], f"{r['accuracy']:.4f}", str(r["params"]), str(r["bytes"]), r["source"])
    Console().print(table)


@zoo_app.command("register")
def register_cmd(
    model: Annotated[Path, typer.Option("--model", "-m", help="your ONNX file")],
    eval_set: Annotated[Path, typer.Option("--eval", help="labelled evaluation set (.npz/.parquet with x, label)")],
    family: Annotated[str, typer.Option(help="family label, e.g. resnet")],
    size: Annotated[str, typer.Option(help="size label, e.g. 50")],
    precision: Annotated[str, typer.Option(help="fp32, fp16 or int8")] = "fp32",
    name: Annotated[str | None, typer.Option(help="variant name (default family-size-precision)")] = None,
    zoo_dir: DirOpt = None,
) -> None:
    """Register your own ONNX model; its accuracy is measured on the evaluation set."""
    with clean_errors():
        from oltunes.zoo import register_variant

        v = register_variant(model, eval_set, family, size, precision, name=name, zoo_dir=zoo_dir)
    typer.echo(json.dumps(v.model_dump(mode="json")))


@zoo_app.command("dataset")
def dataset(
    output: Annotated[Path, typer.Option("--output", "-o", help=".npz or .parquet file to write")],
    n: Annotated[int, typer.Option("--n", help="items")] = 1000,
    seed: Annotated[int, typer.Option(help="draw order")] = 0,
    family: Annotated[
        str | None, typer.Option(help="zoo family the data must fit (all shipped ones share the input)")
    ] = None,
) -> None:
    """Write a labelled input dataset drawn from the held-out split (ids 0..n-1), for demos and tests."""
    with clean_errors():
        from oltunes.zoo import make_dataset

        path = make_dataset(family, n, output, seed)
    typer.echo(str(path))


@zoo_app.command("profile")
def profile(
    out: Annotated[Path, typer.Option("--out", help="CSV of profile-store rows to write")] = Path("zoo_profile.csv"),
    batches: Annotated[str, typer.Option("--batches", help="comma-separated batch sizes")] = "1,2,4,8,16",
    repeats: Annotated[int, typer.Option("--repeats", help="timed batches per (variant, batch)")] = 20,
    variant: Annotated[list[str] | None, typer.Option("--variant", help="only these variants (repeatable)")] = None,
    precision: Annotated[list[str] | None, typer.Option("--precision", help="only these precisions")] = None,
    device: Annotated[str, typer.Option("--device", help="auto (CUDA when it loads), cpu or cuda")] = "auto",
    zoo_dir: DirOpt = None,
) -> None:
    """Measure every zoo variant x batch x precision here (ONNX Runtime's best provider; NVML power on a GPU, CPU
    time on a CPU) and write them as profile-store rows with "measured by this machine" provenance."""
    err = Console(stderr=True)
    with clean_errors():
        from oltunes.errors import ConfigError
        from oltunes.zoo.profile import profile_zoo, write_rows

        try:
            sizes = [int(b) for b in batches.split(",") if b.strip()]
        except ValueError:
            raise ConfigError("--batches: comma-separated integers") from None
        rows = profile_zoo(zoo_dir, batches=sizes, repeats=repeats, variants=variant, precisions=precision,
                           device=device, progress=lambda m: err.print(m, highlight=False))
        err.print(f"{len(rows)} rows: {write_rows(rows, out)}")


def register(root: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    root.add_typer(zoo_app, name="zoo")
