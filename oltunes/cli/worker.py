"""`oltunes worker` commands: batch mode and serve mode of the inference worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from oltunes.errors import InputRejected, OLTunesError

worker_app = typer.Typer(no_args_is_help=True, help="The inference worker (ONNX Runtime): batch and serve modes.")
err = Console(stderr=True)

EXIT_USAGE = InputRejected.exit_code  # the launcher reads it as "bad input: do not retry"


@contextmanager
def clean_errors() -> Iterator[None]:
    """Turn OLTunes errors into one line on stderr and exit code 2 (no traceback for expected failures)."""
    try:
        yield
    except OLTunesError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)  # one line: easy to grep
        raise typer.Exit(EXIT_USAGE) from None


def resolve_model(spec: str) -> Path:
    """A path to an ONNX file, or the name of a zoo variant (e.g. ``cnn-l-int8``)."""
    path = Path(spec)
    if path.exists() or path.suffix == ".onnx" or "/" in spec:
        return path
    from oltunes.zoo import get_variant

    return Path(get_variant(spec).path)


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="ONNX file, or a zoo variant name such as cnn-l-int8")]
ThreadsOpt = Annotated[int, typer.Option(help="ONNX Runtime intra-op threads per session")]
ConcOpt = Annotated[int, typer.Option(help="sessions running batches in parallel")]
DeviceOpt = Annotated[str, typer.Option(help="auto (CUDA when it really loads, else CPU), cpu or cuda")]


@worker_app.command("batch")
def batch(
    model: ModelOpt,
    input: Annotated[Path, typer.Option("--input", "-i", help="dataset: .npz or .parquet with id, x[, label]")],
    output: Annotated[Path, typer.Option("--output", "-o", help="directory for part-NNNNN.parquet shards")],
    batch_size: Annotated[int, typer.Option(help="items per inference call")] = 64,
    threads: ThreadsOpt = 1,
    concurrency: ConcOpt = 1,
    shard_size: Annotated[int, typer.Option(help="rows per output shard (the unit of resumption)")] = 10_000,
    max_shards: Annotated[int | None, typer.Option(help="stop after this many new shards")] = None,
    device: DeviceOpt = "auto",
    report: Annotated[Path | None, typer.Option(help="write the measurement record (JSON) here")] = None,
    overwrite: Annotated[bool, typer.Option(help="discard shards of a different earlier job in --output")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="print the measurement record as JSON")] = False,
) -> None:
    """Run a dataset through a model; resumable: a re-run skips finished shards."""
    with clean_errors():
        from oltunes.worker.batch import run_batch

        rec = run_batch(
            resolve_model(model),
            input,
            output,
            batch_size=batch_size,
            threads=threads,
            concurrency=concurrency,
            shard_size=shard_size,
            max_shards=max_shards,
            device=device,
            report=report,
            overwrite=overwrite,  # type: ignore[arg-type]
        )
    if json_out:
        typer.echo(json.dumps(rec.model_dump(mode="json")))
        return
    out = Console()
    acc = "n/a" if rec.accuracy is None else f"{rec.accuracy:.4f}"
    out.print(
        f"{rec.items} items ({rec.shards_done} shards written, {rec.shards_skipped} skipped, complete={rec.complete}) "
        f"in {rec.wall_s:.3f}s: {rec.throughput_items_per_s:.1f} items/s, batch p50/p95/p99 "
        f"{rec.latency_p50_ms}/{rec.latency_p95_ms}/{rec.latency_p99_ms} ms, accuracy {acc}, {rec.provider}",
        soft_wrap=True,
    )


@worker_app.command("serve")
def serve(
    model: ModelOpt,
    host: Annotated[str, typer.Option(help="bind address (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    max_batch: Annotated[int, typer.Option(help="most items per session call")] = 32,
    max_delay_ms: Annotated[float, typer.Option(help="longest a request waits for its batch to fill")] = 5.0,
    threads: ThreadsOpt = 1,
    concurrency: ConcOpt = 1,
    device: DeviceOpt = "auto",
    name: Annotated[str | None, typer.Option(help="served model name (default: the model file's stem)")] = None,
    max_queue_ms: Annotated[float, typer.Option(help="refuse (429) requests predicted to queue longer (the SLO)")] = 1000.0,
) -> None:
    """Open Inference Protocol (KServe v2) with dynamic batching; also POST /infer, GET /metrics, /window, /health."""
    with clean_errors():
        from oltunes.worker.serve import serve as run_server
        from oltunes.worker.serve import serve_config

        cfg = serve_config(
            model=resolve_model(model),
            host=host,
            port=port,
            max_batch=max_batch,
            max_delay_ms=max_delay_ms,
            threads=threads,
            concurrency=concurrency,
            device=device,
            name=name,
            max_queue_ms=max_queue_ms,
        )
        run_server(cfg)


def register(root: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    root.add_typer(worker_app, name="worker")
