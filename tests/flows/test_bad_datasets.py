"""Bad datasets are refused once, in the flow, before any decision, output file or worker; never retried."""

from __future__ import annotations

import asyncio

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prefect import flow

from flows.batch_inference import batch_inference
from oltunes.errors import DataError, InputRejected
from oltunes.inventory import CATALOG
from oltunes.launchers import WorkerSpec
from oltunes.types import Candidate, JobSpec, Pool
from oltunes.zoo import list_variants
from tasks.workers import run_worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # a real Prefect server


def table(n: int = 40, width: int = 64, x_type=pa.float32(), ids=None, fill=None) -> pa.Table:
    x = np.random.default_rng(0).random((n, width)).astype(np.float32)
    if fill is not None:
        fill(x)
    if x_type == pa.string():
        values = pa.array([str(v) for v in x.ravel()])
    else:
        values = pa.array((x * 100).astype(np.int64).ravel() if x_type == pa.int64() else x.ravel(), x_type)
    offsets = pa.array(np.arange(0, n * width + 1, width, dtype=np.int32))
    cols = {
        "id": pa.array(np.arange(n) if ids is None else ids, pa.int64()),
        "x": pa.ListArray.from_arrays(offsets, values),
        "label": pa.array(np.zeros(n, dtype=np.int64)),
    }
    return pa.table(cols)


def nan_rows(x: np.ndarray) -> None:
    x[[3, 7, 11], 5] = np.nan


def inf_row(x: np.ndarray) -> None:
    x[20, 0] = np.inf


BAD = {
    # name: (table or raw bytes, what the error must say)
    "wrong-shape": (lambda: table(width=10), r"column 'x'.*10 values.*64 values"),
    "string-features": (lambda: table(x_type=pa.string()), r"'x' has dtype"),
    "int64-features": (lambda: table(x_type=pa.int64()), r"column 'x'.*dtype int64.*float32"),
    "duplicate-ids": (lambda: table(ids=np.r_[np.arange(39), 0]), r"'id' values are not unique"),
    "nan-rows": (lambda: table(fill=nan_rows), r"column 'x' has 3 of 40 rows with NaN or Inf"),
    "inf-row": (lambda: table(fill=inf_row), r"column 'x' has 1 of 40 rows with NaN or Inf"),
    "empty": (lambda: table(n=0), r"is empty"),
    "no-x-column": (lambda: table().rename_columns(["id", "features", "label"]), r"no column named 'x'"),
    "garbage-file": (lambda: b"PAR1 this is not a parquet file" * 20, r"cannot be read.*valid \.parquet"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_dataset_is_refused_before_any_work_naming_file_and_column(settings_env, tmp_path, case):
    settings_env()
    make, says = BAD[case]
    data = tmp_path / f"{case}.parquet"
    content = make()
    data.write_bytes(content) if isinstance(content, bytes) else pq.write_table(content, data)
    out = tmp_path / "out"
    with pytest.raises(DataError, match=says) as e:
        asyncio.run(batch_inference(family="cnn", dataset=str(data), output=str(out), slo_ms=500.0, job_id=f"bad-{case}"))
    assert str(data) in str(e.value)  # names the file
    assert not out.exists()  # no _decision.json, no _plan.json, no worker directory


def test_the_reason_reaches_the_flow_runs_failure_message(settings_env, tmp_path):
    from prefect.client.orchestration import get_client

    settings_env()
    data = tmp_path / "nan.parquet"
    pq.write_table(table(fill=nan_rows), data)
    state = asyncio.run(
        batch_inference(family="cnn", dataset=str(data), output=str(tmp_path / "o"), slo_ms=500.0, return_state=True)
    )
    with pytest.raises(DataError):
        state.result()

    async def stored_state():  # what the Prefect API (and its UI) shows for this run
        async with get_client() as c:
            return (await c.read_flow_run(state.state_details.flow_run_id)).state

    stored = asyncio.run(stored_state())
    assert stored.is_failed()
    assert "3 of 40 rows with NaN or Inf" in stored.message and str(data) in stored.message


@flow(name="one-worker")
async def one_worker(spec: WorkerSpec) -> None:
    await run_worker("local", spec, 120.0)


def test_a_worker_refusing_its_input_is_not_retried(settings_env, tmp_path):
    """Defence in depth: input the flow did not check (here: run_worker alone) makes the worker exit 2 once."""
    settings_env()
    variant = next(v for v in list_variants(family="cnn"))
    data = tmp_path / "int.parquet"
    pq.write_table(table(x_type=pa.int64()), data)
    pool = Pool(name="cpu", accelerator=CATALOG["cpu"], count=1)
    cand = Candidate(pool="cpu", accelerator="cpu", variant=variant, batch_size=8, concurrency=1)
    spec = WorkerSpec(mode="batch", job=JobSpec(family="cnn", slo_ms=100), candidate=cand, pool=pool,
                      run_dir=tmp_path / "w" / "_run", input_path=data, output_dir=tmp_path / "w", shard_size=10)  # fmt: skip
    with pytest.raises(InputRejected, match=r"rejected its input: input dtype int64 does not match"):
        asyncio.run(one_worker(spec))
    log = (tmp_path / "w" / "_run" / "worker.log").read_text()
    assert log.count("\n--- ") == 1  # started once: a retry would fail the same way
    assert not list((tmp_path / "w").glob("part-*.parquet"))
